"""Find heads: which head attends from this token to that word, on this sentence and on held-out controls?"""

from dashboard.core.pages import Page, register

from .state import FindState

PAGE = register(Page("find", "Find heads", ":material/manage_search:", state=FindState))
