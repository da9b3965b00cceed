"""Chart primitives every page draws with: colours, the Vega-Lite dictionary of a chart redrawn on every click
(:class:`Spec`), titles that wrap to a chart's width, token labels and axes, the click a chart selects. No Streamlit and
no model math here: pure functions of plain lists, arrays and frames, tested as chart specs without a browser.
A page's own charts live in its folder (``dashboard/app_pages/<page>/charts.py``)."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

# Altair checks every object against the Vega-Lite schema as it is built (its "debug mode"): a py-spy profile of a
# click on Explore found much of its script time there (docs/benchmarks.md, `browser_speed.py`). A chart's whole spec
# is still checked where it matters, by the tests, which call ``to_dict()`` (validating) on what these functions
# return; the app's ``ui.chart`` skips it too.
alt.utils.schemapi.disable_debug_mode()

BLUE = alt.Scale(domain=[0, 1], range=["#ffffff", "#08519c"], interpolate="rgb")  # white is exactly 0
BLUE_SPEC = BLUE.to_dict()
HIGHLIGHT = "#e6550d"  # the selected query token / head
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
# The smallest cell (or bar) a chart draws across: WCAG 2.2's minimum target size (2.5.8: 24 × 24 CSS px), the
# least a finger can pick out on a phone (a heatmap's cell, a grid's head, a bar are all clicked). A chart whose
# columns need more than the page's width keeps this and scrolls sideways in its own box (``ui.chart``) rather
# than shrinking its cells to slivers; on a desk it is as wide as it was.
MIN_CELL = 24
MIN_WIDTH = "minWidth"  # a chart's usermeta key: the app draws it at least this many pixels wide (see MIN_CELL)
# Every chart's legend sits under its plot (``ui.chart`` adds this to each chart's config): Vega-Lite cannot read the
# viewport, and a legend beside the plot took a third of a phone's width from it; under it, it takes none at a desk
# either.
LEGEND = {"orient": "bottom"}
Layered = alt.LayerChart | alt.FacetChart  # what alt.layer gives
DATA = "table"  # a Spec's table's name in the spec Streamlit gets: the same on every rerun (see Spec.streamed)
MARKED = "marked"  # a Spec's column: the rows drawn in the highlight colour (the query's row, the other chart's bar)
TITLE = "title"  # a Spec's column: its title, when the title is read from the table (see data_title)
DATA_TITLE = {"text": {"expr": f"length(data('{DATA}')) ? data('{DATA}')[0].{TITLE} : ''"}}  # such a title's spec
WRAP_COLUMNS = [f"{TITLE}_{chars}" for chars in WRAPS]  # a wrapping title's lines at each wrap (see data_title)
LINE_BREAK = "\x1f"  # between those lines in a cell: a character no title holds


def widths(columns: int, most: int, labels: int, axis: int, least: int = MIN_CELL) -> dict[str, int]:
    """A "container"-wide chart's usermeta for ``columns`` columns: at most ``most`` px a column plus ``labels`` px
    (:data:`MAX_WIDTH`), and at least ``least`` px a column (:data:`MIN_CELL`) plus ``axis`` px for its y axis's
    labels and title (:data:`MIN_WIDTH`)."""
    return {MAX_WIDTH: most * columns + labels, MIN_WIDTH: least * columns + axis}


def legend_below(config: dict[str, Any] | None) -> dict[str, Any]:
    """A spec's ``config`` with its legends under the plot (:data:`LEGEND`), the rest as it was."""
    config = dict(config or {})
    return {**config, "legend": {**LEGEND, **config.get("legend", {})}}


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
    click's script time (a py-spy profile: docs/benchmarks.md, `browser_speed.py`). It reads as an Altair chart
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
        :data:`MAX_WIDTH` and :data:`MIN_WIDTH` are left out (the app gives them as the element's width:
        ``ui.chart``), so a grid with one column more keeps its spec too."""
        spec = {**self.spec, "data": {"name": DATA}, "datasets": {DATA: self.data}}
        meta = {name: value for name, value in (spec.pop("usermeta", None) or {}).items()
                if name not in (MAX_WIDTH, MIN_WIDTH)}
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


def label_step(n: int) -> int:
    """A token's row in pixels: :data:`MIN_CELL` up to 40 tokens (a finger picks a row on a phone), thinner for a
    longer window (64 rows of 24 px would be a page and a half tall at a desk), every label readable."""
    return MIN_CELL if n <= 40 else max(10, 880 // n)


def row_of(n: int) -> int:
    """A heatmap row's height in pixels: :func:`label_step`, and taller for a short text (up to 32 px), so its cells are
    not flat bands across a wide page."""
    return max(label_step(n), min(32, 480 // max(n, 1)))


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
TOKEN_AXIS = 150  # px: a y axis of token labels ("14: ␣Xiaohong") and its title, about, on a phone


def pointer(clickable: bool) -> dict[str, str]:
    return {"cursor": "pointer"} if clickable else {}


def click(name: str, fields: list[str]) -> dict[str, Any]:
    """A point selection ``name`` of ``fields``, made by a click and kept until the next (the charts' clicks)."""
    return {"name": name, "select": {"type": "point", "fields": fields, "on": "click", "clear": False}}


