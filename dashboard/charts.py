"""Pure functions that turn numbers into Vega-Lite charts: Altair charts, and for the charts Explore redraws on every
click (the heatmap, the bars, the small multiples, the "Why this weight?" grid) the Vega-Lite dictionary itself
(:class:`Spec`), which costs a click next to nothing to build. No Streamlit and no model math here: they take plain
lists, arrays and frames, so they are tested as chart specs without a browser."""

from __future__ import annotations

import re
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from .words import difference, said, size

# Altair checks every object against the Vega-Lite schema as it is built (its "debug mode"): a quarter of a click's
# script time on Explore went there (a py-spy profile). A chart's whole spec is still checked where it matters, by the
# tests, which call ``to_dict()`` (validating) on what these functions return; the app's ``ui.chart`` skips it too.
alt.utils.schemapi.disable_debug_mode()

BLUE = alt.Scale(domain=[0, 1], range=["#ffffff", "#08519c"], interpolate="rgb")  # white is exactly 0
BLUE_SPEC = BLUE.to_dict()
HIGHLIGHT = "#e6550d"  # the selected query token / head
PALETTE = ["#08519c", "#e6550d", "#31a354", "#756bb1"]
QUADRATIC = "c·L² (quadratic)"
MAX_CELLS = 64  # a heatmap wider than this is windowed by the caller: never ship L² cells for long inputs
# drawn on a canvas: Streamlit draws a chart of up to 2,000 rows as SVG, one element a cell, and a 40×40 heatmap's
# 1,600 elements were most of the browser's time on a head change
CANVAS = {"embedOptions": {"renderer": "canvas"}}
# Charts are as wide as the page's column ("container": the app draws them stretched, axes and legend inside that
# width) and as tall as their rows need. A long title is split, its closing parenthesis (or the rest) going to a
# subtitle, and both wrap to the chart's width in the browser, so no title is cut at the chart's edge ("…"), on a
# phone or in a half-width column, and no title wraps early above a wide chart.
TITLE_MAX = 60  # characters: a longer title is split into a title and a subtitle
PHONE_LINE = 45  # characters: a title this short is one line on a phone too (it is left as it is)
SUBTITLE_MAX = 50  # characters a subtitle's line (Vega-Lite wraps no subtitle to the width): a phone's chart wide
TITLE_PX = 7.0  # px a character of a title's line, about (a little more than the font's)
WRAPS = (30, 45, 60, 80, 110, 150)  # characters a line: the browser picks the longest that fits the chart's width
MAX_WIDTH = "maxWidth"  # a chart's usermeta key: the app draws it at most this many pixels wide (a short heatmap)
GRID_CELL = 30  # px: a layers × heads grid's row height
Layered = alt.LayerChart | alt.FacetChart  # what alt.layer gives
DATA = "table"  # a Spec's table's name in the spec Streamlit gets: the same on every rerun (see Spec.streamed)
MARKED = "marked"  # a Spec's column: the rows drawn in the highlight colour (the query's row, the other chart's bar)
TITLE = "title"  # a Spec's column: its title, when the title is read from the table (see data_title)
DATA_TITLE = {"text": {"expr": f"length(data('{DATA}')) ? data('{DATA}')[0].{TITLE} : ''"}}  # such a title's spec
WRAP_COLUMNS = [f"{TITLE}_{chars}" for chars in WRAPS]  # a wrapping title's lines at each wrap (see data_title)
LINE_BREAK = "\x1f"  # between those lines in a cell: a character no title holds


def _by_width(variants: list[tuple[int, str]], px: float) -> str:
    """A Vega expression that picks, from the chart's ``width``, the last of ``variants`` (``(chars, expression)``,
    narrowest first) whose ``chars`` characters a line fit (``px`` pixels a character): the first always fits."""
    expr = variants[-1][1]
    for (chars, _), (_, narrower) in zip(reversed(variants[1:]), reversed(variants[:-1]), strict=True):
        expr = f"width < {round(chars * px)} ? {narrower} : {expr}"
    return expr


def _wrapping_data_title() -> dict[str, Any]:
    """The spec of a title read from the table that wraps to the chart's width as :func:`wrapped` does: the lines
    of the longest wrap that fits, each wrap's lines one cell of its :data:`WRAP_COLUMNS` column."""
    import json

    first, escaped = f"data('{DATA}')[0]", json.dumps(LINE_BREAK)[1:-1]  # (the escape, in the expression's string)
    expr = _by_width([(chars, f"split({first}.{column}, '{escaped}')") for chars, column in zip(WRAPS, WRAP_COLUMNS,
                                                                                                 strict=True)],
                     TITLE_PX)
    return {"text": {"expr": f"length(data('{DATA}')) ? {expr} : ''"}, "anchor": "start"}


WRAPPING_DATA_TITLE = _wrapping_data_title()  # such a title's spec
REACH = "reach"  # a Spec's column: the largest |value| its diverging colour scale reaches (each row the same)
# a diverging scale's domain, [-reach, reach], read from the table: the spec stays as it was from click to click
SYMMETRIC = {"expr": f"length(data('{DATA}')) ? [-data('{DATA}')[0].{REACH}, data('{DATA}')[0].{REACH}] : [-1, 1]"}


