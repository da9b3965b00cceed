"""Chart functions as altair specs: what a reader of the chart would see (order, values, blanks,
marks), validated against the Vega-Lite schema by ``to_dict``."""

import numpy as np
import pandas as pd
import pytest
from numeric import F64

from dashboard import charts


def _rows(spec: dict) -> list[dict]:
    return [r for rows in spec["datasets"].values() for r in rows]


def _lines(part) -> list[str]:
    """A title's or subtitle's lines, at the widest (a title that wraps to the chart's width is an expression)."""
    from dashboard.charts import title_lines

    return title_lines(part)


def _said(spec: dict) -> str:
    """A chart's title as a reader reads it: its lines, then its subtitle's."""
    title = spec.get("title")
    if isinstance(title, str) or title is None:
        return title or ""
    return " ".join(_lines(title.get("text")) + _lines(title.get("subtitle")))


def test_heatmap_spec_carries_exact_weights_and_order():
    tokens = ["[CLS]", "she", "she", "[SEP]"]
    w = np.eye(4) * 0.75 + 0.0625
    chart = charts.attention_heatmap(tokens, w, "L0 H0")
    spec = chart.to_dict()
    assert chart.title == "L0 H0" and spec["mark"]["type"] == "rect"
    assert spec["encoding"]["x"]["sort"] == ["0: [CLS]", "1: she", "2: she", "3: [SEP]"]
    rows = _rows(spec)
    assert len(rows) == 16
    assert {r["weight"] for r in rows if r["query_pos"] == r["key_pos"]} == {0.8125}
    assert spec["encoding"]["color"]["scale"]["domain"] == [0, 1]
    assert "stroke" not in spec["encoding"]  # no query row outlined unless asked


def test_heatmap_outlines_the_query_row_and_windows_keep_positions():
    w = np.full((3, 3), 1 / 3)
    spec = charts.attention_heatmap(["c", "d", "e"], w, "window", start=10, query=11).to_dict()
    stroke = spec["encoding"]["stroke"]
    assert stroke["condition"] == {"test": "datum.marked", "value": "#e6550d"} and stroke["value"] is None
    assert {r["query_pos"] for r in _rows(spec) if r["marked"]} == {11}  # the outlined row: in the table
    assert {r["query_pos"] for r in _rows(spec)} == {10, 11, 12}
    other = charts.attention_heatmap(["c", "d", "e"], w, "window", start=10, query=12).to_dict()
    assert {**other, "datasets": None} == {**spec, "datasets": None}  # another query: the same spec, other rows
    assert spec["encoding"]["y"]["sort"] == ["10: c", "11: d", "12: e"]


def test_causal_future_is_left_blank():
    frame = charts.attention_frame(["a", "b", "c"], np.tril(np.ones((3, 3))) / 3, causal=True)
    assert len(frame) == 6 and (frame["key_pos"] <= frame["query_pos"]).all()


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="expected"):
        charts.attention_frame(["a", "b"], np.ones((3, 3)))
    with pytest.raises(ValueError, match="3 weights for 2 tokens"):
        charts.query_bars(["a", "b"], np.ones(3), 0)


def test_query_bars_show_one_row_in_text_order_and_hide_the_future():
    bars = charts.query_bars(["a", "b", "c"], np.array([0.25, 0.75, 0.0]), query=1, causal=True)
    spec = bars.to_dict()
    assert bars.title == "Where '1: b' looks"
    assert [(r["key"], r["weight"]) for r in _rows(spec)] == [("0: a", 0.25), ("1: b", 0.75)]
    assert spec["encoding"]["x"]["sort"] == ["0: a", "1: b", "2: c"]


@pytest.mark.numeric
def test_layer_multiples_draw_every_head_as_a_picture_of_its_weights():
    w = np.random.default_rng(0).random((4, 3, 3))
    spec = charts.layer_multiples(w, layer=2, causal=True).to_dict()
    rows = _rows(spec)
    assert [r["head"] for r in rows] == ["2.0", "2.1", "2.2", "2.3"]  # one picture a head, not n² cells
    assert spec["transform"][0]["window"][0]["op"] == "row_number"  # placed in head order
    shown = charts.image_weights(rows[3]["url"], cell=32)  # 96 // 3 pixels a token
    assert np.abs(shown - np.tril(w[3])).max() <= 1 / 240  # the heatmap's colours, to one step of 8 bits
    assert shown[0, 2] == 0.0  # the causal future is white
    assert rows[3]["peak"] == w[3].max()  # the weight itself, not a rounding of it


