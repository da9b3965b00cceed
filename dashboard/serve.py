"""The app with a warm start: ``streamlit run dashboard/serve.py`` (what ``make app`` runs).

The same app as ``streamlit run dashboard/app.py``, served through Streamlit's ``st.App`` so that the work
of the default view starts when the server starts, not when the first browser connects (see
``dashboard/warm.py``).
"""

from __future__ import annotations

import sys
from contextlib import asynccontextmanager
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `streamlit run` from a plain checkout

from dashboard import warm  # noqa: E402


@asynccontextmanager
async def lifespan(_app):
    warm.start()
    yield


app = st.App("app.py", lifespan=lifespan)
