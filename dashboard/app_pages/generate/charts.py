"""Generate's charts: one head through a generation (a band of rows, one a step) and the cache's growth."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from dashboard.core.charts import (
    BLUE,
    HEATMAP_COLUMN,
    HEATMAP_LABELS,
    HIGHLIGHT,
    TOKEN_AXIS,
    label_step,
    labels,
    titled,
    token_axis,
    widths,
)
from dashboard.core.words import size


def generation_band(queries: list[str], keys: list[str], band: np.ndarray, step: int, start: int = 0) -> alt.Chart:
    """One head through a generation: row s is the attention of the token step s fed (``queries[s]``) over
    the text's tokens (``keys``, from position ``start``), ``band`` ``[steps, len(keys)]``; keys a step
    could not see yet are left blank, and row ``step`` is outlined."""
    steps, width = band.shape
    if len(queries) != steps or len(keys) != width:
        raise ValueError(f"{steps}×{width} weights for {len(queries)} steps and {len(keys)} keys")
    names = labels(keys, start)
    rows = [f"{s}: {q}" for s, q in enumerate(queries)]
    s_idx, k_idx = np.meshgrid(np.arange(steps), np.arange(width), indexing="ij")
    frame = pd.DataFrame({"step": s_idx.ravel(), "row": np.asarray(rows, dtype=object)[s_idx.ravel()],
                          "key": np.asarray(names, dtype=object)[k_idx.ravel()], "key_pos": start + k_idx.ravel(),
                          "weight": band.astype(float).ravel()})
    last = start + width - 1  # the last step's query: each earlier step sees one token less
    frame = frame[frame["key_pos"] <= last - (steps - 1 - frame["step"])]
    cell = label_step(width)
    return (
        alt.Chart(frame, title=titled("the fed token of each step (rows) over the text (columns)"))
        .mark_rect(strokeWidth=2)
        .encode(
            x=alt.X("key:N", sort=names, title="key (attended to)", axis=token_axis(width)),
            y=alt.Y("row:N", sort=rows, title="step: fed token", axis=alt.Axis(labelOverlap=False)),
            color=alt.Color("weight:Q", scale=BLUE, title="weight"),
            stroke=alt.condition(alt.datum.step == step, alt.value(HIGHLIGHT), alt.value(None)),
            tooltip=[alt.Tooltip("row:N", title="step"), alt.Tooltip("key:N"), alt.Tooltip("weight:Q", format=".6f")],
        )
        .properties(width="container", height=alt.Step(cell),
                    usermeta=widths(width, HEATMAP_COLUMN, HEATMAP_LABELS, TOKEN_AXIS))
    )


def cache_growth(frame: pd.DataFrame, step: int) -> alt.Chart:
    """The KV cache's bytes at each step (a tidy ``step, tokens cached, bytes, cache`` table: one line per
    cache kind), drawn in KiB with the size in words in the tooltip; the shown step marked by a rule."""
    frame = frame.assign(KiB=frame["bytes"] / 2**10, size=[size(b) for b in frame["bytes"]])
    kinds = list(dict.fromkeys(frame["cache"]))
    lines = (
        alt.Chart(frame, title="KV cache size as the text grows")
        .mark_line(point=True)
        .encode(
            x=alt.X("tokens cached:Q", title="tokens in the cache"),
            y=alt.Y("KiB:Q", title="KiB (fp32)", scale=alt.Scale(zero=True)),
            color=alt.Color("cache:N", title=None,
                            scale=alt.Scale(domain=kinds, range=["#08519c", "#969696"][: len(kinds)]),
                            legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
            tooltip=[alt.Tooltip("cache:N"), alt.Tooltip("step:Q"), alt.Tooltip("tokens cached:Q"),
                     alt.Tooltip("size:N", title="size")],
        )
    )
    here = frame[frame["step"] == step].iloc[:1]
    rule = alt.Chart(here).mark_rule(color=HIGHLIGHT, strokeDash=[4, 3]).encode(x="tokens cached:Q")
    return (lines + rule).properties(width="container", height=240)


