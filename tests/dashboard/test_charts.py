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
