"""Explore: where does this head look?"""

from dashboard.core.pages import Page, register

from .state import ExploreState

PAGE = register(Page("explore", "Explore", ":material/grid_on:", state=ExploreState))