class Spec:
    """A chart written as the Vega-Lite dictionary itself (one view, or layers over one table), its table (``data``)
    beside it: what the charts redrawn on every click on Explore return (the heatmap, the bars, the small multiples,
    the "Why this weight?" grid), because building them with Altair and
    converting them back to a dictionary (inferring each encoding, checking it against the schema) was most of a
    click's script time (a py-spy profile: 29 % inferring encodings, 21 % converting). It reads as an Altair chart
    where the app and the tests read one: ``data``, ``width``, ``usermeta``, ``properties(...)``, and ``to_dict()``
    / ``to_json()`` as Altair writes a chart (the table as records under ``datasets``; ``to_dict`` checks the spec
    against Vega-Lite's schema unless ``validate=False``)."""

    __slots__ = ("spec", "data")

    def __init__(self, spec: dict[str, Any], data: pd.DataFrame):
        self.spec, self.data = spec, data

    @property
    def width(self) -> Any:
        return self.spec.get("width", alt.Undefined)

    @property
    def usermeta(self) -> Any:
        return self.spec.get("usermeta", alt.Undefined)

    @property
    def title(self) -> Any:
        """The title as the chart draws it: the table's :data:`TITLE` where the spec reads it from there
        (:func:`data_title`), else the spec's own."""
        if read_from_table(self.spec.get("title")) and len(self.data):
            return str(self.data[TITLE].iloc[0])
        return self.spec.get("title", alt.Undefined)

    @property
    def table(self) -> pd.DataFrame:
        """The chart's numbers as a person reads them (its CSV): :attr:`data` less what only draws it (the
        :data:`MARKED` and :data:`TITLE` columns, a wrapping title's lines)."""
        return self.data.drop(columns=[name for name in (MARKED, TITLE, *WRAP_COLUMNS) if name in self.data])

    def properties(self, **changes: Any) -> Spec:
        """A copy with these top-level properties (an Altair object among them as its dictionary)."""
        return Spec({**self.spec, **{name: value.to_dict(validate=False) if hasattr(value, "to_dict") else value
                                     for name, value in changes.items()}}, self.data)

    def streamed(self) -> dict[str, Any]:
        """The spec as ``ui.chart`` hands it to Streamlit: the table (a frame, which Streamlit sends as Arrow) under
        one name, :data:`DATA`, on every rerun, so a click that changes only the numbers leaves the spec as it was
        and the browser swaps the data in the chart it has instead of building the chart again. The usermeta's
        :data:`MAX_WIDTH` is left out (the app gives it as the element's width: ``ui.chart``), so a grid with one
        column more keeps its spec too."""
        spec = {**self.spec, "data": {"name": DATA}, "datasets": {DATA: self.data}}
        meta = {name: value for name, value in (spec.pop("usermeta", None) or {}).items() if name != MAX_WIDTH}
        return {**spec, "usermeta": meta} if meta else spec

    def to_dict(self, validate: bool = True) -> dict[str, Any]:
        """As Altair writes a chart: the table's rows as records (categories as their labels, missing values as
        null) under ``datasets``. ``validate``: check it against Vega-Lite's schema (an error names what is
        wrong)."""
        rows = self.data.astype(object).where(self.data.notna(), None).to_dict("records")
        out = {**self.spec, "data": {"name": DATA}, "datasets": {DATA: rows}}
        if validate:
            alt.Chart.from_dict(out, validate=True)
        return out

    def to_json(self, **kwargs: Any) -> str:
        import json

        return json.dumps(self.to_dict(validate=False), **kwargs)


def data_title(frame: pd.DataFrame, text: str, wraps: bool = False) -> tuple[pd.DataFrame, Any]:
    """A title that changes from click to click (Explore's "Layer 3, head 4") read from the table: ``frame`` with
    the column :data:`TITLE`, and the title's spec, an expression over the table, so the spec stays as it was and
    the browser swaps the table in place. A title too long for one line of a phone's chart is written in the spec
    (:func:`titled`: it wraps), unless ``wraps``: then the title is always one that wraps to the chart's width, as
    :func:`titled` would wrap it, anchored at the start, its lines at each wrap in the table too
    (:data:`WRAP_COLUMNS`), so a click from a short title to a long one keeps the spec. A title :func:`titled` would
    give a subtitle is written in the spec."""
    import copy

    drawn = titled(text)
    if wraps and (isinstance(drawn, str) or drawn.subtitle is alt.Undefined):
        lines = {column: pd.Categorical([LINE_BREAK.join(_wrap([text], chars))] * len(frame))
                 for chars, column in zip(WRAPS, WRAP_COLUMNS, strict=True)}  # (one category: a few bytes a row)
        return frame.assign(**{TITLE: pd.Categorical([text] * len(frame))}, **lines), copy.deepcopy(WRAPPING_DATA_TITLE)
    if not isinstance(drawn, str):
        return frame, _title(text)
    return frame.assign(**{TITLE: text}), {"text": {**DATA_TITLE["text"]}}  # (a copy: the constant stays as it is)


def read_from_table(title: Any) -> bool:
    """Whether a spec's title is read from its table's :data:`TITLE` (:func:`data_title`)."""
    return title == DATA_TITLE or title == WRAPPING_DATA_TITLE


def _title(text: str) -> Any:
    """:func:`titled` as a spec's dictionary."""
    title = titled(text)
    return title if isinstance(title, str) else title.to_dict(validate=False)


