"""Cost: why the lazy path? Memory and time against input length."""

from dashboard.core.pages import Page, register

PAGE = register(Page("cost", "Cost", ":material/speed:"))
