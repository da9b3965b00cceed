"""Does it matter?: what changes when a head is taken out?"""

from dashboard.core.pages import Page, register

from .state import EffectsState

PAGE = register(Page("effects", "Does it matter?", ":material/science:", state=EffectsState))