def wrapped(parts: list[str], px: float) -> list[str] | Any:
    """``parts`` (paragraphs) as the lines of a title that wraps to the chart's width: the lines themselves where
    they are short enough for any width (:data:`WRAPS`), else a Vega expression that picks, from the chart's
    ``width``, the lines of the longest wrap whose lines fit it (``px`` pixels a character), the last wrap (the
    widest chart's) written last."""
    import json

    variants: list[tuple[int, list[str]]] = []
    for chars in WRAPS:
        lines = _wrap(parts, chars)
        if not variants or lines != variants[-1][1]:
            variants.append((chars, lines))
    if len(variants) == 1:
        return variants[0][1]
    return alt.expr(_by_width([(chars, json.dumps(lines, ensure_ascii=False)) for chars, lines in variants], px))


def _wrap(parts: list[str], chars: int) -> list[str]:
    """``parts`` (paragraphs) as lines of at most ``chars`` characters (``parts`` as they are if that leaves none)."""
    import textwrap

    return [line for part in parts for line in textwrap.wrap(part, chars)] or parts


def title_lines(part: Any) -> list[str]:
    """A title's or subtitle's lines as the widest chart shows them (a :func:`wrapped` expression's last wrap)."""
    import json

    if part is None or part is alt.Undefined:
        return []
    if isinstance(part, str):
        return [part]
    if isinstance(part, dict) or hasattr(part, "to_dict"):
        expr = part["expr"] if isinstance(part, dict) else part.to_dict()["expr"]
        return json.loads(expr[expr.rindex(" : [") + 3:] if " : [" in expr else expr)
    return list(part)


def titled(text: str, subtitle: str | None = None) -> str | alt.TitleParams:
    """A chart title that is never cut: ``text`` as it is when short (:data:`PHONE_LINE`). A longer one is split: a
    trailing "(…)" goes to the subtitle, and then, if it is still long, what follows its last ": " goes before it
    ("sink: share of attention… (click a cell to open it)" reads "sink" over "share of attention…" and "click a cell
    to open it"); the title wraps to the chart's width (:func:`wrapped`), the subtitle into lines of
    :data:`SUBTITLE_MAX` characters."""
    import textwrap

    parts = [subtitle] if subtitle else []
    if not parts and len(text) > TITLE_MAX and text.endswith(")") and " (" in text:
        cut = text.rindex(" (")
        text, parts = text[:cut], [text[cut + 2:-1]]
    if len(text) > TITLE_MAX and ": " in text:  # the last ": ": a label may hold one ("gradient: hidden")
        text, rest = text.rsplit(": ", 1)
        parts.insert(0, rest)
    if not parts and len(text) <= PHONE_LINE:
        return text
    lines = wrapped([text], TITLE_PX)
    # (Vega-Lite takes no expression for a subtitle: its lines are as long as a phone's chart is wide)
    below = [line for part in parts for line in textwrap.wrap(part, SUBTITLE_MAX)] or alt.Undefined
    return alt.TitleParams(text=lines[0] if isinstance(lines, list) and len(lines) == 1 else lines, subtitle=below,
                           anchor="start")


def _grid_axes(n_layers: int, n_heads: int) -> tuple[alt.X, alt.Y, dict]:
    """The axes of a layers × heads grid: the longer side across, so a deep model (smollm2: 30 layers × 9 heads) is
    a wide band one screen tall rather than a tall column, and a wide one (minilm: 6 × 12) stays heads across.
    Returns x, y and the fields of x and y (for layers drawn over the grid)."""
    layers: dict[str, Any] = dict(field="layer", type="ordinal", title="layer",
                                  scale=alt.Scale(domain=list(range(n_layers))))
    heads: dict[str, Any] = dict(field="head", type="ordinal", title="head",
                                 scale=alt.Scale(domain=list(range(n_heads))))
    across, down = (layers, heads) if n_layers > n_heads else (heads, layers)
    return (alt.X(**across, axis=alt.Axis(labelAngle=0)), alt.Y(**down),
            {"x": f"{across['field']}:O", "y": f"{down['field']}:O"})


GRID_COLUMN = 60  # px: a grid's column is at most this wide (a 12-head grid does not stretch into flat bands)


def _grid_size(n_layers: int, n_heads: int) -> dict:
    """A layers × heads grid's size: the page's width (at most :data:`GRID_COLUMN` a column), :data:`GRID_CELL` a
    row (see :func:`_grid_axes`)."""
    across, down = max(n_layers, n_heads), min(n_layers, n_heads)
    return dict(width="container", height=GRID_CELL * down, usermeta={MAX_WIDTH: GRID_COLUMN * across + 160})


def compact(frame: pd.DataFrame) -> pd.DataFrame:
    """A chart's long table as small as it goes to the browser (Streamlit ships it as Arrow beside the spec),
    with the same values: positions in the smallest integer type that holds them, repeated labels as
    categories (a one- or two-byte code a cell, each label sent once) and weights as float32 when that loses
    nothing (the traces are fp32, so the tooltip shows the exact weight). A 64×64 heatmap goes from ~57
    bytes a cell to 8."""
    out = {}
    for name, column in frame.items():
        values = column.to_numpy()
        if values.dtype.kind in "iu" and len(values):
            low, high = int(values.min()), int(values.max())
            kinds = (np.uint8, np.uint16) if low >= 0 else (np.int8, np.int16)
            values = next((values.astype(k) for k in kinds if np.iinfo(k).min <= low and high <= np.iinfo(k).max),
                          values)
        elif values.dtype.kind == "f" and values.dtype != np.float32:
            small = values.astype(np.float32)
            values = small if np.array_equal(small, values, equal_nan=True) else values
        elif values.dtype == object:
            values = pd.Categorical(values, categories=pd.unique(values))
        out[name] = values
    return pd.DataFrame(out)