def test_parity_heatmap_outlines_heads_over_tolerance():
    diffs = np.array([[0.0, 2e-6], [3e-5, 1e-7]])
    spec = charts.parity_heatmap(diffs, 1e-5).to_dict()
    rows = _rows(spec)
    assert [r["within"] for r in rows] == [True, True, False, True]
    assert spec["layer"][1]["transform"] == [{"filter": "!datum.within"}]
    assert spec["layer"][0]["encoding"]["color"]["scale"]["type"] == "log"


def test_parity_heatmap_has_one_fixed_scale_and_says_bit_identical_in_words():
    spec = charts.parity_heatmap(np.zeros((2, 3)), 1e-5).to_dict()
    color = spec["layer"][0]["encoding"]["color"]
    assert color["scale"]["domain"] == [1e-9, 1e-3]  # never fitted to the data: zeros do not look like a signal
    assert 1e-5 in color["legend"]["values"] and "tolerance 1e-05" in color["legend"]["title"]
    assert "tolerance 1.5e-05" in _said(charts.parity_heatmap(np.zeros((1, 1)), 1.5e-5).to_dict())  # not 2e-05
    assert {r["difference"] for r in _rows(spec)} == {"0 (identical)"}
    assert all(r["shown"] == 1e-9 for r in _rows(spec))
    big = _rows(charts.parity_heatmap(np.array([[3e-2, 2e-6]]), 1e-5).to_dict())
    assert [r["difference"] for r in big] == ["3.0e-02", "2.0e-06"] and big[0]["shown"] == 1e-3
    assert color["scale"]["scheme"] == "orangered" and not color["scale"].get("reverse")  # zeros are pale


@pytest.mark.numeric
def test_head_grid_colours_the_gain_over_the_baseline_centred_at_zero():
    frame = pd.DataFrame({"label": ["induction"] * 4, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                          "score": [0.0093, 0.0100, 0.0089, 0.0095], "baseline": [0.0093] * 4, "n": [10] * 4})
    spec = charts.head_grid(frame, "induction", 2, 2).to_dict()
    color = spec["layer"][0]["encoding"]["color"]
    assert color["field"] == "gain" and color["scale"]["domainMid"] == 0
    low, high = color["scale"]["domain"]
    # symmetric: noise around the baseline stays pale (gains: float64 differences of 4-decimal figures)
    assert low == -high and high == pytest.approx(0.0007, abs=F64, rel=0)
    gains = {(r["layer"], r["head"]): r["gain"] for r in _rows(spec)}
    assert gains[(0, 0)] == 0.0 and gains[(1, 0)] == pytest.approx(-0.0004, abs=F64, rel=0)
    assert "baseline 0.0093" in _said(spec)
    assert {t["field"] for t in spec["layer"][0]["encoding"]["tooltip"]} >= {"score", "baseline", "gain", "n"}
    no_base = charts.head_grid(frame.drop(columns="baseline"), "induction", 2, 2).to_dict()
    assert no_base["layer"][0]["encoding"]["color"]["field"] == "score" and "no baseline" in _said(no_base)
    other = charts.head_grid(frame.assign(mean_attention=0.5), "induction", 2, 2, value="mean_attention").to_dict()
    assert other["layer"][0]["encoding"]["color"]["field"] == "mean_attention"  # the baseline is the score's


def test_the_default_label_is_the_one_whose_best_head_gains_most():
    frame = pd.DataFrame({"label": ["acl", "acl", "nsubj", "nsubj", "block"], "score": [0.9, 0.2, 0.8, 0.7, 0.0],
                          "baseline": [0.85, 0.85, 0.3, 0.3, 0.0]})
    assert charts.best_label(frame) == "nsubj"  # 0.5 above its baseline, against acl's 0.05
    assert charts.best_label(frame.drop(columns="baseline")) == "acl"  # no baselines: the best raw score
    corpus = pd.DataFrame({"label": ["distance", "distance", "previous", "first"], "score": [26.6, 12.0, 0.99, 0.8],
                           "baseline": [19.1, 19.1, 0.02, 0.02]})
    assert charts.best_label(corpus) == "previous"  # not distance's 7.5 tokens: shares are compared with shares


