"""What Does it matter? asks the library for besides the ablation grid (``dashboard.core.ablation``), cached:
direct logit attribution and the minimal pair."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from dashboard.core.models import model_named
from probes import explain


@st.cache_data(max_entries=64, show_spinner=False)
def attribution_default(name: str, text: str) -> tuple[int, str] | None:
    """The last token of ``text`` that can be typed as a logit-attribution target: (its position, its raw text), or
    None (:func:`probes.effects.attribution.last_target`)."""
    from probes.effects.attribution import last_target

    return last_target(model_named(name), text)



@st.cache_data(max_entries=16, show_spinner="Splitting the logit into each head's share…")
def attribution(name: str, text: str, target: str, other: str | None, position: int):
    """Direct logit attribution of ``target`` (minus ``other``) at ``position``: an ``Attribution``."""
    from probes.effects.attribution import logit_attribution, target_id

    model = model_named(name)
    return logit_attribution(model, text, target_id(model, target),
                   target_id(model, other) if other else None, position)



@st.cache_resource(max_entries=4, show_spinner="Running both texts…")
def minimal_pair(name: str, text_a: str, text_b: str, query: str, key: str):
    """Attention from the query word to the key word in every head of both texts (a ``Pair``, which holds
    both texts' traces: a resource, bounded, like :func:`trace`)."""
    from probes.effects.pairs import minimal_pair as pair

    return pair(model_named(name), text_a, text_b, query, key)



@dataclass(frozen=True)
class PairHead:
    """One head in both texts of a minimal pair: tokens, attention ``[n, n]`` and the query word's first token."""

    tokens_a: list[str]
    weights_a: np.ndarray
    query_a: int
    tokens_b: list[str]
    weights_b: np.ndarray
    query_b: int



@st.cache_data(max_entries=64, show_spinner=False)
def pair_head(name: str, text_a: str, text_b: str, query: str, key: str, layer: int, head: int) -> PairHead:
    got = minimal_pair(name, text_a, text_b, query, key)
    sides = []
    for t, text, word in ((got.trace_a, text_a, got.query[0]), (got.trace_b, text_b, got.query[1])):
        sides += [t.token_strings(), t.attention(layer, head).float().cpu().numpy(), explain.words(t, text)[word][1][0]]
    return PairHead(*sides)
