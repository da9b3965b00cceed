"""Parity: does our reimplementation compute the same attention as Hugging Face, on every layer and head?"""

from dashboard.core.pages import Page, register

PAGE = register(Page("parity", "Parity", ":material/rule:"))