def test_the_default_label_has_enough_examples_behind_it():
    """A gain over one example is chance: the grid opens on the best-gaining label with n ≥ ``least`` (syntactic on
    minilm opened on parataxis, 1 example, over nsubj's 38), on the best of all only when none has that many."""
    frame = pd.DataFrame({"label": ["parataxis", "parataxis", "nsubj", "nsubj", "det"],
                          "score": [0.9, 0.1, 0.6, 0.5, 0.4],
                          "baseline": [0.2, 0.2, 0.3, 0.3, 0.3], "n": [1, 1, 38, 38, 31]})
    assert charts.best_label(frame) == "parataxis"  # 0.7 above its baseline, over one example
    assert charts.best_label(frame, least=30) == "nsubj"  # 0.3 above, over 38
    assert charts.best_label(frame.assign(n=12), least=30) == "parataxis"  # none has 30: the best of all
    assert charts.best_label(frame.drop(columns="n"), least=30) == "parataxis"  # a table without counts


def test_head_grid_is_clickable_and_marks_the_selected_head():
    frame = pd.DataFrame({"label": ["nsubj", "nsubj", "obj"], "layer": [0, 1, 0], "head": [1, 0, 0],
                          "score": [0.5, 0.9, 0.2], "baseline": [0.3] * 3, "n": [10] * 3})
    spec = charts.head_grid(frame, "nsubj", n_layers=2, n_heads=2, selected=(1, 0)).to_dict()
    assert spec["params"][0]["name"] == "head" and spec["params"][0]["select"]["fields"] == ["layer", "head"]
    scores = {(r["layer"], r["head"]): r["score"] for r in spec["datasets"][spec["layer"][0]["data"]["name"]]}
    assert scores == {(0, 1): 0.5, (1, 0): 0.9}
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"] == [0, 1]
    with pytest.raises(ValueError, match="no rows for label 'amod'"):
        charts.head_grid(frame, "amod", 2, 2)


def test_cost_chart_draws_the_quadratic_curve():
    frame = pd.DataFrame({"tokens": [16, 32, 64], "path": "HF", "bytes": [256.0, 1024.0, 4096.0]})
    spec = charts.cost_chart(frame, "bytes", "memory", quadratic=1.0).to_dict()
    curve = [r for r in _rows(spec) if r["path"] == "c·L² (quadratic)"]
    assert curve[0]["tokens"] == 16 and curve[-1]["tokens"] == 64
    assert all(r["bytes"] == r["tokens"] ** 2 for r in curve)
    assert spec["encoding"]["x"]["scale"]["type"] == "log"


def test_generation_band_blanks_what_a_step_could_not_see_and_outlines_the_step():
    band = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])  # step 0 saw 2 tokens, step 1 saw 3
    spec = charts.generation_band(["was", " the"], ["she", " was", " the"], band, step=1).to_dict()
    rows = _rows(spec)
    assert len(rows) == 5  # the 6th cell (step 0 over " the") is the future of that step: left blank
    assert {(r["step"], r["key_pos"]): r["weight"] for r in rows}[(1, 2)] == 0.5
    assert spec["encoding"]["stroke"]["condition"]["test"] == "(datum.step === 1)"
    windowed = charts.generation_band(["a", "b"], ["x", "y"], np.array([[1.0, 0.0], [0.4, 0.6]]), 0, start=7)
    assert {r["key"] for r in _rows(windowed.to_dict())} == {"7: x", "8: y"}
    with pytest.raises(ValueError, match="2×3 weights for 1 steps"):
        charts.generation_band(["a"], ["x", "y", "z"], band, 0)


def test_cache_growth_draws_both_caches_and_marks_the_step():
    frame = pd.DataFrame({"step": [0, 1, 0, 1], "tokens cached": [5, 6, 5, 6], "bytes": [10, 12, 30, 36],
                          "cache": ["3 kv heads", "3 kv heads", "9 kv heads", "9 kv heads"]})
    spec = charts.cache_growth(frame, 1).to_dict()
    lines, rule = spec["layer"]
    assert lines["encoding"]["color"]["scale"]["domain"] == ["3 kv heads", "9 kv heads"]
    marked = spec["datasets"][rule["data"]["name"]]
    assert marked == [{"step": 1, "tokens cached": 6, "bytes": 12, "cache": "3 kv heads", "KiB": 12 / 1024,
                       "size": "12 bytes"}]  # drawn in KiB, the size in words in the tooltip
    assert lines["encoding"]["y"]["title"] == "KiB (fp32)"


