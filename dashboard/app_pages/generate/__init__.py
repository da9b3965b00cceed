"""Generate: what does a decoder write, and where does each new token look?"""

from dashboard.core.pages import Page, register

from .state import GenerateState

PAGE = register(Page("generate", "Generate", ":material/edit_note:", state=GenerateState))
