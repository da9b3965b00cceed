"""What Parity asks the library for besides the comparison (``dashboard.core.parity``): the massive activations."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard.core.models import Input
from dashboard.core.trace import trace
from probes import parity


@st.cache_data(max_entries=64, show_spinner=False)
def massive_activations(inp: Input) -> pd.DataFrame:
    """The hidden-state numbers over 100 and over 1,000 × their layer's median size (Parity's table)."""
    return parity.massive_activations(trace(inp))