def test_heatmap_of_norms_says_norm_and_runs_from_zero_to_its_largest():
    w = np.array([[0.5, 2.0], [1.0, 3.0]])
    spec = charts.attention_heatmap(["a", "b"], w, "norms", value="norm", top=3.0).to_dict()
    colour = spec["encoding"]["color"]
    assert colour["field"] == "norm" and colour["title"] == "value-weighted norm"
    assert colour["scale"]["domain"] == [0, 3.0] and colour["scale"]["range"] == charts.NORM_RANGE
    assert sorted(r["norm"] for r in _rows(spec)) == [0.5, 1.0, 2.0, 3.0] and "weight" not in _rows(spec)[0]
    assert spec["encoding"]["tooltip"][2]["field"] == "norm"
    # named otherwise but without a top: the weights' fixed 0..1 scale
    assert charts.attention_heatmap(["a", "b"], w / 4, value="rollout").to_dict()["encoding"]["color"]["scale"][
        "domain"] == [0, 1]


def _effects(values) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    layers, heads = values.shape
    return pd.DataFrame([dict(layer=layer, head=head, effect=values[layer, head], loss=values[layer, head])
                         for layer in range(layers) for head in range(heads)])


def test_effect_grid_starts_at_zero_for_changes_and_is_diverging_for_signed_measures():
    spec = charts.effect_grid(_effects([[0.1, 0.4], [0.2, 0.0]]), "effect", 2, 2, "changes").to_dict()
    rect = spec["layer"][0]
    assert rect["encoding"]["color"]["scale"]["domain"] == [0, 0.4]
    assert rect["encoding"]["color"]["scale"]["range"] == charts.EFFECT_RANGE
    assert [p["name"] for p in spec["params"]] == ["head"] and spec["title"] == "changes"
    signed = charts.effect_grid(_effects([[0.1, -0.4], [0.2, 0.0]]), "effect", 2, 2, "t").to_dict()
    scale = signed["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domain"] == [-0.4, 0.4] and scale["domainMid"] == 0
    # a loss is diverging even when every value happens to be ≥ 0; an all-zero grid still has a scale
    assert "domainMid" in charts.effect_grid(_effects([[0.1]]), "loss", 1, 1, "t").to_dict()["layer"][0][
        "encoding"]["color"]["scale"]
    assert charts.effect_grid(_effects([[0.0]]), "effect", 1, 1, "t").to_dict()["layer"][0]["encoding"]["color"][
        "scale"]["domain"][1] > 0


def test_effect_grid_marks_the_selected_head_and_refuses_a_missing_column():
    spec = charts.effect_grid(_effects([[0.1, 0.4]]), "effect", 1, 2, "t", selected=(0, 1), extra=("loss",)).to_dict()
    assert len(spec["layer"]) == 2
    assert [t["field"] for t in spec["layer"][0]["encoding"]["tooltip"]] == ["layer", "head", "effect", "loss"]
    with pytest.raises(ValueError, match="no share column"):
        charts.effect_grid(_effects([[0.1]]), "share", 1, 1, "t")


def test_a_clickable_heatmap_selects_a_cell_and_draws_on_a_canvas():
    spec = charts.attention_heatmap(["a", "b"], np.full((2, 2), 0.5), "L0 H0", query=1, clickable=True).to_dict()
    assert spec["params"] == [{"name": "cell", "select": {"type": "point", "clear": False,
                                                          "fields": ["query_pos", "key_pos"], "on": "click"}}]
    assert spec["mark"]["cursor"] == "pointer" and spec["usermeta"]["embedOptions"]["renderer"] == "canvas"
    assert "params" not in charts.attention_heatmap(["a"], np.ones((1, 1))).to_dict()


@pytest.mark.numeric
def test_key_bars_are_the_heatmaps_column_and_hide_queries_before_the_key():
    w = np.tril(np.random.default_rng(2).random((4, 4)))
    w /= w.sum(1, keepdims=True)
    bars = charts.key_bars(["a", "b", "c", "d"], w[:, 1], key=1, causal=True, query=3, clickable=True)
    spec = bars.to_dict()
    assert bars.title == "Who attends to '1: b'"
    assert [(r["query_pos"], r["weight"]) for r in _rows(spec)] == [(q, w[q, 1]) for q in (1, 2, 3)]  # exact
    assert spec["encoding"]["color"]["condition"] == {"test": "datum.marked", "value": "#e6550d"}
    assert [r["query_pos"] for r in _rows(spec) if r["marked"]] == [3]
    assert [p["name"] for p in spec["params"]] == ["query"]
    with pytest.raises(ValueError, match="3 weights for 2 tokens"):
        charts.key_bars(["a", "b"], np.ones(3), 0)


