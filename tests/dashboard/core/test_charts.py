"""The chart primitives every page draws with (dashboard/core/: charts, token_charts, grid_charts,
lens_charts) as Vega-Lite specs: what a reader of the chart would see (order, values, blanks, marks), validated
against the Vega-Lite schema by ``to_dict``."""

import numpy as np
import pandas as pd
import pytest
import specs
from numeric import F64

from dashboard.core import charts, grid_charts, lens_charts, token_charts
from dashboard.core.lens_charts import visible


def _effects(values) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    layers, heads = values.shape
    return pd.DataFrame([dict(layer=layer, head=head, effect=values[layer, head], loss=values[layer, head])
                         for layer in range(layers) for head in range(heads)])


def _lens_frame(row: str, names: list[str], value: str) -> pd.DataFrame:
    """A tiny logit lens: ``names`` rows × 2 positions × top 2, the top token's value 0.75 (or 3.0 for logits)."""
    out = []
    for name in names:
        for position, token in enumerate(["Hello", " world"]):
            for rank, (piece, v) in enumerate([(" there", 0.75), ("!", 0.125)], start=1):
                out.append({row: name, "position": position, "input": token, "rank": rank, "piece": piece,
                            value: v if value == "probability" else 4 * v})
    return pd.DataFrame(out)


def test_heatmap_spec_carries_exact_weights_and_order():
    tokens = ["[CLS]", "she", "she", "[SEP]"]
    w = np.eye(4) * 0.75 + 0.0625
    chart = token_charts.attention_heatmap(tokens, w, "L0 H0")
    spec = chart.to_dict()
    assert chart.title == "L0 H0" and spec["mark"]["type"] == "rect"
    assert spec["encoding"]["x"]["sort"] == ["0: [CLS]", "1: she", "2: she", "3: [SEP]"]
    rows = specs.rows(spec)
    assert len(rows) == 16
    assert {r["weight"] for r in rows if r["query_pos"] == r["key_pos"]} == {0.8125}
    assert spec["encoding"]["color"]["scale"]["domain"] == [0, 1]
    assert "stroke" not in spec["encoding"]  # no query row outlined unless asked


def test_heatmap_outlines_the_query_row_and_windows_keep_positions():
    w = np.full((3, 3), 1 / 3)
    spec = token_charts.attention_heatmap(["c", "d", "e"], w, "window", start=10, query=11).to_dict()
    stroke = spec["encoding"]["stroke"]
    assert stroke["condition"] == {"test": "datum.marked", "value": "#e6550d"} and stroke["value"] is None
    assert {r["query_pos"] for r in specs.rows(spec) if r["marked"]} == {11}  # the outlined row: in the table
    assert {r["query_pos"] for r in specs.rows(spec)} == {10, 11, 12}
    other = token_charts.attention_heatmap(["c", "d", "e"], w, "window", start=10, query=12).to_dict()
    assert {**other, "datasets": None} == {**spec, "datasets": None}  # another query: the same spec, other rows
    assert spec["encoding"]["y"]["sort"] == ["10: c", "11: d", "12: e"]


def test_causal_future_is_left_blank():
    frame = token_charts.attention_frame(["a", "b", "c"], np.tril(np.ones((3, 3))) / 3, causal=True)
    assert len(frame) == 6 and (frame["key_pos"] <= frame["query_pos"]).all()


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="expected"):
        token_charts.attention_frame(["a", "b"], np.ones((3, 3)))
    with pytest.raises(ValueError, match="3 weights for 2 tokens"):
        token_charts.query_bars(["a", "b"], np.ones(3), 0)


def test_query_bars_show_one_row_in_text_order_and_hide_the_future():
    bars = token_charts.query_bars(["a", "b", "c"], np.array([0.25, 0.75, 0.0]), query=1, causal=True)
    spec = bars.to_dict()
    assert bars.title == "Where '1: b' looks"
    assert [(r["key"], r["weight"]) for r in specs.rows(spec)] == [("0: a", 0.25), ("1: b", 0.75)]
    assert spec["encoding"]["x"]["sort"] == ["0: a", "1: b", "2: c"]