def labels(tokens: list[str], start: int = 0) -> list[str]:
    """Axis labels that keep repeated tokens distinct: ``"3: she"``."""
    return [f"{start + i}: {t}" for i, t in enumerate(tokens)]


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


def _step(n: int) -> int:
    return 22 if n <= 40 else max(10, 880 // n)  # one cell per token, labels readable


def _row(n: int) -> int:
    """A heatmap row's height in pixels: :func:`_step`, and taller for a short text (up to 32 px), so its cells are
    not flat bands across a wide page."""
    return max(_step(n), min(32, 480 // max(n, 1)))


NARROW_COLUMN = 16  # px: a token's column narrower than this (a phone) turns its label upright and thins the labels


def token_axis(count: int) -> alt.Axis:
    """The x axis of ``count`` tokens, one column a token, on a chart as wide as the page: labels at -60° where a
    column is at least :data:`NARROW_COLUMN` px wide (a desk: every label, none dropped), and where it is narrower
    (a phone) upright, with Vega-Lite's greedy ``labelOverlap`` leaving out each label that would touch the last
    one kept, so they never pile up. Both are decided in the browser, from the chart's width."""
    spec = token_axis_spec(count)
    return alt.Axis(labelAngle=alt.expr(spec["labelAngle"]["expr"]),
                    labelOverlap=alt.expr(spec["labelOverlap"]["expr"]))


def token_axis_spec(count: int) -> dict[str, Any]:
    """:func:`token_axis` as a spec's dictionary."""
    narrow = f"width / {max(count, 1)} < {NARROW_COLUMN}"
    return {"labelAngle": {"expr": f"{narrow} ? -90 : -60"},
            "labelOverlap": {"expr": f"{narrow} ? 'greedy' : false"}}


HEATMAP_COLUMN, HEATMAP_LABELS = 40, 240  # px: a heatmap is at most 40 px a column wide (plus its labels and legend)


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
        "$schema": alt.SCHEMA_URL, "mark": {"type": "rect", "strokeWidth": 1.5, **_pointer(clickable)},
        "encoding": encoding, "width": "container", "height": {"step": _row(len(tokens))},
        "usermeta": {**CANVAS, MAX_WIDTH: HEATMAP_COLUMN * len(key_tokens) + HEATMAP_LABELS},
    }
    if title:
        frame, spec["title"] = data_title(frame, title)
    if clickable:
        spec["params"] = [_click("cell", ["query_pos", "key_pos"])]
    return Spec(spec, compact(frame))


def _pointer(clickable: bool) -> dict[str, str]:
    return {"cursor": "pointer"} if clickable else {}


def _click(name: str, fields: list[str]) -> dict[str, Any]:
    """A point selection ``name`` of ``fields``, made by a click and kept until the next (the charts' clicks)."""
    return {"name": name, "select": {"type": "point", "fields": fields, "on": "click", "clear": False}}


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
    return _bars(frame, "key", keys, f"Where {name!r} looks", "key (attended to)", key, clickable)


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
    return _bars(frame, "query", queries, f"Who attends to {name!r}", "query (attending)", query, clickable)


def _bars(frame: pd.DataFrame, field: str, order: list[str], title: str, axis: str, marked: int | None,
          clickable: bool) -> Spec:
    """One bar per token (``field``: key or query, with its ``<field>_pos``), weights on a fixed 0..1 scale."""
    pos = f"{field}_pos"
    colour: dict[str, Any] = {"value": "#08519c"}
    if marked is not None:  # (from the table, as the title: a click that moves it leaves the spec as it was)
        frame = frame.assign(**{MARKED: frame[pos].to_numpy() == int(marked)})
        colour = {"condition": {"test": f"datum.{MARKED}", "value": HIGHLIGHT}, **colour}
    frame, shown = data_title(frame, title)
    spec: dict[str, Any] = {
        "$schema": alt.SCHEMA_URL, "title": shown, "mark": {"type": "bar", **_pointer(clickable)},
        "encoding": {
            "x": {"field": field, "type": "nominal", "sort": order, "title": axis,
                  "axis": token_axis_spec(len(order))},
            "y": {"field": "weight", "type": "quantitative", "scale": {"domain": [0, 1]}, "title": "attention weight"},
            "color": colour,
            "tooltip": [{"field": field, "type": "nominal"},
                        {"field": "weight", "type": "quantitative", "format": ".6f", "title": said("weight")}],
        },
        "width": "container", "height": 180, "usermeta": {MAX_WIDTH: HEATMAP_COLUMN * len(order) + HEATMAP_LABELS},
    }
    if clickable:
        spec["params"] = [_click(field, [pos])]
    return Spec(spec, compact(frame))


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
        "params": [{**_click("head", ["head"]), "views": ["pictures"]},
                   {"name": "columns", "expr": f"ceil({h} / ceil({h} / {fit}))"}],
        "transform": [{"window": [{"op": "row_number", "field": "", "as": "i"}]},
                      *({"calculate": expr, "as": name} for name, expr in place.items())],
        "width": "container", "height": rows * down - MULTIPLES_GAP,
    }, frame)


PARITY_DOMAIN = (1e-9, 1e-3)  # max |Δ| always drawn on this log scale: a grid of zeros does not look like a signal


