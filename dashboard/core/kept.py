"""Long work a page computes outside Streamlit's cache and keeps in it: a cached function may not draw (its
elements would be replayed on every hit), so a page's grid or run that shows a progress bar is computed by the page
and then stored in a ``st.cache_data`` function of its own that takes the result as ``_frame`` (not part of the
key) and raises :class:`NotCached` when asked for a result it does not hold (an exception is never cached)."""

from __future__ import annotations


class NotCached(Exception):
    """Raised by a keeping function asked for a result it does not hold."""
