"""The Q/K/V page's charts, drawn for reading: vectors as colour strips (q, each k, each weighted v) and the
steps q·k → × scale → softmax as bars, with labels at a legible size, never cut by the chart, and long tokens
shortened with "…" before they reach it. Pure functions of plain data, like ``charts``."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from .charts import HIGHLIGHT, labels

LABEL_SIZE = 12  # px: axis labels, legends and the steps' names (Vega's default is 10)
TITLE_SIZE = 12  # px: axis and legend titles
LABEL_CHARS = 22  # a token label longer than this is shortened with "…" (the table below the chart has it whole)
LABEL_LIMIT = 300  # px: room for LABEL_CHARS at LABEL_SIZE, wide (CJK) characters too, so Vega never cuts a label
ROW = 18  # px: one vector's strip (room for a 12 px label)
CELL = 8  # px: one number of a vector


def short(label: str, chars: int = LABEL_CHARS) -> str:
    """``label`` shortened to ``chars`` characters, its last one "…", when it is longer."""
    return label if len(label) <= chars else label[: chars - 1] + "…"


def _axis(**kwargs) -> alt.Axis:
    return alt.Axis(labelFontSize=LABEL_SIZE, titleFontSize=TITLE_SIZE, labelLimit=LABEL_LIMIT, labelOverlap=False,
                    **kwargs)


def vectors_heatmap(rows: dict[str, np.ndarray], title: str) -> alt.Chart:
    """Vectors as strips of coloured cells (q, and each k or v), diverging around 0; a row's name is its label
    (names are shortened with ``short`` by the caller, who keeps them distinct)."""
    frame = pd.concat([pd.DataFrame({"vector": name, "dim": np.arange(len(v)), "value": np.asarray(v, float)})
                       for name, v in rows.items()], ignore_index=True)
    top = float(np.abs(frame["value"]).max()) or 1.0
    return (
        alt.Chart(frame, title=title)
        .mark_rect()
        .encode(
            x=alt.X("dim:O", title="dimension", axis=_axis(labels=False, ticks=False)),
            y=alt.Y("vector:N", sort=list(rows), title=None, axis=_axis(labelPadding=6)),
            color=alt.Color("value:Q", scale=alt.Scale(scheme="redblue", domain=[-top, top], reverse=True),
                            title="value", legend=alt.Legend(labelFontSize=LABEL_SIZE, titleFontSize=TITLE_SIZE)),
            tooltip=[alt.Tooltip("vector:N"), alt.Tooltip("dim:O"), alt.Tooltip("value:Q", format=".5f")],
        )
        .properties(width=alt.Step(CELL), height=alt.Step(ROW))
    )


def step_bars(tokens: list[str], steps: dict[str, np.ndarray], query: int) -> alt.Chart:
    """The Q/K/V steps for one query: one bar chart per step (raw score, scaled, softmax weight), keys in text
    order, masked keys left out; the keys' labels shortened, the whole token in the tooltip."""
    keys = labels(tokens)
    shown = [short(k) for k in keys]  # distinct: each starts with its position
    frames = [pd.DataFrame({"step": name, "key": keys, "label": shown, "key_pos": np.arange(len(keys)),
                            "value": np.asarray(v, float)}) for name, v in steps.items()]
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[np.isfinite(frame["value"])]
    step = 24 if len(keys) <= 40 else max(14, 960 // len(keys))  # a 12 px label, turned, fits its column
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("label:N", sort=shown, title=None, axis=_axis(labelAngle=-60)),
            y=alt.Y("value:Q", title=None, axis=_axis()),
            color=alt.condition(alt.datum.key_pos == query, alt.value(HIGHLIGHT), alt.value("#08519c")),
            tooltip=[alt.Tooltip("step:N"), alt.Tooltip("key:N"), alt.Tooltip("value:Q", format=".6f")],
        )
        .properties(width=alt.Step(step), height=140)
        .facet(row=alt.Row("step:N", sort=list(steps), title=None,
                           header=alt.Header(labelOrient="top", labelAngle=0, labelAlign="left", labelAnchor="start",
                                             labelFontSize=LABEL_SIZE + 1, labelFontWeight="bold",
                                             labelLimit=LABEL_LIMIT, labelPadding=4)))
        .resolve_scale(y="independent")
    )
