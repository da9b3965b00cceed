"""The app's pages, registered by name: each page is a folder ``dashboard/app_pages/<key>/`` whose ``__init__.py``
registers its :class:`Page` here, in menu order (``dashboard/app_pages/__init__.py`` imports them in that order). The
frame (navigation, the link) and the shared pieces (``ui.page_link``) read this registry; nothing else names a page.

No Streamlit here: the registry is plain data, read by the link's parser as by the app."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .parts import LinkPart


@dataclass(frozen=True)
class Page:
    """One page: its url path (``key``), its title and icon in the menu, its part of the link (``state``: a
    :class:`~dashboard.core.parts.LinkPart` holding the parameters only this page reads; None: the page has none), and
    the long work a link to it runs again when it opens (``runs``: a name in the link's ``ran`` → its words)."""

    key: str
    title: str
    icon: str
    state: type[LinkPart] | None = None
    runs: dict[str, str] = field(default_factory=dict)

    @property
    def view(self) -> str:
        """The module that draws it (its ``render(ctx)``)."""
        return f"dashboard.app_pages.{self.key}.view"


PAGES: dict[str, Page] = {}  # url path -> page, in menu order
FIRST = "explore"  # the page a link that names no page opens on (links written before the tour did)
HOME = "start"  # the page a bare address opens on: the tour of findings


def register(page: Page) -> Page:
    """Add ``page`` to the menu (once; registering it again keeps one entry)."""
    if page.key in PAGES and PAGES[page.key] != page:
        raise ValueError(f"two pages are registered as {page.key!r}")
    for other in PAGES.values():  # a part of the link is one page's: its parameters are read by that page alone
        if other.key != page.key and other.state is not None and other.state is page.state:
            raise ValueError(f"pages {other.key!r} and {page.key!r} share one part of the link")
    PAGES[page.key] = page
    return page


def runs() -> dict[str, str]:
    """Every page's long work that a link runs again, in menu order: name -> its words."""
    return {name: words for page in PAGES.values() for name, words in page.runs.items()}


def parts() -> list[type[LinkPart]]:
    """The pages' own parts of the link, in menu order."""
    return [page.state for page in PAGES.values() if page.state is not None]