def test_query_bars_of_a_window_keep_positions_and_the_querys_name():
    bars = charts.query_bars(["x", "y"], np.array([0.4, 0.6]), query=30, start=10, name="30: she", key=11,
                             clickable=True)
    spec = bars.to_dict()
    assert bars.title == "Where '30: she' looks"
    assert [(r["key_pos"], r["key"]) for r in _rows(spec)] == [(10, "10: x"), (11, "11: y")]
    assert spec["encoding"]["color"]["condition"]["test"] == "datum.marked"
    assert [r["key_pos"] for r in _rows(spec) if r["marked"]] == [11]
    assert [p["name"] for p in spec["params"]] == ["key"]


def test_layer_multiples_outline_the_selected_head_and_answer_clicks():
    w = np.full((3, 4, 4), 0.25)
    spec = charts.layer_multiples(w, layer=5, start=20, selected=1).to_dict()
    assert [p["name"] for p in spec["params"]] == ["head", "columns"]  # the selection, and the columns that fit
    assert spec["params"][0]["select"] == {"type": "point", "fields": ["head"], "on": "click", "clear": False}
    image, _, _, outline = spec["layer"]
    assert image["mark"]["type"] == "image" and spec["params"][0]["views"] == [image["name"]]  # a click on a picture
    assert outline["transform"] == [{"filter": "datum.marked"}] and outline["mark"]["stroke"] == "#e6550d"
    assert [r["head"] for r in _rows(spec) if r["marked"]] == ["5.1"]
    assert {r["tokens"] for r in _rows(spec)} == {"20–23"}
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
    spec = charts.attention_heatmap(["<s>", "a", "b"], shown, "L0 H0", causal=True, value="rescaled",
                                    key_start=first, true=true).to_dict()
    assert spec["encoding"]["x"]["sort"] == ["1: a", "2: b"] and spec["encoding"]["y"]["sort"] == ["0: <s>", "1: a",
                                                                                                   "2: b"]
    cells = {(r["query_pos"], r["key_pos"]): (r["rescaled"], r["true_weight"]) for r in _rows(spec)}
    assert set(cells) == {(1, 1), (2, 1), (2, 2)}  # no first column, no future, no empty first row
    assert cells[(1, 1)][0] == pytest.approx(1.0, abs=F64, rel=0) and cells[(1, 1)][1] == 0.4
    assert cells[(2, 2)][0] == pytest.approx(0.75, abs=F64, rel=0) and cells[(2, 2)][1] == 0.375
    assert spec["encoding"]["color"]["field"] == "rescaled" and spec["encoding"]["color"]["scale"]["domain"] == [0, 1]
    tooltip = {t["field"]: t.get("title") for t in spec["encoding"]["tooltip"]}
    assert tooltip["true_weight"] == "true weight" and "rescaled" in tooltip


def test_the_sink_share_grid_reads_on_a_fixed_share_scale_and_is_never_the_default_label():
    frame = pd.DataFrame({"label": ["sink", "sink", "previous", "previous"], "layer": [0, 1, 0, 1], "head": [0] * 4,
                          "score": [0.95, 0.4, 0.5, 0.3], "baseline": [0.1, 0.1, 0.1, 0.1], "n": [40] * 4})
    spec = charts.head_grid(frame, "sink", 2, 1, share=True).to_dict()
    color = spec["layer"][0]["encoding"]["color"]
    assert color["field"] == "score" and color["scale"]["domain"] == [0, 1]  # a share, not a gain over a baseline
    assert "share of attention from 0 to 1; uniform attention gives 0.1" in _said(spec)
    assert {t["field"] for t in spec["layer"][0]["encoding"]["tooltip"]} >= {"score", "baseline"}
    assert charts.best_label(frame) == "sink" and charts.best_label(frame, skip={"sink"}) == "previous"
    assert charts.best_label(frame[frame.label == "sink"], skip={"sink"}) == "sink"  # nothing else to show


