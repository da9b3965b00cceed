"""Heads: which heads are positional, syntactic, semantic?"""

from dashboard.core.pages import Page, register

from .state import HeadsState

PAGE = register(Page("heads", "Heads", ":material/psychology:", state=HeadsState,
                     runs={"heads": "the probe run (Heads)"}))
