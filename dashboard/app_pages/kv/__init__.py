"""What if it attended less?: what does cutting the KV cache cost the model's predictions?"""

from dashboard.core.pages import Page, register

from .state import KVState

PAGE = register(Page("kv", "What if it attended less?", ":material/compress:", state=KVState))
