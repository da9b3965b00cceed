"""Explore's own charts (dashboard/app_pages/explore/charts.py): the small multiples, the key's bars, the first
token hidden, "Why this weight?"'s grid."""

import numpy as np
import pandas as pd
import pytest
import specs
from numeric import F64

from dashboard.app_pages.explore import charts
from dashboard.core import charts as core_charts, token_charts


def _scene(spec: dict) -> dict[str, list[dict]]:
    """The chart as Vega draws it (vl-convert's scene graph): each kind of mark's items ("rect mark",
    "text axis-label", "text legend-label", "text title-text", …), in the order drawn."""
    import json

    import vl_convert

    found: dict[str, list[dict]] = {}

    def walk(node):
        if isinstance(node, dict):
            if node.get("marktype"):
                found.setdefault(f"{node['marktype']} {node.get('role')}", []).extend(node.get("items", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(vl_convert.vegalite_to_scenegraph(json.dumps(spec)))
    return found


@pytest.mark.numeric
def test_layer_multiples_draw_every_head_as_a_picture_of_its_weights():
    w = np.random.default_rng(0).random((4, 3, 3))
    spec = charts.layer_multiples(w, layer=2, causal=True).to_dict()
    rows = specs.rows(spec)
    assert [r["head"] for r in rows] == ["2.0", "2.1", "2.2", "2.3"]  # one picture a head, not n² cells
    assert spec["transform"][0]["window"][0]["op"] == "row_number"  # placed in head order
    shown = charts.image_weights(rows[3]["url"], cell=32)  # 96 // 3 pixels a token
    assert np.abs(shown - np.tril(w[3])).max() <= 1 / 240  # the heatmap's colours, to one step of 8 bits
    assert shown[0, 2] == 0.0  # the causal future is white
    assert rows[3]["peak"] == w[3].max()  # the weight itself, not a rounding of it


@pytest.mark.numeric
def test_key_bars_are_the_heatmaps_column_and_hide_queries_before_the_key():
    w = np.tril(np.random.default_rng(2).random((4, 4)))
    w /= w.sum(1, keepdims=True)
    bars = charts.key_bars(["a", "b", "c", "d"], w[:, 1], key=1, causal=True, query=3, clickable=True)
    spec = bars.to_dict()
    assert bars.title == "Who attends to '1: b'"
    assert [(r["query_pos"], r["weight"]) for r in specs.rows(spec)] == [(q, w[q, 1]) for q in (1, 2, 3)]  # exact
    assert spec["encoding"]["color"]["condition"] == {"test": "datum.marked", "value": "#e6550d"}
    assert [r["query_pos"] for r in specs.rows(spec) if r["marked"]] == [3]
    assert [p["name"] for p in spec["params"]] == ["query"]
    with pytest.raises(ValueError, match="3 weights for 2 tokens"):
        charts.key_bars(["a", "b"], np.ones(3), 0)


def test_layer_multiples_outline_the_selected_head_and_answer_clicks():
    w = np.full((3, 4, 4), 0.25)
    spec = charts.layer_multiples(w, layer=5, start=20, selected=1).to_dict()
    assert [p["name"] for p in spec["params"]] == ["head", "columns"]  # the selection, and the columns that fit
    assert spec["params"][0]["select"] == {"type": "point", "fields": ["head"], "on": "click", "clear": False}
    image, _, _, outline = spec["layer"]
    assert image["mark"]["type"] == "image" and spec["params"][0]["views"] == [image["name"]]  # a click on a picture
    assert outline["transform"] == [{"filter": "datum.marked"}] and outline["mark"]["stroke"] == "#e6550d"
    assert [r["head"] for r in specs.rows(spec) if r["marked"]] == ["5.1"]
    assert {r["tokens"] for r in specs.rows(spec)} == {"20–23"}
    assert len(charts.layer_multiples(w, layer=5).to_dict()["layer"]) == 3  # no head selected: no outline


@pytest.mark.numeric
def test_without_first_rescales_each_row_over_the_other_keys_and_keeps_the_true_weights():
    rows = np.array([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.5, 0.125, 0.375]])  # a decoder's rows, the first a sink
    shown, true, first = charts.without_first(rows, 0, 3)
    assert first == 1 and np.array_equal(true, rows[:, 1:])
    assert np.isnan(shown[0]).all()  # the first row sees only the first token: nothing left to show
    assert np.abs(shown[1:] - [[1.0, 0.0], [0.25, 0.75]]).max() <= F64  # w_ij / (1 − w_i0)
    assert np.abs(shown[1:].sum(axis=1) - 1).max() <= F64  # each shown row sums to 1 again
    # a window that starts after the first token: its rows are still rescaled by their weight off the first token
    shown, true, first = charts.without_first(rows[1:], 2, 3)
    assert first == 2 and np.abs(shown - [[0.0], [0.75]]).max() <= F64 and np.array_equal(true, rows[1:, 2:])


@pytest.mark.numeric
def test_heatmap_without_the_first_token_hides_its_column_and_keeps_the_true_weight_in_the_tooltip():
    rows = np.array([[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.5, 0.125, 0.375]])
    shown, true, first = charts.without_first(rows, 0, 3)
    spec = token_charts.attention_heatmap(["<s>", "a", "b"], shown, "L0 H0", causal=True, value="rescaled",
                                    key_start=first, true=true).to_dict()
    assert spec["encoding"]["x"]["sort"] == ["1: a", "2: b"] and spec["encoding"]["y"]["sort"] == ["0: <s>", "1: a",
                                                                                                   "2: b"]
    cells = {(r["query_pos"], r["key_pos"]): (r["rescaled"], r["true_weight"]) for r in specs.rows(spec)}
    assert set(cells) == {(1, 1), (2, 1), (2, 2)}  # no first column, no future, no empty first row
    assert cells[(1, 1)][0] == pytest.approx(1.0, abs=F64, rel=0) and cells[(1, 1)][1] == 0.4
    assert cells[(2, 2)][0] == pytest.approx(0.75, abs=F64, rel=0) and cells[(2, 2)][1] == 0.375
    assert spec["encoding"]["color"]["field"] == "rescaled" and spec["encoding"]["color"]["scale"]["domain"] == [0, 1]
    tooltip = {t["field"]: t.get("title") for t in spec["encoding"]["tooltip"]}
    assert tooltip["true_weight"] == "true weight" and "rescaled" in tooltip


def test_qk_grid_is_diverging_around_zero_and_keeps_the_parts_order():
    """The grid's scale, order and title are read from its table (so its spec is one from click to click) and
    drawn as before: symmetric around 0, reaching the largest |term|, the parts in the order given."""
    frame = pd.DataFrame({"query_part": ["token embedding", "token embedding", "head 0.1", "head 0.1"],
                          "key_part": ["head 0.0", "biases", "head 0.0", "biases"],
                          "contribution": [3.0, -0.5, 0.25, -1.0]})
    spec = charts.qk_grid(frame, 1.75, "why").to_dict()
    drawn = _scene(spec)
    gradient = drawn["rect legend-gradient"][0]
    top = gradient["fill"]["stops"][-1]["color"]
    assert [cell["fill"] == top for cell in drawn["rect mark"]] == [True, False, False, False]  # +3 reaches the end
    legend = sorted(drawn["text legend-label"], key=lambda item: item["y"])  # top to bottom
    assert [item["text"] for item in legend] == ["2", "0", "−2"]  # ticks as far either way: the domain is [-3, 3]
    assert legend[1]["y"] * 2 == gradient["height"]  # and 0 (white) is the gradient's middle, as Vega draws it
    labels = [item["text"] for item in drawn["text axis-label"]]
    assert labels == ["head 0.0", "biases", "token embedding", "head 0.1"]  # the order the grid was given
    assert [item["text"] for item in drawn["text title-text"]] == [["why"]]
    long = "Head 1.2: “hungry” (12) → “gave” (3), score -0.732"  # wraps on a phone, as every long title does
    for width, lines in ((250, ["Head 1.2: “hungry” (12) →", "“gave” (3), score -0.732"]), (900, [long])):
        chart = charts.qk_grid(frame, 1.75, long).properties(width=width)
        assert [item["text"] for item in _scene(chart.to_dict())["text title-text"]] == [lines]
        assert chart.title == long and list(chart.table.columns) == list(charts.qk_grid(frame, 1.75).table.columns)
    data = spec["datasets"][spec["data"]["name"]]
    shares = sorted(row["share"] for row in data)
    assert shares == sorted(c / 1.75 for c in frame.contribution)  # each term's share of the score, in the tooltip
    small = charts.qk_grid(frame.assign(contribution=frame.contribution / 100), 1.75, "why").to_dict()
    assert {"−0.02", "0.00", "0.02"} <= {item["text"] for item in _scene(small)["text legend-label"]}  # ±0.03 here
    reordered = charts.qk_grid(frame.iloc[::-1], 1.75, "why (other order)")
    assert reordered.streamed()["layer"] == charts.qk_grid(frame, 1.75, "why").streamed()["layer"]  # one spec
    assert [item["text"] for item in _scene(reordered.to_dict())["text axis-label"]] == \
        ["biases", "head 0.0", "head 0.1", "token embedding"]


def test_a_click_that_changes_only_the_numbers_sends_the_same_spec_with_other_data():
    """The charts Explore redraws on every click are Vega-Lite dictionaries (core_charts.Spec) whose table goes under
    one name: a head change that keeps the key token changes the column's numbers, not its chart, so the browser swaps
    the data instead of building the chart again."""
    w = np.random.default_rng(4).random((2, 3, 3))
    one, other = (charts.key_bars(["a", "b", "c"], w[h][:, 1], key=1, query=2, clickable=True) for h in (0, 1))
    sent = [chart.streamed() for chart in (one, other)]
    assert {**sent[0], "datasets": None} == {**sent[1], "datasets": None}
    assert sent[0]["data"] == {"name": core_charts.DATA} and list(sent[0]["datasets"]) == [core_charts.DATA]
    assert list(sent[1]["datasets"][core_charts.DATA]["weight"]) == list(w[1][:, 1])  # its own numbers, exactly
