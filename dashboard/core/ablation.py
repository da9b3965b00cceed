"""A head taken out: every single-head ablation of the text (Does it matter?'s grid, Find heads' ablation measure),
zero or mean over the reference sentences, kept in the cache once computed (:mod:`dashboard.core.kept`)."""

from __future__ import annotations

from contextlib import nullcontext

import pandas as pd
import streamlit as st

from . import budgets
from .kept import NotCached
from .models import model_named

REFERENCE = "ewt-dev"  # mean-ablation writes each head's mean output over the first sentences of this set

REFERENCE_SIZE = 32


@st.cache_data(max_entries=1, show_spinner="Reading the reference sentences for mean-ablation…")
def reference_texts() -> list[str]:
    from probes.datasets import catalog

    return catalog.texts(catalog.read_items(REFERENCE)[:REFERENCE_SIZE])



@st.cache_data(max_entries=16, show_spinner=False)
def _ablation_kept(name: str, text: str, how: str, position: int, measure: str | None,
                   _frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The cache of :func:`ablation`: ``_frame`` (not part of the key) is stored when given; without it a grid that
    is not held raises :class:`NotCached`, so the caller can compute it outside the cache, with a progress bar (a
    cached function must not draw: its elements would be replayed on every hit)."""
    if _frame is None:
        raise NotCached
    return _frame



KEEP_BYTES = 64 * 2**20  # every head's copy of a text is kept (one run, every measure) up to this many bytes


@st.cache_resource(max_entries=2, show_spinner=False)
def _each_kept(name: str, text: str, how: str, _each=None):
    """The cache of :func:`probes.effects.ablation.ablate_each_kept` (a resource: its tensors are not copied on a
    hit), as :func:`_ablation_kept`: stored when ``_each`` is given, else :class:`NotCached` when not held."""
    if _each is None:
        raise NotCached
    return _each



def ablation(name: str, text: str, how: str, position: int, measure: str | None = None,
             progress=None) -> pd.DataFrame:
    """Every single-head ablation of ``text`` (``how``: zero or mean over :func:`reference_texts`): layer, head and
    the column of ``measure`` (None: one column per measure), ``position`` the token whose change
    ``token_change`` measures. Cached (:func:`_ablation_kept`); on a miss ``progress(done, total)`` is called after
    each head. One measure of a text short enough (:data:`KEEP_BYTES`) is read from every head's copy kept
    (:func:`_each_kept`): another measure or query token of the same text and ablation runs no copy again."""
    from probes import seam
    from probes.effects.ablation import ablate_each, ablate_each_kept, kept_bytes

    try:
        return _ablation_kept(name, text, how, position, measure)
    except NotCached:
        pass
    reference = reference_texts() if how == "mean" else None
    wait = st.spinner("Removing every head in turn and measuring what changed…") if progress is None else nullcontext()
    model = model_named(name)
    n = model.encode(text).input_ids.shape[-1]
    batch = max(1, budgets.STEP_ROWS // n)
    watched = budgets.watched(progress, "shorten the text")
    if measure is not None and seam.home((model,)) is None and kept_bytes(model, n) <= KEEP_BYTES:
        try:
            each = _each_kept(name, text, how)
        except NotCached:
            with wait:
                each = _each_kept(name, text, how, _each=ablate_each_kept(model, text, how=how, reference=reference,
                                                                          batch=batch, progress=watched))
        return _ablation_kept(name, text, how, position, measure, _frame=each.frame([measure], position))
    with wait:
        frame = ablate_each(model, text, how=how, reference=reference, position=position,
                            measures=None if measure is None else [measure], batch=batch, progress=watched)
    return _ablation_kept(name, text, how, position, measure, _frame=frame)
