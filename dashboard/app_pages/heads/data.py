"""What Heads asks the library for: a built-in probe's table on the current model, each label's head judged on
held-out items, and head importance; both kept in the session (their runs draw a progress bar, which a cached
function may not)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard.core import budgets
from dashboard.core.ablation import REFERENCE
from dashboard.core.models import model_named

PROBE_TABLES_KEPT = 4


def probe_table(name: str, probe: str, limit: int, progress=None) -> pd.DataFrame:
    """A probe's scores for every layer × head on the built-in data (``limit`` items), with each label's head judged
    on held-out items (:func:`probes.evidence.probes.run_probe`), kept in the session (the last
    ``PROBE_TABLES_KEPT``). Not ``st.cache_data``: its run draws a progress bar,
    which a cached function may not touch. ``progress(done, total)`` is called as items finish."""
    from probes.evidence import probes as judged

    tables = st.session_state.setdefault("probe_tables", {})
    key = (name, probe, limit)
    if key not in tables:  # each label's head chosen on half of the items, judged on the other half
        batch: budgets.Batched = {"batch_size": budgets.PUBLIC_PROBE_BATCH} if budgets.public() else {}
        tables[key] = judged.run_probe(model_named(name), probe, limit,
                              progress=budgets.watched(progress, "run fewer items"), **batch)
        while len(tables) > PROBE_TABLES_KEPT:
            tables.pop(next(iter(tables)))
    return tables[key]



def has_probe_table(name: str, probe: str, limit: int) -> bool:
    return (name, probe, limit) in st.session_state.get("probe_tables", {})


IMPORTANCE = "importance"  # its tables sit beside the probes' (no probe has this name: probes.heads.registry)


def importance_table(name: str, limit: int, progress=None) -> pd.DataFrame:
    """Head importance (the gradient of each head's gate, Michel et al.) over the first ``limit`` sentences of
    :data:`REFERENCE`, kept like a probe table; ``progress(done, total)`` as sentences finish."""
    from probes import jobs
    from probes.datasets import catalog
    from probes.effects.importance import importance

    tables = st.session_state.setdefault("probe_tables", {})
    key = (name, IMPORTANCE, limit)
    if key not in tables:
        model = model_named(name)
        texts = catalog.texts(catalog.read_items(REFERENCE)[:limit])
        done, checked = [0], budgets.watched(progress)

        def step(n: int) -> None:
            done[0] += n
            checked(done[0], len(texts))

        tables[key] = jobs.with_model(importance(model, texts, ablation=False, progress=step), model)
        while len(tables) > PROBE_TABLES_KEPT:
            tables.pop(next(iter(tables)))
    return tables[key]