@pytest.mark.numeric
def test_head_grid_colours_the_gain_over_the_baseline_centred_at_zero():
    frame = pd.DataFrame({"label": ["induction"] * 4, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                          "score": [0.0093, 0.0100, 0.0089, 0.0095], "baseline": [0.0093] * 4, "n": [10] * 4})
    spec = grid_charts.head_grid(frame, "induction", 2, 2).to_dict()
    color = spec["layer"][0]["encoding"]["color"]
    assert color["field"] == "gain" and color["scale"]["domainMid"] == 0
    low, high = color["scale"]["domain"]
    # symmetric: noise around the baseline stays pale (gains: float64 differences of 4-decimal figures)
    assert low == -high and high == pytest.approx(0.0007, abs=F64, rel=0)
    gains = {(r["layer"], r["head"]): r["gain"] for r in specs.rows(spec)}
    assert gains[(0, 0)] == 0.0 and gains[(1, 0)] == pytest.approx(-0.0004, abs=F64, rel=0)
    assert "baseline 0.0093" in specs.said(spec)
    assert {t["field"] for t in spec["layer"][0]["encoding"]["tooltip"]} >= {"score", "baseline", "gain", "n"}
    no_base = grid_charts.head_grid(frame.drop(columns="baseline"), "induction", 2, 2).to_dict()
    assert no_base["layer"][0]["encoding"]["color"]["field"] == "score" and "no baseline" in specs.said(no_base)
    other = grid_charts.head_grid(frame.assign(mean_attention=0.5), "induction", 2, 2, value="mean_attention").to_dict()
    assert other["layer"][0]["encoding"]["color"]["field"] == "mean_attention"  # the baseline is the score's


def test_head_grid_is_clickable_and_marks_the_selected_head():
    frame = pd.DataFrame({"label": ["nsubj", "nsubj", "obj"], "layer": [0, 1, 0], "head": [1, 0, 0],
                          "score": [0.5, 0.9, 0.2], "baseline": [0.3] * 3, "n": [10] * 3})
    spec = grid_charts.head_grid(frame, "nsubj", n_layers=2, n_heads=2, selected=(1, 0)).to_dict()
    assert spec["params"][0]["name"] == "head" and spec["params"][0]["select"]["fields"] == ["layer", "head"]
    scores = {(r["layer"], r["head"]): r["score"] for r in spec["datasets"][spec["layer"][0]["data"]["name"]]}
    assert scores == {(0, 1): 0.5, (1, 0): 0.9}
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"] == [0, 1]
    with pytest.raises(ValueError, match="no rows for label 'amod'"):
        grid_charts.head_grid(frame, "amod", 2, 2)


def test_heatmap_of_norms_says_norm_and_runs_from_zero_to_its_largest():
    w = np.array([[0.5, 2.0], [1.0, 3.0]])
    spec = token_charts.attention_heatmap(["a", "b"], w, "norms", value="norm", top=3.0).to_dict()
    colour = spec["encoding"]["color"]
    assert colour["field"] == "norm" and colour["title"] == "value-weighted norm"
    assert colour["scale"]["domain"] == [0, 3.0] and colour["scale"]["range"] == token_charts.NORM_RANGE
    assert sorted(r["norm"] for r in specs.rows(spec)) == [0.5, 1.0, 2.0, 3.0] and "weight" not in specs.rows(spec)[0]
    assert spec["encoding"]["tooltip"][2]["field"] == "norm"
    # named otherwise but without a top: the weights' fixed 0..1 scale
    assert token_charts.attention_heatmap(["a", "b"], w / 4, value="rollout").to_dict()["encoding"]["color"]["scale"][
        "domain"] == [0, 1]


