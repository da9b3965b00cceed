"""Every chart of the app together (the core's and the pages'): each takes the page's width, a long title becomes a
title and a subtitle that wrap to the chart's width, a deep model's grid fits a screen."""

import numpy as np
import pandas as pd
import pytest
import specs

from dashboard.app_pages.cost import charts as cost_charts
from dashboard.app_pages.parity import charts as parity_charts
from dashboard.core import charts as core_charts, grid_charts, token_charts


def _grid_frame(layers: int, heads: int) -> pd.DataFrame:
    layer, head = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    return pd.DataFrame({"label": "prev", "layer": layer.ravel(), "head": head.ravel(),
                         "score": np.linspace(0, 1, layer.size),
                         "baseline": 0.2, "n": 10})


def _shown(part, width: float) -> list[str]:
    """The lines of a title (or subtitle) that wraps to the chart's width, as a chart ``width`` px wide shows them."""
    import json
    import re

    expr = part.get("expr") if isinstance(part, dict) else None
    if expr is None:
        return specs.lines(part)
    for limit, lines in re.findall(r"width < (\d+) \? (\[.*?\]) : ", expr):
        if width < int(limit):
            return json.loads(lines)
    return specs.lines(part)


def test_charts_take_the_page_width_and_a_heatmap_of_many_tokens_shrinks_its_cells():
    """Every chart the app draws in the page's column is as wide as that column ("container"), so a 64-token heatmap
    never overflows it and a short one does not leave most of the page empty (it asks for at most ~40 px a column)."""
    tokens = [f"t{i}" for i in range(64)]
    w = np.full((64, 64), 1 / 64)
    heat = token_charts.attention_heatmap(tokens, w, "Layer 0, head 0").to_dict()
    short = token_charts.attention_heatmap(tokens[:12], np.full((12, 12), 1 / 12), "Layer 0, head 0").to_dict()
    bars = token_charts.query_bars(tokens[:12], np.full(12, 1 / 12), 3).to_dict()
    grid = grid_charts.head_grid(_grid_frame(6, 12), "prev", 6, 12).to_dict()
    effect = grid_charts.effect_grid(_grid_frame(6, 12), "score", 6, 12, "loss").to_dict()
    parity = parity_charts.parity_heatmap(np.zeros((6, 12)), 1e-5).to_dict()
    cost = cost_charts.cost_chart(pd.DataFrame({"tokens": [16, 32], "path": "HF", "bytes": [1.0, 4.0]}), "bytes", "m")
    for spec in (heat, short, bars, grid, effect, parity, cost.to_dict()):
        assert spec["width"] == "container"
    assert short["usermeta"][core_charts.MAX_WIDTH] == 12 * 40 + 240 < heat["usermeta"][core_charts.MAX_WIDTH]
    assert short["height"]["step"] == 32 > heat["height"]["step"]  # rows of a short text are taller, not flat bands


def test_long_titles_are_a_short_title_and_a_subtitle_never_one_long_line():
    long = grid_charts.head_grid(_grid_frame(6, 12), "prev", 6, 12).to_dict()["title"]
    assert specs.lines(long["text"]) == ["prev: score above or below its baseline 0.2"]
    assert specs.lines(long["subtitle"]) == ["click a cell to open it"]
    sink_label = "attention sink (first token)"
    sink = grid_charts.head_grid(_grid_frame(6, 12).assign(label=sink_label), sink_label, 6, 12,
                                 share=True).to_dict()["title"]
    assert sink["text"] == "attention sink (first token)"  # what follows ": " is the subtitle's first line
    assert specs.lines(sink["subtitle"])[0].startswith("share of attention from 0 to 1")
    words = " ".join(["word"] * 40)
    wrapped = grid_charts.effect_grid(_grid_frame(2, 2), "score", 2, 2, words).to_dict()["title"]
    wrapped_lines = specs.lines(wrapped["text"])
    assert " ".join(wrapped_lines) == words and all(len(line) <= core_charts.WRAPS[-1] for line in wrapped_lines)
    for spec in (long, sink, wrapped):
        assert all(len(line) <= core_charts.SUBTITLE_MAX for line in specs.lines(spec.get("subtitle")))
    assert token_charts.attention_heatmap(["a", "b"], np.eye(2), "Layer 1, head 2").title == "Layer 1, head 2"


