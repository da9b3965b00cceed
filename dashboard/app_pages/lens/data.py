"""What the Logit lens asks the library for, cached: every layer's top tokens over a window of the text."""

from __future__ import annotations

import streamlit as st

from dashboard.core.models import model_named


@st.cache_data(max_entries=16, show_spinner="Reading every layer through the unembedding…")
def lens(name: str, text: str, truncate: bool, positions: tuple[int, int], layer: int | None = None):
    """The logit lens of ``text`` at positions [lo, hi) (a window of a long text): every layer's top tokens, and,
    with ``layer``, the direct effect of that layer's heads (a ``Lens`` of small frames)."""
    from probes.effects.lens import logit_lens

    return logit_lens(model_named(name), text, truncate=truncate, positions=range(*positions),
                   heads=layer is not None, head_layers=None if layer is None else [layer])