def _lens_frame(row: str, names: list[str], value: str) -> pd.DataFrame:
    """A tiny logit lens: ``names`` rows × 2 positions × top 2, the top token's value 0.75 (or 3.0 for logits)."""
    out = []
    for name in names:
        for position, token in enumerate(["Hello", " world"]):
            for rank, (piece, v) in enumerate([(" there", 0.75), ("!", 0.125)], start=1):
                out.append({row: name, "position": position, "input": token, "rank": rank, "piece": piece,
                            value: v if value == "probability" else 4 * v})
    return pd.DataFrame(out)


def test_lens_grid_shows_each_cells_top_token_on_the_fixed_probability_scale():
    stages = ["embeddings", "after layer 0"]
    spec = charts.lens_grid(_lens_frame("stage", stages, "probability"), "stage", stages, title="lens").to_dict()
    assert spec["title"] == "lens"
    rect, text = spec["layer"]
    assert rect["mark"]["type"] == "rect" and text["mark"]["type"] == "text"
    assert rect["encoding"]["color"]["scale"]["domain"] == [0, 1] and rect["encoding"]["y"]["sort"] == stages
    assert rect["encoding"]["x"]["sort"] == ["0: Hello", "1:  world"]
    rows = _rows(spec)
    assert len(rows) == 4 and {r["shown"] for r in rows} == {"␣there"}  # one cell a (row, position): the top token
    assert {r["top1"] for r in rows} == {"␣there  0.750"} and {r["top2"] for r in rows} == {"!  0.125"}
    assert [t.get("title") for t in rect["encoding"]["tooltip"]][-2:] == ["top 1", "top 2"]


def test_lens_grid_colours_direct_logits_from_zero_and_refuses_a_missing_column():
    frame = _lens_frame("head", ["1.0", "1.1"], "logit")
    spec = charts.lens_grid(frame, "head", ["1.0", "1.1"], value="logit", reach=6.0).to_dict()
    scale = spec["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domain"] == [0, 6.0] and scale["clamp"] is True  # a head's logit below 0 stays white
    assert {r["top1"] for r in _rows(spec)} == {"␣there  +3.000"}
    assert charts.lens_grid(frame, "head", ["1.0", "1.1"], value="logit").to_dict()["layer"][0]["encoding"]["color"][
        "scale"]["domain"] == [0, 3.0]  # default: the largest top logit shown
    with pytest.raises(ValueError, match="no piece column"):
        charts.lens_grid(frame.drop(columns=["piece"]), "head", ["1.0"], value="logit")
    assert charts.visible(" ") == "␣" and charts.visible(" a ") == "␣a␣" and charts.visible("a b") == "a b"
    assert charts.visible("\xa0") == "␣"  # a no-break space shows too


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


# -- layout: charts take the page's width, titles are never cut, deep models' grids fit one screen -----------------
def _grid_frame(layers: int, heads: int) -> pd.DataFrame:
    l, h = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    return pd.DataFrame({"label": "prev", "layer": l.ravel(), "head": h.ravel(), "score": np.linspace(0, 1, l.size),
                         "baseline": 0.2, "n": 10})


def test_charts_take_the_page_width_and_a_heatmap_of_many_tokens_shrinks_its_cells():
    """Every chart the app draws in the page's column is as wide as that column ("container"), so a 64-token heatmap
    never overflows it and a short one does not leave most of the page empty (it asks for at most ~40 px a column)."""
    tokens = [f"t{i}" for i in range(64)]
    w = np.full((64, 64), 1 / 64)
    heat = charts.attention_heatmap(tokens, w, "Layer 0, head 0").to_dict()
    short = charts.attention_heatmap(tokens[:12], np.full((12, 12), 1 / 12), "Layer 0, head 0").to_dict()
    bars = charts.query_bars(tokens[:12], np.full(12, 1 / 12), 3).to_dict()
    grid = charts.head_grid(_grid_frame(6, 12), "prev", 6, 12).to_dict()
    effect = charts.effect_grid(_grid_frame(6, 12), "score", 6, 12, "loss").to_dict()
    parity = charts.parity_heatmap(np.zeros((6, 12)), 1e-5).to_dict()
    cost = charts.cost_chart(pd.DataFrame({"tokens": [16, 32], "path": "HF", "bytes": [1.0, 4.0]}), "bytes", "m")
    for spec in (heat, short, bars, grid, effect, parity, cost.to_dict()):
        assert spec["width"] == "container"
    assert short["usermeta"][charts.MAX_WIDTH] == 12 * 40 + 240 < heat["usermeta"][charts.MAX_WIDTH]
    assert short["height"]["step"] == 32 > heat["height"]["step"]  # rows of a short text are taller, not flat bands


