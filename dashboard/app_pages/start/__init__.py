"""Start here: a short tour of what holds on the offline models, each finding with its held-out evidence and one click
into the page that shows it. A bare address opens the app here (``dashboard.core.pages.HOME``)."""

from dashboard.core.pages import Page, register

PAGE = register(Page("start", "Start here", ":material/flag:"))