@pytest.mark.parametrize("width", [200, 250, 300, 400, 600, 740, 1200])
def test_titles_wrap_to_the_charts_width_not_to_a_fixed_count_of_characters(width):
    """The DLA grid's title is one line above a 900 px chart (it wrapped at 372 px), and on a phone its lines are as
    long as the chart is wide, every word kept (none cut with "…")."""
    title = "each head's direct share of logit(␣Xiaohong) − logit(␣Xiaoming) at token 10 (click: Explore)"
    spec = grid_charts.effect_grid(_grid_frame(6, 12), "score", 6, 12, title).to_dict()["title"]
    lines = _shown(spec["text"], width)
    assert " ".join(lines) == title[:title.rindex(" (")]  # every word, in order
    widest = max(width, core_charts.WRAPS[0] * core_charts.TITLE_PX)
    assert all(len(line) * core_charts.TITLE_PX <= widest for line in lines), lines
    if width >= 740:  # a 900 px chart's plot: one line
        assert len(lines) == 1
    assert spec["subtitle"] == ["click: Explore"]


@pytest.mark.parametrize("grid", ["head", "effect", "parity"])
def test_a_deep_models_grid_is_layers_across_and_one_screen_tall(grid):
    """smollm2's 30 layers × 9 heads: layers across (x), heads down (y), at most 500 px tall; a click still selects
    the (layer, head) of the cell; minilm's 6 × 12 stays heads across."""
    def draw(layers, heads):
        frame = _grid_frame(layers, heads)
        if grid == "head":
            return grid_charts.head_grid(frame, "prev", layers, heads, selected=(20, 3)).to_dict()
        if grid == "effect":
            return grid_charts.effect_grid(frame, "score", layers, heads, "loss", selected=(20, 3)).to_dict()
        return parity_charts.parity_heatmap(np.zeros((layers, heads)), 1e-5).to_dict()

    deep, wide = draw(30, 9), draw(6, 12)
    x, y = deep["layer"][0]["encoding"]["x"], deep["layer"][0]["encoding"]["y"]
    assert (x["field"], y["field"]) == ("layer", "head") and deep["height"] <= 500
    assert (wide["layer"][0]["encoding"]["x"]["field"], wide["layer"][0]["encoding"]["y"]["field"]) == ("head", "layer")
    if grid != "parity":
        assert x["scale"]["domain"] == list(range(30)) and y["scale"]["domain"] == list(range(9))
        assert deep["params"][0]["select"]["fields"] == ["layer", "head"]  # a click opens the same head
        outline = deep["layer"][1]["encoding"]
        assert (outline["x"]["field"], outline["y"]["field"]) == ("layer", "head")  # the outline on its own cell


def _least(spec: dict) -> int:
    return spec["usermeta"][core_charts.MIN_WIDTH]


def test_a_chart_of_many_columns_keeps_cells_a_finger_picks_and_scrolls_on_a_phone():
    """Each column of a heatmap, a bar chart, a layers × heads grid and the logit lens is at least MIN_CELL px (the
    lens: a token of six characters) plus its axis: a chart needing more than a phone's 358 px column asks for it
    (the app scrolls it in its own box); the most it takes at a desk is never below that least."""
    from dashboard.app_pages.circuit import charts as circuit_charts
    from dashboard.app_pages.generate import charts as generate_charts
    from dashboard.core import lens_charts

    tokens = [f"t{i}" for i in range(15)]
    heat = token_charts.attention_heatmap(tokens, np.full((15, 15), 1 / 15), "Layer 0, head 0").to_dict()
    bars = token_charts.query_bars(tokens, np.full(15, 1 / 15), 3).to_dict()
    deep = grid_charts.effect_grid(_grid_frame(30, 9), "score", 30, 9, "loss").to_dict()
    wide = grid_charts.head_grid(_grid_frame(6, 12), "prev", 6, 12).to_dict()
    parity = parity_charts.parity_heatmap(np.zeros((30, 9)), 1e-5).to_dict()
    band = generate_charts.generation_band(tokens[:4], tokens, np.full((4, 15), 1 / 15), 0).to_dict()
    lens_frame = pd.DataFrame({"layer": "after layer 0", "position": range(16), "input": "a", "rank": 1,
                               "piece": "b", "probability": 0.5})
    lens = lens_charts.lens_grid(lens_frame, "layer", ["after layer 0"]).to_dict()
    edges = pd.DataFrame({"sender_layer": [15, 15], "sender_head": [0, 1], "kind": "k", "value": [0.2, 0.1],
                          "label": ["15.0 → 16.1", "15.1 → 16.1"]})
    circuit = circuit_charts.circuit_graph(edges, (16, 1), 30, 9).to_dict()
    for spec, columns, least in ((heat, 15, core_charts.MIN_CELL), (bars, 15, core_charts.MIN_CELL),
                                 (deep, 30, core_charts.MIN_CELL), (wide, 12, core_charts.MIN_CELL),
                                 (parity, 30, core_charts.MIN_CELL), (band, 15, core_charts.MIN_CELL),
                                 (lens, 16, lens_charts.LENS_MIN_CELL), (circuit, 17, circuit_charts.LAYER_MIN)):
        assert least * columns < _least(spec) <= spec["usermeta"][core_charts.MAX_WIDTH]
    assert core_charts.MIN_CELL >= 24  # WCAG 2.2's least target size
    assert _least(deep) > 390 and _least(heat) > 390 and _least(lens) > 390  # these scroll on a phone
    assert _least(wide) <= 390 - 2 * 16  # minilm's 12 heads fit a phone's column: no scrolling for nothing
    assert heat["height"]["step"] >= core_charts.MIN_CELL and band["height"]["step"] >= core_charts.MIN_CELL
    assert circuit["height"] >= circuit_charts.HEAD_ROW * 9  # two heads' names one above the other never touch