def parity_heatmap(diffs: np.ndarray, tolerance: float) -> Layered:
    """Layers × heads grid of max |Δ| between Hugging Face and the scratch pass, on a fixed log scale
    (:data:`PARITY_DOMAIN`, pale to dark: 0 and anything under 1e-9 sit at its pale bottom and read
    "0 (bit-identical)" or their value in the tooltip; a grid of zeros is a pale block, not a dark one); the
    tolerance is a tick on the legend and in the title, and heads above it are outlined in red."""
    layers, heads = diffs.shape
    ly, h = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    d = diffs.astype(float).ravel()
    low, high = PARITY_DOMAIN
    frame = pd.DataFrame({"layer": ly.ravel(), "head": h.ravel(), "max_abs_diff": d,
                          "shown": np.clip(d, low, high), "within": d <= tolerance,
                          "difference": [difference(x) for x in d]})
    x, y, _ = _grid_axes(layers, heads)
    base = alt.Chart(frame).encode(x=x, y=y)
    ticks = sorted({low, 1e-7, 1e-5, high, tolerance})
    rect = base.mark_rect().encode(
        color=alt.Color("shown:Q", scale=alt.Scale(type="log", domain=[low, high], scheme="orangered", clamp=True),
                        legend=alt.Legend(values=ticks, format=".2~e",
                                          title=["max |Δ|", f"tolerance {tolerance:.2g}"])),
        tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("head:O"), alt.Tooltip("difference:N", title="max |Δ|"),
                 alt.Tooltip("within:N", title="within tolerance")],
    )
    failed = base.transform_filter("!datum.within").mark_rect(fill=None, stroke="#cb181d", strokeWidth=2)
    return alt.layer(rect, failed, title=titled(f"max |Δ| attention per head (tolerance {tolerance:.2g}; red outline: "
                                                "above it)")).properties(**_grid_size(layers, heads))


def gains(frame: pd.DataFrame, value: str = "score") -> pd.Series:
    """Each row's ``value`` minus its baseline (NaN where there is no baseline)."""
    if "baseline" not in frame:
        return pd.Series(np.nan, index=frame.index)
    return frame[value] - frame["baseline"]


def best_label(frame: pd.DataFrame, value: str = "score", skip: frozenset[str] | set[str] = frozenset(),
               least: int = 0) -> str:
    """The label whose best head gains most over its baseline (the raw best score where none has one): the
    grid a reader should see first, not the alphabetically first one. Among labels scored as shares or
    accuracies (0 to 1) where there are any: a gain of 5 tokens of attention distance or 0.5 nats of entropy
    is not comparable with a gain of 0.5 in accuracy. Labels in ``skip`` (the sink share: the first token is
    never the answer unless asked for) only when there is nothing else; labels with fewer than ``least`` examples
    (column ``n``: a gain over one example is chance) only when no label has that many."""
    skipped = frame["label"].astype(str).isin(skip)
    if not skipped.all():
        frame = frame[~skipped]
    if least and "n" in frame:
        enough = frame["n"].groupby(frame["label"].astype(str)).transform("min") >= least
        if enough.any():
            frame = frame[enough]
    labels = frame["label"].astype(str)
    shares = frame[value].between(0, 1).groupby(labels).transform("all")
    if shares.any():
        frame, labels = frame[shares.astype(bool)], labels[shares.astype(bool)]
    gain = gains(frame, value)
    score = gain if gain.notna().any() else frame[value]
    by = score.groupby(labels).max().dropna()
    return str(by.idxmax()) if len(by) else str(frame["label"].iloc[0])


def chosen_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Each judged label's chosen head (the rows ``chosen`` marks in a table with held-out verdicts,
    :mod:`probes.evidence.probes`), one row a label; empty for a table without them."""
    if "chosen" not in frame or "verdict" not in frame:
        return frame.iloc[0:0]
    picked = frame["chosen"].astype(str).str.lower().isin(["true", "1"])
    rows = frame[picked].copy()
    rows["label"] = rows["label"].astype(str)
    return rows.drop_duplicates("label")


def supported_label(frame: pd.DataFrame, skip: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The label whose chosen head is supported on held-out items with the largest held-out gain over its baseline
    (None: no label's head is supported). Labels in ``skip`` (the sink) only when no other is supported."""
    rows = chosen_rows(frame)
    if rows.empty:  # (a table without verdicts, or none chosen)
        return None
    rows = rows[rows["verdict"].astype(str) == "supported"]
    if rows.empty:
        return None
    others = rows[~rows["label"].isin(skip)]
    rows = others if len(others) else rows
    gain = rows["heldout_score"] - rows["baseline_heldout"].fillna(0.0)
    return str(rows.loc[gain.idxmax(), "label"])


