"""Driving the app headless with Streamlit's AppTest, shared by the page tests: open it from a link, and read
its messages as a reader sees them."""

from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")


def open_app(**params) -> AppTest:
    """The app as a link with these query parameters opens it, after its first run (which must not raise)."""
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in params.items():
        at.query_params[key] = str(value)
    at.run()
    assert not at.exception, at.exception
    return at


def texts(elements) -> str:
    """The text of messages as a reader sees it (the app escapes user text as markdown: unescaped here)."""
    return re.sub(r"\\(.)", r"\1", "\n".join(e.value for e in elements)).replace("\u2060", "")
