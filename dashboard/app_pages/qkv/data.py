"""What Q/K/V step by step asks the library for, cached: one query token's steps through one head."""

from __future__ import annotations

import streamlit as st

from dashboard.core.models import Input
from dashboard.core.trace import trace
from probes import explain


@st.cache_data(max_entries=64, show_spinner=False)
def steps(inp: Input, layer: int, head: int, query: int) -> explain.QuerySteps:
    return explain.query_steps(trace(inp), layer, head, query)