def head_grid(frame: pd.DataFrame, label: str, n_layers: int, n_heads: int, selected: tuple[int, int] | None = None,
              value: str = "score", reach: float | None = None, share: bool = False) -> Layered:
    """Layers × heads grid of one probe label's scores (rows of a probe table); clicking a cell selects
    that (layer, head): the selection is named ``head``. Where the rows have a baseline the colour is the
    gain over it, on a diverging scale centred at 0 and symmetric (so noise around the baseline stays pale,
    never stretched over the whole palette), with the raw value, the baseline and the gain in the tooltip and
    the baseline in the title; without one (or coloured by another value than the score), the raw value.
    ``reach``: the largest |gain| the scale spans (default: this grid's own), so grids of several models can share
    one scale and their colours compare. ``share``: the label is a plain share from 0 to 1 (the sink share), read as
    it is: on the heatmaps' fixed 0..1 scale (white is 0), the baseline in the tooltip and the title only."""
    rows = frame[frame["label"] == label]
    if rows.empty:
        raise ValueError(f"no rows for label {label!r}")
    rows = rows.assign(gain=gains(rows, value))
    relative = not share and value == "score" and bool(rows["gain"].notna().any())  # the baseline is the score's
    pick = alt.selection_point(name="head", fields=["layer", "head"], on="click", clear=False)
    tooltip = [alt.Tooltip("layer:O"), alt.Tooltip("head:O"),
               alt.Tooltip(f"{value}:Q", format=".4f", title=said(value))]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".4f", title=said(c))
                for c in ("baseline", "gain", "mean_attention", "sink")
                if c in rows and c != value and rows[c].notna().any()]
    tooltip += [alt.Tooltip("n:Q", title=said("n"))] if "n" in rows else []
    name, what = said(label), said(value)
    x, y, fields = _grid_axes(n_layers, n_heads)
    base = alt.Chart(rows).encode(x=x, y=y)
    if share:
        color = alt.Color(f"{value}:Q", scale=BLUE, title=[what, "(0 to 1)"])
        baselines = rows["baseline"].dropna().unique() if "baseline" in rows else []
        uniform = f"; uniform attention gives {baselines[0]:.3g}" if len(baselines) == 1 else ""
        title = f"{name}: share of attention from 0 to 1{uniform} (click a cell to open it)"
    elif relative:
        reach = float(reach if reach is not None else rows["gain"].abs().max()) or 1e-9
        color = alt.Color("gain:Q", title=[f"{what} −", "baseline"],
                          scale=alt.Scale(scheme="redblue", reverse=True, domain=[-reach, reach], domainMid=0))
        baselines = rows["baseline"].dropna().unique()
        against = f"baseline {baselines[0]:.3g}" if len(baselines) == 1 else "baseline per head"
        title = f"{name}: {what} above or below its {against} (click a cell to open it)"
    else:
        color = alt.Color(f"{value}:Q", scale=alt.Scale(scheme="viridis"), title=what)
        title = f"{name}: {what} by head, no baseline (click a cell to open it)"
    rect = base.mark_rect(cursor="pointer").encode(
        color=color, tooltip=tooltip, opacity=alt.condition(pick, alt.value(1.0), alt.value(0.75)),
    ).add_params(pick)
    layers = [rect]
    if selected is not None:
        mark = pd.DataFrame({"layer": [selected[0]], "head": [selected[1]]})
        layers.append(alt.Chart(mark).mark_rect(fill=None, stroke=HIGHLIGHT, strokeWidth=2.5).encode(**fields))
    return alt.layer(*layers, title=titled(title)).properties(**_grid_size(n_layers, n_heads))


SIGNED = ("loss", "logit_diff", "diff", "share")  # measures that can go below 0: drawn diverging around 0
EFFECT_RANGE = ["#ffffff", "#a63603"]  # a change ≥ 0: white is no change


def effect_grid(frame: pd.DataFrame, value: str, n_layers: int, n_heads: int, title: str,
                selected: tuple[int, int] | None = None, signed: bool | None = None,
                extra: tuple[str, ...] = ()) -> Layered:
    """Layers × heads grid of one number per head (a ``layer, head, <value>`` frame: an ablation's effect, a
    head's share of a logit, a difference between two texts). A number that can be negative (``signed``, by
    default: the measure is one of :data:`SIGNED` or a value is below 0) is coloured on a diverging scale
    centred at 0 and symmetric, so 0 is white whatever the range; a change that is never below 0 on a scale
    from 0 (white) to its largest value. Clicking a cell selects that (layer, head): the selection is
    ``head``. ``extra``: more columns for the tooltip."""
    missing = [c for c in ("layer", "head", value) if c not in frame]
    if missing:
        raise ValueError(f"the frame has no {', '.join(missing)} column")
    rows = frame[["layer", "head", value, *extra]]
    values = rows[value].astype(float)
    if signed is None:
        signed = value in SIGNED or bool((values < 0).any())
    reach = float(values.abs().max()) if len(values) else 0.0
    reach = reach if reach > 0 and np.isfinite(reach) else 1e-9
    if signed:
        scale = alt.Scale(scheme="redblue", reverse=True, domain=[-reach, reach], domainMid=0)
    else:
        scale = alt.Scale(domain=[0, reach], range=EFFECT_RANGE, interpolate="rgb")
    pick = alt.selection_point(name="head", fields=["layer", "head"], on="click", clear=False)
    x, y, fields = _grid_axes(n_layers, n_heads)
    base = alt.Chart(rows).encode(x=x, y=y)
    tooltip = [alt.Tooltip("layer:O"), alt.Tooltip("head:O"),
               alt.Tooltip(f"{value}:Q", format=".5f", title=said(value))]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".5f", title=said(c)) for c in extra]
    rect = base.mark_rect(cursor="pointer").encode(
        color=alt.Color(f"{value}:Q", scale=scale, title=said(value)),
        tooltip=tooltip, opacity=alt.condition(pick, alt.value(1.0), alt.value(0.75)),
    ).add_params(pick)
    layers = [rect]
    if selected is not None:
        mark = pd.DataFrame({"layer": [selected[0]], "head": [selected[1]]})
        layers.append(alt.Chart(mark).mark_rect(fill=None, stroke=HIGHLIGHT, strokeWidth=2.5).encode(**fields))
    return alt.layer(*layers, title=titled(title)).properties(**_grid_size(n_layers, n_heads))


