"""Q/K/V step by step: how is one weight computed? (It reads the core's layer, head and query token alone.)"""

from dashboard.core.pages import Page, register

PAGE = register(Page("qkv", "Q/K/V step by step", ":material/calculate:"))
