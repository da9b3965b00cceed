"""What the Circuit page asks the library for: each earlier head's share of this head's scores on the text,
composition from the weights, and path patching (kept once computed: :mod:`dashboard.core.kept`)."""

from __future__ import annotations

from contextlib import nullcontext

import pandas as pd
import streamlit as st

import probes
from dashboard.core import budgets
from dashboard.core.kept import NotCached
from dashboard.core.models import Input, model_named, model_of


@st.cache_data(max_entries=16, show_spinner="Splitting the head's scores by the heads that wrote them…")
def senders_on_text(inp: Input, layer: int, head: int) -> pd.DataFrame:
    """Each earlier head's share of head ``layer``.``head``'s scores on the text's cells it weighs most (q and k)."""
    from probes.effects.why import senders_on_text as split

    return split(model_of(inp), inp.text, layer, head, pair=inp.pair, truncate=inp.truncate)



@st.cache_data(max_entries=16, show_spinner="Composing every earlier head's weights with this head's…")
def composition(name: str, layer: int, head: int, convention: str = "raw") -> pd.DataFrame:
    """Q-, K- and V-composition of every earlier head onto head ``layer``.``head``, from the weights alone, in
    ``convention`` (``"raw"`` or ``"transformerlens"``: :mod:`probes.effects.compose`), each with its noise floor
    (:func:`probes.evidence.edges.composition_floors`: ``floor``, ``above_floor``, ``z``…)."""
    from probes.effects.compose import composition_scores
    from probes.evidence.edges import composition_floors

    scores = composition_scores(model_named(name), receivers=[(layer, head)],
                                convention=convention)
    return composition_floors(scores)



@st.cache_data(max_entries=8, show_spinner=False)
def _patch_kept(name: str, text: str, corrupted: str, layer: int, head: int, into: str,
                _frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The cache of :func:`path_patch` (as :mod:`dashboard.core.ablation` keeps the ablation grid): ``_frame`` is
    stored when given; a run it does not hold raises :class:`NotCached`."""
    if _frame is None:
        raise NotCached
    return _frame



def path_patch(name: str, text: str, corrupted: str, layer: int, head: int, into: str,
               progress=None) -> pd.DataFrame:
    """Path patching of every earlier head into head ``layer``.``head``'s ``into`` (q, k or v): one row per sender,
    the largest effects checked against their noise floor (:func:`probes.evidence.edges.patch_floors`: ``checked``,
    ``<measure>_floor``, ``<measure>_above``…; the same patch from null corruptions of the text). Cached
    (:func:`_patch_kept`); on a miss ``progress(done, total, what)`` is called after each pass of senders and each
    null run (``what``: which of the two), behind a spinner when ``progress`` is None."""
    from probes.effects.path_patching import batch_for, path_patch as patch
    from probes.evidence.edges import CHECKED, NULLS, patch_floors

    try:
        return _patch_kept(name, text, corrupted, layer, head, into)
    except NotCached:
        pass
    model = model_named(name)
    length = model.encode(text).input_ids.shape[-1]
    batch = max(1, budgets.STEP_ROWS // length)
    if budgets.public():  # and no more senders a pass than the public budget holds (none: refused, before any pass)
        try:
            batch = min(batch, batch_for(model, length, model.predicts_tokens, budgets.PUBLIC_WORK_BYTES))
        except probes.errors.BadOption as exc:
            raise probes.errors.BadOption(
                f"Path patching on this public app may hold {budgets.PUBLIC_WORK_BYTES / 2**20:,.0f} MiB at a time, "
                f"and this text of {length:,} tokens needs more for one earlier head: shorten the text, or run the "
                "app on your own machine (make app).") from exc
    advice = "shorten the text, or pick a head in an earlier layer (fewer senders)"
    # one bar over both parts, each weighed by its senders patched: every earlier head once, then the largest
    # (at most CHECKED) once per null corruption
    senders = layer * model.n_heads
    checks = NULLS * min(CHECKED, senders)
    total = senders + checks

    def patched(done: int, _of: int) -> None:
        if progress is not None:
            progress(done, total, "patching")

    def floored(done: int, of: int) -> None:
        if progress is not None:
            progress(senders + round(checks * done / of), total, "floors")

    wait = (st.spinner("Patching each earlier head from the corrupted text into this head…") if progress is None
            else nullcontext())
    with wait:
        got = patch(model, text, corrupted, (layer, head), into=into, batch=batch,
                    progress=budgets.watched(patched, advice=advice))
        frame = patch_floors(model, text, corrupted, (layer, head), into, result=got, batch=batch,
                             progress=budgets.watched(floored, advice=advice)).frame
    return _patch_kept(name, text, corrupted, layer, head, into, _frame=frame)
