"""Explore's own charts: the bars of a clicked column (where a key is looked at from), the small multiples of every
head of a layer, "Why this weight?"'s grid of query parts × key parts, and the first token hidden from a heatmap."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from dashboard.core.charts import HIGHLIGHT, MARKED, MAX_WIDTH, REACH, SYMMETRIC, Spec, click, data_title, labels
from dashboard.core.token_charts import bars
from dashboard.core.words import said


def without_first(rows: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Explore's "Hide the first token", a display transform only: ``rows`` of one head over *every* key (column 0
    is the first token: BOS, ``[CLS]`` or the first word piece) -> each row renormalised over keys 1..n−1,
    w_ij / Σ_{k≥1} w_ik, so an attention sink no longer sets the colour scale. Returns the shown (rescaled) values
    and the true weights of the window's columns from ``max(lo, 1)`` to ``hi``, and that first column's position.
    A row with no weight off the first token (a decoder's first row, which sees only itself) has nothing to show:
    NaN, drawn blank."""
    rows = np.asarray(rows, dtype=np.float64)
    rest = rows[:, 1:].sum(axis=1, keepdims=True)  # the row's weight off the first token (the future's 0s included)
    with np.errstate(divide="ignore", invalid="ignore"):
        shown = np.where(rest > 0, rows / rest, np.nan)
    first = max(lo, 1)
    return shown[:, first:hi], np.asarray(rows[:, first:hi]), first


def key_bars(tokens: list[str], column: np.ndarray, key: int, causal: bool = False, start: int = 0,
             name: str | None = None, query: int | None = None, clickable: bool = False) -> Spec:
    """Who attends to one key token: the heatmap's column as bars, every query token's weight on ``key``, in text
    order. ``tokens``/``column``: the queries shown, from position ``start``; a decoder's queries before the key
    cannot see it and are left out (not drawn as 0). ``name``: the key's label (default: its own, from
    ``tokens``); ``query`` (a position) is drawn in the highlight colour; ``clickable``: a click on a bar selects
    its ``query_pos`` (the selection ``query``)."""
    if len(column) != len(tokens):
        raise ValueError(f"{len(column)} weights for {len(tokens)} tokens")
    queries = labels(tokens, start)
    frame = pd.DataFrame({"query_pos": np.arange(len(tokens)) + start, "query": queries,
                          "weight": np.asarray(column, dtype=float)})
    if causal:
        frame = frame[frame["query_pos"] >= key]
    name = queries[key - start] if name is None else name
    return bars(frame, "query", queries, f"Who attends to {name!r}", "query (attending)", query, clickable)


MULTIPLES_PX = 96  # a small multiple's side, about: each token's cell is 96 // n pixels (at least 1)
MULTIPLES = "multiples"  # the small multiples' chart name (tests find their spec by it)
WHITE, DARK = np.array([255.0, 255.0, 255.0]), np.array([8.0, 81.0, 156.0])  # the ends of BLUE


def weight_image(weights: np.ndarray, causal: bool = False, cell: int = 1) -> str:
    """One head's ``[n, n]`` weights as a PNG data URL: each weight a ``cell``-pixel square on :data:`BLUE`'s scale
    (white 0 to dark blue 1, as the heatmap), a decoder's future left white. What a small multiple draws."""
    import base64
    import io

    from PIL import Image

    w = np.clip(np.nan_to_num(weights.astype(np.float64)), 0.0, 1.0)
    if causal:
        w = np.tril(w)
    levels = np.rint(w * 255).astype(np.uint8)  # 256 steps of the ramp: a palette image, one byte a pixel
    picture = Image.fromarray(np.repeat(np.repeat(levels, cell, axis=0), cell, axis=1), "P")
    ramp = WHITE + np.linspace(0.0, 1.0, 256)[:, None] * (DARK - WHITE)  # the same linear rgb ramp as BLUE
    picture.putpalette(np.rint(ramp).astype(np.uint8).ravel().tolist())
    buf = io.BytesIO()
    picture.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def image_weights(url: str, cell: int = 1) -> np.ndarray:
    """The weights a :func:`weight_image` shows, read back from its pixels (to 1/255 of the colour ramp)."""
    import base64
    import io

    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"), dtype=float)
    red = pixels[::cell, ::cell, 0]
    return (WHITE[0] - red) / (WHITE[0] - DARK[0])


