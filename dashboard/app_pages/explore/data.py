"""What Explore asks the library for, cached: one head's value-weighted norms, the rollout, a layer's heads over a
window, "Why this weight?", the word-level view and bertviz's views."""

from __future__ import annotations

import numpy as np
import streamlit as st

from dashboard.core.models import Input, model_of
from dashboard.core.trace import trace
from probes import explain


@st.cache_data(max_entries=256, show_spinner=False)
def head_norms(inp: Input, layer: int, head: int, rows: tuple[int, int] | None = None) -> np.ndarray:
    """One head's value-weighted norms ‖α_ij·f(x_j)‖ ``[r, n]`` (Kobayashi et al.), rows as :func:`head`."""
    from probes.effects.norms import value_norms

    picked = slice(*rows) if rows else None
    got = value_norms(trace(inp), model_of(inp), layer, head, rows=picked)
    return got.float().cpu().numpy()



@st.cache_data(max_entries=32, show_spinner=False)
def why(inp: Input, layer: int, head: int, query: int, key: int):
    """One score of one head split into what wrote its query × what wrote its key: a ``QKAttribution``."""
    from probes.effects.why import qk_attribution

    return qk_attribution(model_of(inp), inp.text, layer, head, query, key, pair=inp.pair,
                   truncate=inp.truncate)



@st.cache_data(max_entries=32, show_spinner=False)
def rollout(inp: Input, layer: int) -> np.ndarray:
    """Attention rollout up to ``layer`` (every head of each layer, with the residual): ``[n, n]``."""
    from probes.effects.rollout import rollout as roll

    return roll(trace(inp), upto=layer)[layer].numpy()



@st.cache_data(max_entries=32, show_spinner=False)
def layer(inp: Input, layer: int, window: tuple[int, int]) -> np.ndarray:
    """Every head of one layer over a window of tokens (start, stop): ``[H, w, w]``."""
    lo, hi = window
    return trace(inp).attention(layer, rows=slice(lo, hi))[..., lo:hi].float().cpu().numpy()



@st.cache_data(max_entries=8, show_spinner="Drawing bertviz's view…")
def bertviz_html(inp: Input, kind: str, layer: int = 0, head: int | None = None) -> str:
    """bertviz's head or model view of every layer, self-contained (see ``bertviz_views``); the head view
    opens on ``layer`` showing ``head`` (None: every head)."""
    from . import bertviz_views

    t = trace(inp)
    attention, tokens = list(t.all_attention().float().numpy()), t.token_strings()
    if kind == "head":
        return bertviz_views.head_view_html(attention, tokens, sentence_b_start(inp), layer,
                                            None if head is None else [head])
    return bertviz_views.model_view_html(attention, tokens, sentence_b_start(inp))



@st.cache_data(max_entries=64, show_spinner=False)
def words(inp: Input, layer: int, head: int) -> tuple[list[str], np.ndarray]:
    return explain.word_level(trace(inp), layer, head, inp.text, inp.pair)



def sentence_b_start(inp: Input) -> int | None:
    """Index (among real tokens) of the second sentence's first token, for bertviz."""
    if not inp.pair:
        return None
    segments = [tok.segment for tok in trace(inp).real_tokens()]
    return segments.index(1) if 1 in segments else None
