"""What Find heads asks the library for, cached: every head's weight and value-weighted norm from the query token
on the key and distractor words."""

from __future__ import annotations

import numpy as np
import streamlit as st

from dashboard.core.models import Input, model_of
from dashboard.core.trace import trace
from probes import explain


@st.cache_data(max_entries=64, show_spinner=False)
def margins(inp: Input, query: int, keys: tuple[int, ...], other: tuple[int, ...] = ()) -> explain.Margins:
    """Every layer × head's weight from one query token on a key word, on a distractor word and on the sink."""
    return explain.margins(trace(inp), query, list(keys), list(other))



@st.cache_data(max_entries=64, show_spinner=False)
def query_norms(inp: Input, query: int, keys: tuple[int, ...]) -> np.ndarray:
    """Every layer × head's value-weighted norm from one query token on some key tokens ``[layers, heads]``."""
    from probes.effects.norms import query_norms as norms

    return norms(trace(inp), model_of(inp), query, list(keys))