MULTIPLES_GAP, MULTIPLES_LABEL = 20, 24  # px: between two pictures; a picture's name above it
MULTIPLES_COLUMNS = 6  # at most this many pictures a row (where the page is wide)


def layer_multiples(weights: np.ndarray, layer: int, causal: bool = False, start: int = 0,
                    selected: int | None = None) -> Spec:
    """Every head of one layer as a small heatmap (``weights`` ``[H, n, n]``: tokens ``start`` to ``start + n``
    of the text, a window of a long input), to spot the patterns side by side, titled ``layer.head``; head
    ``selected`` is outlined, and a click on a head selects it (the selection ``head``, its ``layer.head`` name).

    Each head travels and is drawn as one small picture (:func:`weight_image`, the heatmap's colours), not as n²
    marks: twelve images are a few kilobytes and draw at once, where 12·n² rectangles took the browser most of a
    layer change; the exact weights are in the heatmap above (hover) and in its CSV.

    The pictures wrap to the page's width (the chart is "container" wide): as many columns as fit, then as few as
    keep the rows equally full, at most :data:`MULTIPLES_COLUMNS` (twelve heads: two rows of six at a desk, four
    of three on a phone). A facet's ``columns`` is fixed when the chart is made, before the browser knows the
    width, so the pictures are placed in one view instead, each at a position computed in the browser from the
    view's ``width`` (the view grows downwards to hold the rows a narrow page needs)."""
    h, n, _ = weights.shape
    names = [f"{layer}.{head}" for head in range(h)]
    cell = max(1, MULTIPLES_PX // n)
    edge = n * cell
    across, down = edge + MULTIPLES_GAP, MULTIPLES_LABEL + edge + MULTIPLES_GAP
    frame = pd.DataFrame({"head": names, "url": [weight_image(weights[i], causal, cell) for i in range(h)],
                          "tokens": f"{start}–{start + n - 1}", "peak": weights.reshape(h, -1).max(1).astype(float)})
    # columns: as many as fit the view's width (at most MULTIPLES_COLUMNS), then as few as fill that many rows
    fit = f"clamp(floor((width + {MULTIPLES_GAP}) / {across}), 1, {MULTIPLES_COLUMNS})"
    place = dict(  # each picture's edges and its name's place, computed in the browser (row numbers count from 1)
        left=f"(datum.i - 1) % columns * {across}", top=f"floor((datum.i - 1) / columns) * {down} + {MULTIPLES_LABEL}",
        right=f"datum.left + {edge}", bottom=f"datum.top + {edge}", middle=f"datum.left + {edge / 2}",
        label="datum.top - 6")

    def px(field: str) -> dict[str, Any]:  # a position in pixels, no scale
        return {"field": field, "type": "quantitative", "scale": None, "axis": None}

    corners = {"x2": {"field": "right"}, "y2": {"field": "bottom"}}
    layers: list[dict[str, Any]] = [
        {"name": "pictures", "mark": {"type": "image", "width": edge, "height": edge, "align": "left",
                                      "baseline": "top", "cursor": "pointer"},
         "encoding": {"url": {"field": "url", "type": "nominal"},
                      "tooltip": [{"field": "head", "type": "nominal"}, {"field": "tokens", "type": "nominal"},
                                  {"field": "peak", "type": "quantitative", "format": ".3f", "title": said("peak")}]}},
        {"mark": {"type": "rect", "fill": None, "stroke": "#dddddd"}, "encoding": corners},
        {"mark": {"type": "text", "fontSize": 12, "baseline": "bottom"},
         "encoding": {"x": px("middle"), "y": px("label"), "text": {"field": "head", "type": "nominal"}}},
    ]
    if selected is not None:  # one rectangle along the edge of the selected head's picture (marked in the table)
        frame[MARKED] = np.arange(h) == selected
        layers.append({"transform": [{"filter": f"datum.{MARKED}"}],
                       "mark": {"type": "rect", "fill": None, "stroke": HIGHLIGHT, "strokeWidth": 3, "xOffset": 1.5,
                                "yOffset": 1.5, "x2Offset": -1.5, "y2Offset": -1.5},
                       "encoding": corners})
    rows = -(-h // MULTIPLES_COLUMNS)  # the height the view asks for: its rows at a desk (a phone's grow past it)
    return Spec({
        "$schema": alt.SCHEMA_URL, "name": MULTIPLES, "config": {"view": {"stroke": None}},
        "layer": layers, "encoding": {"x": px("left"), "y": px("top")},  # each layer's place, unless its own says
        "params": [{**click("head", ["head"]), "views": ["pictures"]},
                   {"name": "columns", "expr": f"ceil({h} / ceil({h} / {fit}))"}],
        "transform": [{"window": [{"op": "row_number", "field": "", "as": "i"}]},
                      *({"calculate": expr, "as": name} for name, expr in place.items())],
        "width": "container", "height": rows * down - MULTIPLES_GAP,
    }, frame)


def qk_grid(frame: pd.DataFrame, score: float, title: str = "") -> Spec:
    """Query parts (rows) × key parts (columns) of one attention score (a ``query_part, key_part, contribution``
    frame, ``QKAttribution.grid``), each cell its term with its value written in it. Terms add up to the score and
    can be negative: a diverging scale centred at 0 and symmetric, so white is a term of 0 whatever the range. A
    bucket of several parts (``query_parts``/``key_parts`` > 1) says how many in its label ("heads of layers 0–7
    (72 parts)"), so no lump is silent. The tooltip's share of the score only when the score is positive (a share of
    a negative one would flip the term's sign)."""
    rows = frame[["query_part", "key_part", "contribution"]].copy()
    for axis in ("query", "key"):
        if f"{axis}_parts" in frame:
            counts = frame[f"{axis}_parts"]
            rows[f"{axis}_part"] = [f"{name} ({count} parts)" if count > 1 else name
                                    for name, count in zip(rows[f"{axis}_part"], counts, strict=True)]
    rows["share"] = rows["contribution"] / score if score > 0 else np.nan
    reach = float(rows["contribution"].abs().max()) if len(rows) else 0.0
    reach = reach if reach > 0 and np.isfinite(reach) else 1e-9
    rows["ink"] = np.where(rows["contribution"].abs() > 0.6 * reach, "white", "#222")  # legible on dark cells
    rows[REACH] = reach
    for axis in ("query", "key"):  # each axis in the order the grid was given (the order the stream is written)
        order = {name: i for i, name in enumerate(dict.fromkeys(rows[f"{axis}_part"]))}
        rows[f"{axis}_order"] = rows[f"{axis}_part"].map(order).astype(int)
    axes = {
        "x": {"field": "key_part", "type": "nominal", "title": "what wrote the key",
              "sort": {"field": "key_order", "op": "min"},
              "axis": {"labelAngle": -40, "labelOverlap": False, "labelLimit": 180}},
        "y": {"field": "query_part", "type": "nominal", "title": "what wrote the query",
              "sort": {"field": "query_order", "op": "min"}, "axis": {"labelOverlap": False, "labelLimit": 180}},
    }
    rect = {"mark": {"type": "rect"}, "encoding": {
        **axes,
        "color": {"field": "contribution", "type": "quantitative", "title": "term",
                  "scale": {"scheme": "redblue", "reverse": True, "domain": SYMMETRIC, "domainMid": 0}},
        "tooltip": [{"field": "query_part", "type": "nominal", "title": "query part"},
                    {"field": "key_part", "type": "nominal", "title": "key part"},
                    {"field": "contribution", "type": "quantitative", "format": "+.4f", "title": "term"},
                    {"field": "share", "type": "quantitative", "format": "+.1%", "title": "of the score"}]}}
    text = {"mark": {"type": "text", "fontSize": 10}, "encoding": {
        **axes, "text": {"field": "contribution", "type": "quantitative", "format": "+.2f"},
        "color": {"field": "ink", "type": "nominal", "scale": None}}}
    spec: dict[str, Any] = {
        "$schema": alt.SCHEMA_URL, "layer": [rect, text],
        "resolve": {"scale": {"color": "independent"}},  # the ink is not the term's
        "width": "container", "height": {"step": 26},
        "usermeta": {MAX_WIDTH: 90 * rows["key_order"].nunique() + 400}}
    if title:
        rows, spec["title"] = data_title(rows, title, wraps=True)
    return Spec(spec, rows)


