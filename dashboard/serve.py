"""The app with a warm start: ``streamlit run dashboard/serve.py`` (what ``make app`` runs).

The same app as ``streamlit run dashboard/app.py``, served through Streamlit's ``st.App``; loading this
file starts the work of the default view (``dashboard/warm.py``) before the server even listens, so it
runs while the server starts and the first browser loads the page, not after the browser has connected.
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `streamlit run` from a plain checkout

from dashboard import warm  # noqa: E402

warm.start()
app = st.App("app.py")