def _shown(part, width: float) -> list[str]:
    """The lines of a title (or subtitle) that wraps to the chart's width, as a chart ``width`` px wide shows them."""
    import json
    import re

    expr = part.get("expr") if isinstance(part, dict) else None
    if expr is None:
        return _lines(part)
    for limit, lines in re.findall(r"width < (\d+) \? (\[.*?\]) : ", expr):
        if width < int(limit):
            return json.loads(lines)
    return _lines(part)


def test_long_titles_are_a_short_title_and_a_subtitle_never_one_long_line():
    long = charts.head_grid(_grid_frame(6, 12), "prev", 6, 12).to_dict()["title"]
    assert _lines(long["text"]) == ["prev: score above or below its baseline 0.2"]
    assert _lines(long["subtitle"]) == ["click a cell to open it"]
    sink = charts.head_grid(_grid_frame(6, 12).assign(label="attention sink (first token)"), "attention sink (first token)",
                            6, 12, share=True).to_dict()["title"]
    assert sink["text"] == "attention sink (first token)"  # what follows ": " is the subtitle's first line
    assert _lines(sink["subtitle"])[0].startswith("share of attention from 0 to 1")
    words = " ".join(["word"] * 40)
    wrapped = charts.effect_grid(_grid_frame(2, 2), "score", 2, 2, words).to_dict()["title"]
    assert " ".join(_lines(wrapped["text"])) == words and all(len(line) <= charts.WRAPS[-1] for line in _lines(
        wrapped["text"]))
    for spec in (long, sink, wrapped):
        assert all(len(line) <= charts.SUBTITLE_MAX for line in _lines(spec.get("subtitle")))
    assert charts.attention_heatmap(["a", "b"], np.eye(2), "Layer 1, head 2").title == "Layer 1, head 2"


@pytest.mark.parametrize("width", [200, 250, 300, 400, 600, 740, 1200])
def test_titles_wrap_to_the_charts_width_not_to_a_fixed_count_of_characters(width):
    """The DLA grid's title is one line above a 900 px chart (it wrapped at 372 px), and on a phone its lines are as
    long as the chart is wide, every word kept (none cut with "…")."""
    title = "each head's direct share of logit(␣Xiaohong) − logit(␣Xiaoming) at token 10 (click: Explore)"
    spec = charts.effect_grid(_grid_frame(6, 12), "score", 6, 12, title).to_dict()["title"]
    lines = _shown(spec["text"], width)
    assert " ".join(lines) == title[:title.rindex(" (")]  # every word, in order
    assert all(len(line) * charts.TITLE_PX <= max(width, charts.WRAPS[0] * charts.TITLE_PX) for line in lines), lines
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
            return charts.head_grid(frame, "prev", layers, heads, selected=(20, 3)).to_dict()
        if grid == "effect":
            return charts.effect_grid(frame, "score", layers, heads, "loss", selected=(20, 3)).to_dict()
        return charts.parity_heatmap(np.zeros((layers, heads)), 1e-5).to_dict()

    deep, wide = draw(30, 9), draw(6, 12)
    x, y = deep["layer"][0]["encoding"]["x"], deep["layer"][0]["encoding"]["y"]
    assert (x["field"], y["field"]) == ("layer", "head") and deep["height"] <= 500
    assert (wide["layer"][0]["encoding"]["x"]["field"], wide["layer"][0]["encoding"]["y"]["field"]) == ("head", "layer")
    if grid != "parity":
        assert x["scale"]["domain"] == list(range(30)) and y["scale"]["domain"] == list(range(9))
        assert deep["params"][0]["select"]["fields"] == ["layer", "head"]  # a click opens the same head
        outline = deep["layer"][1]["encoding"]
        assert (outline["x"]["field"], outline["y"]["field"]) == ("layer", "head")  # the outline on its own cell


