"""The Q/K/V page's charts, drawn for reading: vectors as colour strips (q, each k, each weighted v) and the
steps q·k → × scale → softmax as bars, with labels at a legible size, never cut by the chart, and long tokens
shortened with "…" before they reach it. Pure functions of plain data, like ``charts``."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from dashboard.core.charts import HIGHLIGHT, MAX_WIDTH, SUBTITLE_MAX, labels, titled

LABEL_SIZE = 12  # px: axis labels, legends and the steps' names (Vega's default is 10)
TITLE_SIZE = 12  # px: axis and legend titles
LABEL_CHARS = 22  # a token label longer than this is shortened with "…" (the table below the chart has it whole)
LABEL_LIMIT = 300  # px: room for LABEL_CHARS at LABEL_SIZE, wide (CJK) characters too, so Vega never cuts a label
ROW = 18  # px: one vector's strip (room for a 12 px label)
CELL = 8  # px: one number of a vector, at most (the strips take the page's width up to this, narrower on a phone)
VECTOR_LABELS = 240  # px: a strip chart's names and legend, beside its cells


def short(label: str, chars: int = LABEL_CHARS) -> str:
    """``label`` shortened to ``chars`` characters, its last one "…", when it is longer."""
    return label if len(label) <= chars else label[: chars - 1] + "…"


def _axis(**kwargs) -> alt.Axis:
    return alt.Axis(labelFontSize=LABEL_SIZE, titleFontSize=TITLE_SIZE, labelLimit=LABEL_LIMIT, labelOverlap=False,
                    **kwargs)


def vectors_heatmap(rows: dict[str, np.ndarray], title: str) -> alt.Chart:
    """Vectors as strips of coloured cells (q, and each k or v), diverging around 0; a row's name is its label
    (names are shortened with ``short`` by the caller, who keeps them distinct). As wide as the page, at most
    :data:`CELL` px a number."""
    frame = pd.concat([pd.DataFrame({"vector": name, "dim": np.arange(len(v)), "value": np.asarray(v, float)})
                       for name, v in rows.items()], ignore_index=True)
    top = float(np.abs(frame["value"]).max()) or 1.0
    dims = max(len(v) for v in rows.values())
    return (
        alt.Chart(frame, title=titled(title))  # (a long one wraps to the chart's width)
        .mark_rect()
        .encode(
            x=alt.X("dim:O", title="dimension", axis=_axis(labels=False, ticks=False)),
            y=alt.Y("vector:N", sort=list(rows), title=None, axis=_axis(labelPadding=6)),
            color=alt.Color("value:Q", scale=alt.Scale(scheme="redblue", domain=[-top, top], reverse=True),
                            title="value", legend=alt.Legend(labelFontSize=LABEL_SIZE, titleFontSize=TITLE_SIZE)),
            tooltip=[alt.Tooltip("vector:N"), alt.Tooltip("dim:O"), alt.Tooltip("value:Q", format=".5f")],
        )
        .properties(width="container", height=alt.Step(ROW), usermeta={MAX_WIDTH: CELL * dims + VECTOR_LABELS})
    )


STEP_COLUMN = 56  # px: the most one key's bar is given (the page's width is shared out among the keys up to this)
STEP_AXIS = 90  # px: the value axis and its labels, beside the bars
MASKED = "#9e9e9e"  # the × of a key the query may not see


def step_bar(tokens: list[str], name: str, values: np.ndarray, query: int) -> alt.LayerChart:
    """One Q/K/V step for one query (the raw scores, the scaled ones or the softmax weights) as bars, every key in
    text order on the axis: a key the query may not see (NaN: a future token, or one outside a sliding window) is
    named and marked × at 0, and the subtitle says how many there are, so none is left out without a word. The chart
    takes the page's width, at most :data:`STEP_COLUMN` px a key; the keys' labels shortened, the whole token in the
    tooltip."""
    keys = labels(tokens)
    shown = [short(k) for k in keys]  # distinct: each starts with its position
    frame = pd.DataFrame({"step": name, "key": keys, "label": shown, "key_pos": np.arange(len(keys)),
                          "value": np.asarray(values, float)})
    seen = np.isfinite(frame["value"])
    x = alt.X("label:N", sort=shown, scale=alt.Scale(domain=shown), title=None, axis=_axis(labelAngle=-60))
    bars = alt.Chart(frame[seen]).mark_bar().encode(
        x=x, y=alt.Y("value:Q", title=None, axis=_axis()),
        color=alt.condition(alt.datum.key_pos == query, alt.value(HIGHLIGHT), alt.value("#08519c")),
        tooltip=[alt.Tooltip("step:N"), alt.Tooltip("key:N"), alt.Tooltip("value:Q", format=".6f")])
    layers = [bars]
    hidden = int((~seen).sum())
    if hidden:
        masked = frame[~seen].assign(value=0.0, said="masked: no score, weight 0")
        layers.append(alt.Chart(masked).mark_text(text="×", color=MASKED, fontSize=LABEL_SIZE + 2).encode(
            x=x, y="value:Q", tooltip=[alt.Tooltip("key:N"), alt.Tooltip("said:N", title=name)]))
    import textwrap

    # (in lines a phone's chart holds: Vega-Lite wraps no subtitle, it cuts it with "…")
    subtitle = textwrap.wrap(f"{hidden} of the {len(keys)} keys masked (×): the query may not see them, so they have "
                             "no score and weight 0", SUBTITLE_MAX) if hidden else alt.Undefined
    title = alt.TitleParams(name, subtitle=subtitle, anchor="start", fontSize=LABEL_SIZE + 1, fontWeight="bold",
                            subtitleFontSize=LABEL_SIZE, subtitleColor="#555555")
    return alt.LayerChart(layer=layers, title=title, width="container", height=140,
                          usermeta={MAX_WIDTH: STEP_COLUMN * len(keys) + STEP_AXIS})


def step_bars(tokens: list[str], steps: dict[str, np.ndarray], query: int) -> list[alt.LayerChart]:
    """:func:`step_bar` for each step, in order (the page draws them one under the other)."""
    return [step_bar(tokens, name, values, query) for name, values in steps.items()]


def steps_file(charts: list[alt.LayerChart], tokens: int) -> alt.VConcatChart:
    """The steps as one chart for the PNG/SVG downloads: stacked, each as wide as the page would draw it at most."""
    return alt.vconcat(*(c.properties(width=STEP_COLUMN * tokens) for c in charts))