def cost_chart(frame: pd.DataFrame, y: str, title: str, quadratic: float | None = None) -> alt.Chart:
    """A measure (``y``: a column of a tidy ``tokens, path, …`` table) against input length, one line
    per path, log-log; ``quadratic`` = c draws the curve c·L² for comparison."""
    data = frame[["tokens", "path", y]].dropna()
    paths = list(dict.fromkeys(data["path"]))
    colours = PALETTE[: len(paths)]
    if quadratic is not None:
        grid = np.unique(np.geomspace(data["tokens"].min(), data["tokens"].max(), 24).round())
        data = pd.concat([data, pd.DataFrame({"tokens": grid, "path": QUADRATIC, y: quadratic * grid**2})])
        paths, colours = paths + [QUADRATIC], colours + ["#969696"]
    return (
        alt.Chart(data, title=titled(title))
        .mark_line(point=True)
        .encode(
            x=alt.X("tokens:Q", scale=alt.Scale(type="log", base=2), title="input length (tokens)"),
            y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log"), title=said(y)),
            color=alt.Color("path:N", title=None, scale=alt.Scale(domain=paths, range=colours),
                            legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
            strokeDash=alt.condition(alt.datum.path == QUADRATIC, alt.value([4, 3]), alt.value([1, 0])),
            tooltip=[alt.Tooltip("path:N"), alt.Tooltip("tokens:Q"),
                     alt.Tooltip(f"{y}:Q", format=".4g", title=said(y))],
        )
        .properties(width="container", height=280)
    )


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
    cell = _step(width)
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
        .properties(width="container", height=alt.Step(min(cell, 22)),
                    usermeta={MAX_WIDTH: HEATMAP_COLUMN * width + HEATMAP_LABELS})
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


LENS_CELL = 50  # px: a logit-lens cell holds a token as text (16 fit beside the sidebar)
LENS_RANGE = ["#ffffff", "#a63603"]  # a head's direct logit contribution: white is 0 (below 0 stays white)


BYTES = re.compile(r"(?:\\x[0-9a-f]{2})+")  # a run of \xNN escapes: bytes of a character the token holds part of


def bytes_said(run: str) -> str:
    """A run of ``\\xNN`` escapes (what :func:`probes.tokens.readable_tokens` makes of a piece of a character) as
    a reader reads it: ‹99 82›, the bytes in hex between guillemets."""
    return "‹" + " ".join(run[i + 2:i + 4] for i in range(0, len(run), 4)) + "›"


def visible(piece: str) -> str:
    """A token as a cell or tooltip shows it: each leading or trailing space (a no-break space too) as ␣, a token
    of spaces only as ␣s, and the bytes of a character it holds only part of (a byte-level vocabulary's piece of 她)
    as ‹e5 a5›, not as the escapes \\xe5\\xa5."""
    core = BYTES.sub(lambda m: bytes_said(m.group()), piece.strip())
    lead, trail = len(piece) - len(piece.lstrip()), len(piece) - len(piece.rstrip())
    return "␣" * len(piece) if not piece.strip() else "␣" * lead + core + "␣" * trail


def lens_grid(frame: pd.DataFrame, row: str, rows: list[str], value: str = "probability", title: str = "",
              reach: float | None = None) -> Layered:
    """The logit lens as a table (a tidy ``<row>, position, input, rank, piece, <value>`` frame of
    ``probes.effects.lens``): one row per value of ``row`` in the order ``rows`` (layers: "embeddings" … "after layer
    N−1"; heads: "L.H"), one column per position (its input token), each cell the top token as text. ``value``
    "probability" is coloured on the fixed 0..1 blue scale (white is 0); a logit contribution (a head's direct
    effect) from 0 (white) to ``reach`` (default: the largest top logit shown), in another hue, below 0 white. The
    tooltip lists the top k with their value."""
    missing = [c for c in (row, "position", "input", "rank", "piece", value) if c not in frame]
    if missing:
        raise ValueError(f"the frame has no {', '.join(missing)} column")
    frame = frame.assign(shown=[visible(p) for p in frame["piece"]])
    digits = ".3f" if value == "probability" else "+.3f"
    frame["said"] = [f"{s}  {v:{digits}}" for s, v in zip(frame["shown"], frame[value], strict=True)]
    ranks = sorted(frame["rank"].unique())
    tops = frame.pivot_table(index=[row, "position"], columns="rank", values="said", aggfunc="first")
    tops.columns = [f"top{r}" for r in tops.columns]
    cells = frame[frame["rank"] == 1][[row, "position", "input", "shown", value]].merge(
        tops.reset_index(), on=[row, "position"])
    positions = sorted(cells["position"].unique())
    inputs = dict(zip(cells["position"], cells["input"], strict=True))
    names = [f"{p}: {inputs[p]}" for p in positions]
    cells["column"] = [f"{p}: {t}" for p, t in zip(cells["position"], cells["input"], strict=True)]
    if value == "probability":
        scale, dark = BLUE, 0.5
    else:
        reach = float(reach if reach is not None else cells[value].max())
        reach = reach if reach > 0 and np.isfinite(reach) else 1e-9
        scale, dark = alt.Scale(domain=[0, reach], range=LENS_RANGE, interpolate="rgb", clamp=True), reach / 2
    tooltip = [alt.Tooltip(f"{row}:N"), alt.Tooltip("column:N", title="position")]
    tooltip += [alt.Tooltip(f"top{r}:N", title=f"top {r}") for r in ranks]
    base = alt.Chart(compact(cells.drop(columns=["input"]))).encode(
        x=alt.X("column:N", sort=names, title="position: input token", axis=alt.Axis(labelAngle=-60, labelOverlap=False,
                                                                                     orient="top")),
        y=alt.Y(f"{row}:N", sort=rows, title=None, axis=alt.Axis(labelOverlap=False)),
        tooltip=tooltip,
    )
    # the colour bar no longer than the table is tall (a 9-head table is 180 px: a 200 px bar ran off its foot)
    legend = alt.Legend(gradientLength=max(60, 20 * len(rows) - 30))
    rect = base.mark_rect(stroke="#d9d9d9", strokeWidth=0.5).encode(
        color=alt.Color(f"{value}:Q", scale=scale, title=value if value == "probability" else "logit (direct)",
                        legend=legend))
    text = base.mark_text(fontSize=11, limit=alt.expr(f"width / {len(positions)} - 4")).encode(
        text=alt.Text("shown:N"),
        color=alt.condition(f"datum['{value}'] > {dark}", alt.value("white"), alt.value("black")))
    return alt.layer(rect, text, title=titled(title)).properties(
        width="container", height=alt.Step(20), usermeta={**CANVAS, MAX_WIDTH: LENS_CELL * len(positions) + 200})


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


KIND_COLOURS = {"q": "#08519c", "k": "#e6550d", "v": "#31a354"}  # Q-, K-, V-composition (and the patched input)


def circuit_graph(edges: pd.DataFrame, receiver: tuple[int, int], n_layers: int, n_heads: int,
                  title: str = "") -> alt.Chart:
    """One receiver head and its strongest senders as a small layered graph: every head at (layer, head), senders
    in their layer's column, one edge per (sender, kind) to the receiver, its width the ``value`` (an ``edges`` frame:
    sender_layer, sender_head, kind, value, label), coloured by kind (q, k, v). The layers drawn end at the receiver's
    (a sender is always earlier: no empty columns after it); the receiver's name sits to its right, clear of the
    edges that meet there and of the senders' names above them. A click on a head selects it (the selection
    ``head``: layer and head), so the page can open it on Explore."""
    r_layer, r_head = receiver
    lines = edges.assign(layer2=r_layer, head2=r_head, width=edges["value"].abs())
    reach = float(lines["width"].max()) if len(lines) else 0.0
    reach = reach if reach > 0 and np.isfinite(reach) else 1.0
    shown = min(r_layer + 1, n_layers)  # layers 0 … the receiver's
    x = alt.X("layer:Q", title="layer", scale=alt.Scale(domain=[-0.5, shown - 0.5]),
              axis=alt.Axis(values=list(range(shown)), format="d"))
    y = alt.Y("head:Q", title="head", scale=alt.Scale(domain=[n_heads - 0.5, -0.5]),
              axis=alt.Axis(values=list(range(n_heads)), format="d"))
    kinds = alt.Scale(domain=list(KIND_COLOURS), range=list(KIND_COLOURS.values()))
    edge = alt.Chart(lines.rename(columns={"sender_layer": "layer", "sender_head": "head"})).mark_rule(
        opacity=0.7).encode(x=x, y=y, x2="layer2:Q", y2="head2:Q",
                            strokeWidth=alt.StrokeWidth("width:Q", scale=alt.Scale(domain=[0, reach], range=[0.5, 9]),
                                                        legend=None),
                            color=alt.Color("kind:N", scale=kinds, title="into"),
                            tooltip=[alt.Tooltip("label:N", title="edge"), alt.Tooltip("value:Q", format="+.4f",
                                                                                           title="size")])
    heads = pd.concat([edges[["sender_layer", "sender_head"]].set_axis(["layer", "head"], axis=1),
                       pd.DataFrame({"layer": [r_layer], "head": [r_head]})]).drop_duplicates()
    heads["name"] = [f"{a}.{b}" for a, b in zip(heads["layer"], heads["head"], strict=True)]
    heads["role"] = np.where((heads["layer"] == r_layer) & (heads["head"] == r_head), "receiver", "sender")
    pick = alt.selection_point(name="head", fields=["layer", "head"], on="click", clear=False)
    node = alt.Chart(heads).mark_circle(size=220, cursor="pointer", stroke="white", strokeWidth=1.5).encode(
        x=x, y=y, color=alt.Color("role:N", scale=alt.Scale(domain=["receiver", "sender"],
                                                              range=[HIGHLIGHT, "#444444"]), title="head"),
        tooltip=[alt.Tooltip("name:N", title="head"), alt.Tooltip("role:N")]).add_params(pick)
    senders = alt.Chart(heads[heads.role == "sender"]).mark_text(dy=-14, fontSize=10).encode(x=x, y=y, text="name:N")
    receiving = alt.Chart(heads[heads.role == "receiver"]).mark_text(dx=14, align="left", fontSize=11,
                                                                      fontWeight="bold").encode(x=x, y=y, text="name:N")
    return (alt.layer(edge, node, senders, receiving, title=titled(title)).resolve_scale(color="independent")
            .properties(width="container", height=max(200, 22 * n_heads),
                        usermeta={MAX_WIDTH: max(240, 60 * (r_layer + 1)) + 200}))
