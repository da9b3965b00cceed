"""Logit lens: what would each layer predict?"""

from dashboard.core.pages import Page, register

from .state import LensState

PAGE = register(Page("lens", "Logit lens", ":material/visibility:", state=LensState))