def test_the_circuit_graph_ends_at_the_receivers_layer_and_names_it_clear_of_the_senders():
    """SmolLM2's head 15.7 reads only layers 0–14: the graph's columns end at layer 15 (not the model's 30, which
    left half the width empty), and the receiver's name is to the right of its node, the senders' above theirs."""
    edges = pd.DataFrame({"sender_layer": [14, 14, 3], "sender_head": [7, 6, 7], "kind": ["k", "q", "v"],
                          "value": [0.3, -0.2, 0.1], "label": ["a", "b", "c"]})
    spec = charts.circuit_graph(edges, (15, 7), 30, 9, "Head 15.7").to_dict()
    xs = [layer["encoding"]["x"] for layer in spec["layer"]]
    assert all(x["scale"]["domain"] == [-0.5, 15.5] and x["axis"]["values"] == list(range(16)) for x in xs)
    texts = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    receiver = next(t["mark"] for t in texts if spec["datasets"][t["data"]["name"]] == [
        {"layer": 15, "head": 7, "name": "15.7", "role": "receiver"}])
    assert receiver.get("dx", 0) > 0 and receiver.get("align") == "left" and "dy" not in receiver
    senders = [t["mark"] for t in texts if t["mark"] is not receiver]
    assert len(senders) == 1 and senders[0]["dy"] < 0


def test_a_token_is_shown_with_its_spaces_and_its_bytes_readable():
    """A piece of a character (readable_tokens' \\xNN escapes) reads ‹99 82›, spaces ␣, the rest as it is."""
    assert charts.visible("\\x99\\x82") == "‹99 82›"
    assert charts.visible(" \\xe5\\xa5") == "␣‹e5 a5›"
    assert charts.visible("她\\xe5 ") == "她‹e5›␣"
    assert charts.visible(" she") == "␣she" and charts.visible("  ") == "␣␣" and charts.visible("x86") == "x86"


def test_the_lens_colour_bar_is_no_longer_than_the_table_is_tall():
    """A layer of 9 heads is a 180 px table: its colour bar ends inside it (a 200 px bar ran off its foot)."""
    frame = pd.DataFrame({"head": [f"15.{h}" for h in range(9)], "position": 0, "input": "她", "rank": 1,
                          "piece": "\\x99\\x82", "logit": np.linspace(0.1, 1.2, 9)})
    spec = charts.lens_grid(frame, "head", [f"15.{h}" for h in range(9)], value="logit").to_dict()
    legend = spec["layer"][0]["encoding"]["color"]["legend"]
    assert legend["gradientLength"] <= 9 * 20 - 20
    cells = spec["datasets"][spec["data"]["name"]] if "data" in spec else next(iter(spec["datasets"].values()))
    assert {c["shown"] for c in cells} == {"‹99 82›"}


def test_a_click_that_changes_only_the_numbers_sends_the_same_spec_with_other_data():
    """The charts Explore redraws on every click are Vega-Lite dictionaries (charts.Spec) whose table goes under one
    name: a head change that keeps the key token changes the column's numbers, not its chart, so the browser swaps
    the data instead of building the chart again."""
    w = np.random.default_rng(4).random((2, 3, 3))
    one, other = (charts.key_bars(["a", "b", "c"], w[h][:, 1], key=1, query=2, clickable=True) for h in (0, 1))
    sent = [chart.streamed() for chart in (one, other)]
    assert {**sent[0], "datasets": None} == {**sent[1], "datasets": None}
    assert sent[0]["data"] == {"name": charts.DATA} and list(sent[0]["datasets"]) == [charts.DATA]
    assert list(sent[1]["datasets"][charts.DATA]["weight"]) == list(w[1][:, 1])  # its own numbers, exactly


def test_a_spec_written_as_a_dictionary_is_checked_against_vega_lites_schema():
    import altair as alt
    import jsonschema

    frame = pd.DataFrame({"a": ["x"], "b": [np.nan]})
    spec = charts.Spec({"mark": "bar", "encoding": {"x": {"field": "a", "type": "nominal"}}}, frame)
    assert spec.to_dict()["datasets"][charts.DATA] == [{"a": "x", "b": None}]  # a missing value is null, as Altair's
    with pytest.raises(jsonschema.ValidationError, match="'ordinalish' is not one of"):
        charts.Spec({"mark": "bar", "encoding": {"x": {"field": "a", "type": "ordinalish"}}}, frame).to_dict()
    assert spec.properties(width=alt.Step(20)).to_dict()["width"] == {"step": 20}