def test_effect_grid_starts_at_zero_for_changes_and_is_diverging_for_signed_measures():
    spec = grid_charts.effect_grid(_effects([[0.1, 0.4], [0.2, 0.0]]), "effect", 2, 2, "changes").to_dict()
    rect = spec["layer"][0]
    assert rect["encoding"]["color"]["scale"]["domain"] == [0, 0.4]
    assert rect["encoding"]["color"]["scale"]["range"] == grid_charts.EFFECT_RANGE
    assert [p["name"] for p in spec["params"]] == ["head"] and spec["title"] == "changes"
    signed = grid_charts.effect_grid(_effects([[0.1, -0.4], [0.2, 0.0]]), "effect", 2, 2, "t").to_dict()
    scale = signed["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domain"] == [-0.4, 0.4] and scale["domainMid"] == 0
    # a loss is diverging even when every value happens to be ≥ 0; an all-zero grid still has a scale
    assert "domainMid" in grid_charts.effect_grid(_effects([[0.1]]), "loss", 1, 1, "t").to_dict()["layer"][0][
        "encoding"]["color"]["scale"]
    assert grid_charts.effect_grid(_effects([[0.0]]), "effect", 1, 1, "t").to_dict()["layer"][0]["encoding"]["color"][
        "scale"]["domain"][1] > 0


def test_effect_grid_marks_the_selected_head_and_refuses_a_missing_column():
    spec = grid_charts.effect_grid(_effects([[0.1, 0.4]]), "effect", 1, 2, "t", selected=(0, 1),
                                   extra=("loss",)).to_dict()
    assert len(spec["layer"]) == 2
    assert [t["field"] for t in spec["layer"][0]["encoding"]["tooltip"]] == ["layer", "head", "effect", "loss"]
    with pytest.raises(ValueError, match="no share column"):
        grid_charts.effect_grid(_effects([[0.1]]), "share", 1, 1, "t")


def test_a_clickable_heatmap_selects_a_cell_and_draws_on_a_canvas():
    spec = token_charts.attention_heatmap(["a", "b"], np.full((2, 2), 0.5), "L0 H0", query=1, clickable=True).to_dict()
    assert spec["params"] == [{"name": "cell", "select": {"type": "point", "clear": False,
                                                          "fields": ["query_pos", "key_pos"], "on": "click"}}]
    assert spec["mark"]["cursor"] == "pointer" and spec["usermeta"]["embedOptions"]["renderer"] == "canvas"
    assert "params" not in token_charts.attention_heatmap(["a"], np.ones((1, 1))).to_dict()


def test_query_bars_of_a_window_keep_positions_and_the_querys_name():
    bars = token_charts.query_bars(["x", "y"], np.array([0.4, 0.6]), query=30, start=10, name="30: she", key=11,
                             clickable=True)
    spec = bars.to_dict()
    assert bars.title == "Where '30: she' looks"
    assert [(r["key_pos"], r["key"]) for r in specs.rows(spec)] == [(10, "10: x"), (11, "11: y")]
    assert spec["encoding"]["color"]["condition"]["test"] == "datum.marked"
    assert [r["key_pos"] for r in specs.rows(spec) if r["marked"]] == [11]
    assert [p["name"] for p in spec["params"]] == ["key"]


def test_lens_grid_shows_each_cells_top_token_on_the_fixed_probability_scale():
    stages = ["embeddings", "after layer 0"]
    spec = lens_charts.lens_grid(_lens_frame("stage", stages, "probability"), "stage", stages, title="lens").to_dict()
    assert spec["title"] == "lens"
    rect, text = spec["layer"]
    assert rect["mark"]["type"] == "rect" and text["mark"]["type"] == "text"
    assert rect["encoding"]["color"]["scale"]["domain"] == [0, 1] and rect["encoding"]["y"]["sort"] == stages
    assert rect["encoding"]["x"]["sort"] == ["0: Hello", "1:  world"]
    rows = specs.rows(spec)
    assert len(rows) == 4 and {r["shown"] for r in rows} == {"␣there"}  # one cell a (row, position): the top token
    assert {r["top1"] for r in rows} == {"␣there  0.750"} and {r["top2"] for r in rows} == {"!  0.125"}
    assert [t.get("title") for t in rect["encoding"]["tooltip"]][-2:] == ["top 1", "top 2"]


