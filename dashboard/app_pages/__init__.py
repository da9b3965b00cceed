"""The app's pages, one folder each, in menu order. A page's folder holds its view (``view.py``: ``render(ctx)``),
its cached calls (``data.py``), its charts (``charts.py``), its part of the link (``state.py``) and its record
(``__init__.py``: the :class:`~dashboard.core.pages.Page` it registers). A page imports the shared app core
(``dashboard.core``) and the library, never another page (pyproject.toml: the import contracts).

Importing this package registers every page, in the order of the imports below: that is the menu's order.

The folder is not called ``pages``: Streamlit takes a ``pages/`` folder beside the entry script (``dashboard/app.py``)
for its older multipage mode, in which every session's first run ignores ``st.navigation``'s pages and tells a link
to a page's path (``/cost``) "Page not found"."""

from . import start, explore, find, qkv, generate, lens, parity, heads, effects, circuit, cost, kv  # noqa: F401, I001
