"""Circuit: which earlier heads does this head read from?"""

from dashboard.core.pages import Page, register

from .state import CircuitState

PAGE = register(Page("circuit", "Circuit", ":material/hub:", state=CircuitState,
                     runs={"patch": "path patching (Circuit)"}))
