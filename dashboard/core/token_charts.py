"""Charts over a text's tokens that several pages draw: one head's attention as a heatmap (Explore, Does it
matter?) and a row of it as bars (Explore, Generate)."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from .charts import (
    BLUE_SPEC,
    CANVAS,
    HEATMAP_COLUMN,
    HEATMAP_LABELS,
    HIGHLIGHT,
    MARKED,
    TOKEN_AXIS,
    Spec,
    click,
    compact,
    data_title,
    labels,
    pointer,
    row_of,
    token_axis_spec,
    widths,
)
from .words import said


def attention_frame(tokens: list[str], weights: np.ndarray, causal: bool = False, start: int = 0,
                    key_tokens: list[str] | None = None, key_start: int | None = None) -> pd.DataFrame:
    """Long table of one head: one row per (query, key) pair. ``start``/``key_start`` are the
    positions of the first query/key shown (a window of a long input). For a causal model the
    future (key after query) is left out, so the chart shows it blank rather than as a confident 0."""
    key_tokens = tokens if key_tokens is None else key_tokens
    key_start = start if key_start is None else key_start
    if weights.shape != (len(tokens), len(key_tokens)):
        raise ValueError(f"weights are {weights.shape}, expected ({len(tokens)}, {len(key_tokens)}) "
                         "for the tokens given")
    q, k = np.meshgrid(np.arange(len(tokens)), np.arange(len(key_tokens)), indexing="ij")
    qlab, klab = labels(tokens, start), labels(key_tokens, key_start)
    frame = pd.DataFrame({
        "query_pos": q.ravel() + start,
        "key_pos": k.ravel() + key_start,
        "query": np.asarray(qlab, dtype=object)[q.ravel()],
        "key": np.asarray(klab, dtype=object)[k.ravel()],
        "weight": weights.astype(float).ravel(),
    })
    if causal:
        frame = frame[frame["key_pos"] <= frame["query_pos"]]
    return frame.reset_index(drop=True)




BARS_AXIS = 70  # px: the bars' y axis (0 to 1) and its title
NORM_RANGE = ["#ffffff", "#54278f"]  # value-weighted norms: white is 0, their own hue (they are not weights)


def attention_heatmap(tokens: list[str], weights: np.ndarray, title: str = "", causal: bool = False,
                      start: int = 0, query: int | None = None, value: str = "weight",
                      top: float | None = None, clickable: bool = False, key_start: int | None = None,
                      true: np.ndarray | None = None) -> Spec:
    """Heatmap of one head: rows are query tokens (who looks), columns key tokens (looked at); the
    exact weight in the tooltip. ``query`` (a position) outlines that row. ``value`` names what the cells
    hold (legend, tooltip and column): probabilities by default, on the fixed 0..1 scale; with ``top``, a
    value that is not a probability (a value-weighted norm) on its own 0..top scale in another hue.
    ``clickable``: a click on a cell selects its ``query_pos`` and ``key_pos`` (the selection ``cell``).
    ``key_start``: the columns are the tokens from that position on (default ``start``: the same as the rows);
    ``true``: the model's own weights of the cells when ``weights`` are a display transform of them
    (:func:`without_first`), kept beside them as ``true_weight`` and in the tooltip; cells without a value
    (NaN) are left blank."""
    key_start = start if key_start is None else key_start
    key_tokens = tokens[key_start - start:]
    frame = attention_frame(tokens, weights, causal, start, key_tokens=key_tokens, key_start=key_start)
    extra = []
    if true is not None:
        frame["true_weight"] = attention_frame(tokens, true, causal, start, key_tokens=key_tokens,
                                               key_start=key_start)["weight"].to_numpy()
        frame = frame.dropna(subset=["weight"]).reset_index(drop=True)
        extra = [{"field": "true_weight", "type": "quantitative", "format": ".6f", "title": said("true_weight")}]
    if value != "weight":
        frame = frame.rename(columns={"weight": value})
    scale = BLUE_SPEC
    if top is not None:
        scale = {"domain": [0, float(top) or 1e-9], "range": NORM_RANGE, "interpolate": "rgb"}
    encoding: dict[str, Any] = {
        "x": {"field": "key", "type": "nominal", "sort": labels(key_tokens, key_start), "title": "key (attended to)",
              "axis": token_axis_spec(len(key_tokens))},
        "y": {"field": "query", "type": "nominal", "sort": labels(tokens, start), "title": "query (attending)",
              "axis": {"labelOverlap": False}},
        "color": {"field": value, "type": "quantitative", "scale": scale, "title": said(value)},
        "tooltip": [{"field": "query", "type": "nominal"}, {"field": "key", "type": "nominal"},
                    {"field": value, "type": "quantitative", "format": ".6f", "title": said(value)}, *extra],
    }
    if query is not None:  # (from the table: a query change leaves the spec as it was)
        frame[MARKED] = frame["query_pos"].to_numpy() == int(query)
        encoding["stroke"] = {"condition": {"test": f"datum.{MARKED}", "value": HIGHLIGHT}, "value": None}
    spec: dict[str, Any] = {
        "$schema": alt.SCHEMA_URL, "mark": {"type": "rect", "strokeWidth": 1.5, **pointer(clickable)},
        "encoding": encoding, "width": "container", "height": {"step": row_of(len(tokens))},
        "usermeta": {**CANVAS, **widths(len(key_tokens), HEATMAP_COLUMN, HEATMAP_LABELS, TOKEN_AXIS)},
    }
    if title:
        frame, spec["title"] = data_title(frame, title)
    if clickable:
        spec["params"] = [click("cell", ["query_pos", "key_pos"])]
    return Spec(spec, compact(frame))


def query_bars(tokens: list[str], row: np.ndarray, query: int, causal: bool = False, start: int = 0,
               name: str | None = None, key: int | None = None, clickable: bool = False) -> Spec:
    """Where one query token looks: one bar per key token, in text order. ``tokens``/``row``: the keys shown,
    from position ``start`` (a window of a long input); ``name``: the query's label (default: its own, from
    ``tokens``); ``key`` (a position) is drawn in the highlight colour; ``clickable``: a click on a bar selects
    its ``key_pos`` (the selection ``key``)."""
    if len(row) != len(tokens):
        raise ValueError(f"{len(row)} weights for {len(tokens)} tokens")
    keys = labels(tokens, start)
    frame = pd.DataFrame({"key_pos": np.arange(len(tokens)) + start, "key": keys,
                          "weight": np.asarray(row, dtype=float)})
    if causal:
        frame = frame[frame["key_pos"] <= query]
    name = keys[query - start] if name is None else name
    return bars(frame, "key", keys, f"Where {name!r} looks", "key (attended to)", key, clickable)


def bars(frame: pd.DataFrame, field: str, order: list[str], title: str, axis: str, marked: int | None,
          clickable: bool) -> Spec:
    """One bar per token (``field``: key or query, with its ``<field>_pos``), weights on a fixed 0..1 scale."""
    pos = f"{field}_pos"
    colour: dict[str, Any] = {"value": "#08519c"}
    if marked is not None:  # (from the table, as the title: a click that moves it leaves the spec as it was)
        frame = frame.assign(**{MARKED: frame[pos].to_numpy() == int(marked)})
        colour = {"condition": {"test": f"datum.{MARKED}", "value": HIGHLIGHT}, **colour}
    frame, shown = data_title(frame, title)
    spec: dict[str, Any] = {
        "$schema": alt.SCHEMA_URL, "title": shown, "mark": {"type": "bar", **pointer(clickable)},
        "encoding": {
            "x": {"field": field, "type": "nominal", "sort": order, "title": axis,
                  "axis": token_axis_spec(len(order))},
            "y": {"field": "weight", "type": "quantitative", "scale": {"domain": [0, 1]}, "title": "attention weight"},
            "color": colour,
            "tooltip": [{"field": field, "type": "nominal"},
                        {"field": "weight", "type": "quantitative", "format": ".6f", "title": said("weight")}],
        },
        "width": "container", "height": 180,
        "usermeta": widths(len(order), HEATMAP_COLUMN, HEATMAP_LABELS, BARS_AXIS),
    }
    if clickable:
        spec["params"] = [click(field, [pos])]
    return Spec(spec, compact(frame))