def test_a_charts_width_limits_are_not_in_the_spec_the_browser_gets():
    """MIN_WIDTH and MAX_WIDTH are the element's width (the app's), so a grid of one column more keeps its spec."""
    spec = token_charts.attention_heatmap(["a", "b"], np.eye(2), "Layer 1, head 2", clickable=True)
    meta = spec.streamed().get("usermeta", {})
    assert core_charts.MIN_WIDTH not in meta and core_charts.MAX_WIDTH not in meta
    assert meta["embedOptions"] == {"renderer": "canvas"}


class _Box:
    """What ``ui.chart`` draws into, as Streamlit's containers take it: the keys of the boxes it opens (a key taken
    this run is refused, as Streamlit refuses it), the HTML it writes and the charts with their arguments."""

    def __init__(self, taken: set[str] | None = None):
        self.taken = set() if taken is None else taken
        self.boxes: list[tuple[str, _Box]] = []
        self.html_written: list[str] = []
        self.charts: list[tuple[dict, dict]] = []

    def container(self, key: str):
        from streamlit.errors import StreamlitDuplicateElementKey

        if key in self.taken:
            raise StreamlitDuplicateElementKey(key)
        self.taken.add(key)
        self.boxes.append((key, _Box(self.taken)))
        return self.boxes[-1][1]

    def html(self, text: str) -> None:
        self.html_written.append(text)

    def vega_lite_chart(self, data, spec, **kwargs):
        self.charts.append((spec, kwargs))

    def altair_chart(self, chart, **kwargs):
        self.charts.append((chart.to_dict(), kwargs))


def test_the_app_draws_every_legend_under_its_plot_and_a_wide_chart_in_a_box_that_scrolls():
    from dashboard.core import ui

    page = _Box()
    heat = token_charts.attention_heatmap([f"t{i}" for i in range(15)], np.full((15, 15), 1 / 15), "Layer 0, head 0")
    ui.chart(heat, container=page)
    ui.chart(grid_charts.effect_grid(_grid_frame(30, 9), "score", 30, 9, "loss"), container=page)
    cost = cost_charts.cost_chart(pd.DataFrame({"tokens": [16, 32], "path": "HF", "bytes": [1.0, 4.0]}), "bytes", "m")
    ui.chart(cost, container=page)
    assert [key for key, _ in page.boxes] == ["wide_chart", "wide_chart_1"]  # one box each, the next free key
    (key, box), (_, grid_box) = page.boxes
    assert f".st-key-{key} {{ overflow-x: auto;" in box.html_written[0]
    assert f"min-width: {_least(heat.to_dict(validate=False))}px;" in box.html_written[0]
    (heat_spec, heat_args), (grid_spec, _) = box.charts + grid_box.charts
    assert heat_args["width"] == heat.usermeta[core_charts.MAX_WIDTH]  # at most this wide at a desk, as before
    (cost_spec, cost_args), = page.charts  # a chart that fits any column is drawn where it was, in no box
    for spec in (heat_spec, grid_spec, cost_spec):
        assert spec["config"]["legend"]["orient"] == "bottom"
    assert grid_spec["config"]["view"]  # the chart's own config kept beside it
    assert core_charts.legend_below({"legend": {"labelLimit": 0}, "view": {"stroke": None}}) == {
        "legend": {"orient": "bottom", "labelLimit": 0}, "view": {"stroke": None}}