def test_lens_grid_colours_direct_logits_from_zero_and_refuses_a_missing_column():
    frame = _lens_frame("head", ["1.0", "1.1"], "logit")
    spec = lens_charts.lens_grid(frame, "head", ["1.0", "1.1"], value="logit", reach=6.0).to_dict()
    scale = spec["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domain"] == [0, 6.0] and scale["clamp"] is True  # a head's logit below 0 stays white
    assert {r["top1"] for r in specs.rows(spec)} == {"␣there  +3.000"}
    default = lens_charts.lens_grid(frame, "head", ["1.0", "1.1"], value="logit").to_dict()
    assert default["layer"][0]["encoding"]["color"]["scale"]["domain"] == [0, 3.0]  # the largest top logit shown
    with pytest.raises(ValueError, match="no piece column"):
        lens_charts.lens_grid(frame.drop(columns=["piece"]), "head", ["1.0"], value="logit")
    assert visible(" ") == "␣" and visible(" a ") == "␣a␣" and visible("a b") == "a b"
    assert visible("\xa0") == "␣"  # a no-break space shows too


def test_a_token_is_shown_with_its_spaces_and_its_bytes_readable():
    """A piece of a character (readable_tokens' \\xNN escapes) reads ‹99 82›, spaces ␣, the rest as it is."""
    assert visible("\\x99\\x82") == "‹99 82›"
    assert visible(" \\xe5\\xa5") == "␣‹e5 a5›"
    assert visible("她\\xe5 ") == "她‹e5›␣"
    assert visible(" she") == "␣she" and visible("  ") == "␣␣" and visible("x86") == "x86"


def test_the_lens_colour_bar_is_no_longer_than_the_table_is_wide():
    """The colour bar lies under the table (as every chart's legend): a table of one position is at least 154 px
    wide, its bar no longer than the table (a 200 px bar would widen the chart past its table)."""
    frame = pd.DataFrame({"head": [f"15.{h}" for h in range(9)], "position": 0, "input": "她", "rank": 1,
                          "piece": "\\x99\\x82", "logit": np.linspace(0.1, 1.2, 9)})
    spec = lens_charts.lens_grid(frame, "head", [f"15.{h}" for h in range(9)], value="logit").to_dict()
    legend = spec["layer"][0]["encoding"]["color"]["legend"]
    assert legend["gradientLength"] <= spec["usermeta"][charts.MIN_WIDTH] - lens_charts.LENS_AXIS
    cells = spec["datasets"][spec["data"]["name"]] if "data" in spec else next(iter(spec["datasets"].values()))
    assert {c["shown"] for c in cells} == {"‹99 82›"}


def test_a_spec_written_as_a_dictionary_is_checked_against_vega_lites_schema():
    import altair as alt
    import jsonschema

    frame = pd.DataFrame({"a": ["x"], "b": [np.nan]})
    spec = charts.Spec({"mark": "bar", "encoding": {"x": {"field": "a", "type": "nominal"}}}, frame)
    assert spec.to_dict()["datasets"][charts.DATA] == [{"a": "x", "b": None}]  # a missing value is null, as Altair's
    with pytest.raises(jsonschema.ValidationError, match="'ordinalish' is not one of"):
        charts.Spec({"mark": "bar", "encoding": {"x": {"field": "a", "type": "ordinalish"}}}, frame).to_dict()
    assert spec.properties(width=alt.Step(20)).to_dict()["width"] == {"step": 20}
