"""The Q/K/V page, driven headless by AppTest: each step of softmax(q·Kᵀ/√d_k)·V from a link, reproducing
the model's own row, on an encoder, a decoder (the future masked), a rotary grouped-query model (smollm2)
and a sliding-window layer; and its charts (dashboard/app_pages/qkv/charts.py): labels at a legible size, never
cut, long tokens shortened with "…"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from apptest import (
    open_app as _app,
    rerun as _rerun,
    rows as _rows,
    specs as _specs,
    steps_table as _steps_table,
    texts as _texts,
    titles as _titles,
)
from numeric import F64, fp32

import probes
from dashboard.app_pages.qkv import charts as qkv_charts
from dashboard.core.charts import SUBTITLE_MAX
from probes import explain


def _same_steps(at, model, table, **run) -> None:
    """The table is the library's steps of the page's head and query, on the page's text (the same call: the
    same numbers), and its float64 weights reproduce the model's fp32 row: each score sums d products in fp32
    (eps × d × Σ|q_t·k_t| × scale), and the softmax sums n exponentials (eps × n)."""
    v = at.session_state["view"]
    steps = explain.query_steps(probes.run(model, at.sidebar.text_area[0].value, **run), v.layer, v.head, v.query)
    assert np.array_equal(table["softmax weight"], steps.weights)
    assert np.array_equal(table["model's weight"], steps.trace_weights)
    magnitude = float((np.abs(steps.k) @ np.abs(steps.q)).max()) * abs(steps.scale)
    within = fp32(len(steps.q), magnitude) + fp32(len(steps.k))
    assert (table["softmax weight"] - table["model's weight"]).abs().max() <= within


@pytest.mark.numeric
def test_qkv_page_from_a_link_shows_each_step_and_reproduces_the_model(minilm):
    at = _app(page="qkv", layer=3, head=4, query=10)
    assert at.header[0].value == "Q/K/V step by step: layer 3, head 4"
    assert at.selectbox(key="w_query").value == 10
    steps = [s for s in _specs(at) if isinstance(s.get("title"), dict)
             and s["title"].get("text") in ("q·k", "q·k × scale", "softmax weight")]
    assert [s["title"]["text"] for s in steps] == ["q·k", "q·k × scale", "softmax weight"]  # one under the other…
    assert all(s["width"] == "container" for s in steps)  # …each as wide as the page
    numbers, table = (d.value for d in at.dataframe)
    assert table["softmax weight"].sum() == pytest.approx(1, abs=F64, rel=0)  # float64 weights
    _same_steps(at, minilm, table)
    assert "reproduce the model's own attention row for 10: she" in _texts(at.caption)
    # the numbers written out: q and the three most attended keys, first 6 of 32 numbers, then "…"
    top = table.sort_values("softmax weight", ascending=False)["key"].head(3).tolist()
    assert numbers["vector"].tolist() == ["q  10: she"] + [f"k  {k}" for k in top]
    assert list(numbers.columns) == ["vector", "[0]", "[1]", "[2]", "[3]", "[4]", "[5]", "…"]
    assert numbers["…"].iloc[0] == "(26 more)"
    # one key worked through: its products, sum, scale and softmax share equal the table's row
    worked = _texts(at.markdown)
    row = table[table["key"] == top[0]].iloc[0]
    assert f"Worked through: 10: she → {top[0]}" in worked
    assert f"= **{row['q·k']:.4f}**" in worked and f"= **{row['× scale']:.4f}**" in worked
    assert f"= **{row['softmax weight']:.4f}**" in worked and "+ … (28 more products)" in worked
    at.selectbox(key="qkv_key").set_value(int(table.index[table["key"] == "0: [CLS]"][0]))
    _rerun(at)
    assert "Worked through: 10: she → 0: [CLS]" in _texts(at.markdown)


@pytest.mark.numeric
def test_qkv_on_a_decoder_masks_the_future(gpt2_dir):
    at = _app(model=str(gpt2_dir), text="the cat sat on the mat", page="qkv", query=2)
    table = _steps_table(at)
    assert list(table["allowed"]) == [True] * 3 + [False] * (len(table) - 3)
    assert (table.loc[~table["allowed"], "softmax weight"] == 0).all()
    assert table["softmax weight"].sum() == pytest.approx(1, abs=F64, rel=0)
    assert "future tokens are masked out" in _texts(at.markdown)


@pytest.mark.numeric
@pytest.mark.parametrize("source", ["hf", "scratch"])
def test_qkv_on_smollm2_shows_the_rotation_and_the_shared_heads(source, smollm2):
    """The offline decoder (Llama architecture: rotary positions, 9 query heads reading 3 key/value heads),
    from either source: q before and after its turn, which key/value head it shares, and weights that
    reproduce the model's own row."""
    at = _app(model="smollm2", text="Xiaoming gave the apple to Xiaohong because she was hungry.", page="qkv",
              layer=12, head=4, query=11, source=source)
    assert at.sidebar.radio(key="w_source").options == ["Hugging Face", "From scratch"]
    assert "q before and after the rotary turn" in _titles(at)
    rows = _rows(at, "q before and after the rotary turn")
    assert {r["vector"] for r in rows} == {"q  11:  she, before", "q  11:  she, turned"} and len(rows) == 2 * 64
    text = _texts(at.markdown)
    assert "Rotary positions" in text and "head 4 reads key/value head 1, which heads 3, 5 read too" in text
    _same_steps(at, smollm2, _steps_table(at), source=source)
    assert "reproduce the model's own attention row" in _texts(at.caption)


@pytest.mark.numeric
def test_qkv_on_a_windowed_model_says_what_the_window_leaves_out(ckpt_dir):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from checkpoints import make_llama

    path = make_llama(ckpt_dir / "mistral-app", family="mistral", sliding_window=3)
    at = _app(model=str(path), text="the cat sat on the mat because it was warm", page="qkv", query=6,
              source="scratch", backend="sdpa")
    table = _steps_table(at)
    assert list(table["allowed"][:8]) == [False] * 4 + [True] * 3 + [False]
    assert "outside this layer's sliding window of 3" in _texts(at.markdown)
    _same_steps(at, probes.load(str(path)), table, source="scratch", backend="sdpa")


def test_qkv_on_an_encoders_local_layer_says_the_window_reaches_both_ways(modernbert_mlm_dir):
    """ModernBERT's layer 1 is local (keys up to 2 positions away on either side): the page masks both sides and
    says so, with no "future" (an encoder has none)."""
    at = _app(model=str(modernbert_mlm_dir), text="the cat sat on the mat because it was warm", page="qkv", layer=1,
              query=6, source="scratch", backend="sdpa")
    table = _steps_table(at)
    assert list(table["allowed"][:10]) == [False] * 4 + [True] * 5 + [False]
    said = _texts(at.markdown)
    assert "positions away on either side are outside this layer's sliding window of 3" in said
    assert "future" not in said
    _same_steps(at, probes.load(str(modernbert_mlm_dir)), table, source="scratch", backend="sdpa")


@pytest.mark.numeric
def test_qkv_on_a_partial_rotary_says_which_numbers_turn(ckpt_dir):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from checkpoints import make_llama

    path = make_llama(ckpt_dir / "phi3-app", family="phi3", partial_rotary_factor=0.5)  # 4 of a head's 8 numbers
    at = _app(model=str(path), text="the cat sat on the mat because it was warm", page="qkv", query=6,
              source="scratch")
    text = _texts(at.markdown)
    assert "The first 4 of the 8 numbers are read as 2 pairs (the other 4 are never turned: a partial rotary)" in text
    assert len(_rows(at, "q before and after the rotary turn")) == 2 * 8
    _same_steps(at, probes.load(str(path)), _steps_table(at), source="scratch")


# -- the charts' labels: legible, never cut, long tokens shortened --------------------------------------------
LONG = "She saw " + "🙂" * 30 + " today."  # minilm reads the emoji run as one unknown word: a 38-character token


def _readable(axis: dict) -> None:
    """An axis (or header) whose labels are at least 11 px and which Vega never cuts: its pixel limit holds the
    longest label the page sends, in wide (CJK) characters."""
    assert axis["labelFontSize"] >= 11
    assert axis["labelLimit"] >= qkv_charts.LABEL_CHARS * axis["labelFontSize"]


def test_a_long_token_is_shortened_with_an_ellipsis_and_labels_stay_distinct():
    assert qkv_charts.short("3: she") == "3: she"
    long = [f"{i}: " + "supercalifragilistic" * 2 for i in range(12)]
    shown = [qkv_charts.short(k) for k in long]
    assert all(len(s) == qkv_charts.LABEL_CHARS and s.endswith("…") for s in shown)
    assert len(set(shown)) == len(long)  # each still starts with its position


def test_vector_strips_have_legible_labels():
    rows = {"q  10: she": np.ones(32), f"k  3: {qkv_charts.short('x' * 40)}": -np.ones(32)}
    spec = qkv_charts.vectors_heatmap(rows, "q and k").to_dict()
    enc = spec["encoding"]
    _readable(enc["y"]["axis"])
    assert enc["y"]["sort"] == list(rows) and enc["y"]["axis"]["labelOverlap"] is False  # every row named
    assert enc["x"]["axis"]["titleFontSize"] >= 11
    assert enc["color"]["legend"]["labelFontSize"] >= 11 and enc["color"]["legend"]["titleFontSize"] >= 11
    assert spec["height"]["step"] >= enc["y"]["axis"]["labelFontSize"] + 4  # a strip is as tall as its label


def test_step_bars_have_legible_labels_and_keep_the_whole_token_in_the_tooltip():
    tokens = ["[CLS]", "she", "supercalifragilisticexpialidocious", "[SEP]"]
    values = np.array([0.1, 0.2, 0.3, 0.4])
    chart = qkv_charts.step_bar(tokens, "q·k", values, 1)
    spec = chart.to_dict()
    x = spec["layer"][0]["encoding"]["x"]
    _readable(x["axis"])
    _readable(spec["layer"][0]["encoding"]["y"]["axis"])
    assert spec["title"]["fontSize"] >= 11 and spec["title"]["text"] == "q·k"
    assert x["sort"] == x["scale"]["domain"] == ["0: [CLS]", "1: she", "2: supercalifragilist…", "3: [SEP]"]
    # as wide as the page, at most STEP_COLUMN px a key: turned labels never overlap
    assert spec["width"] == "container" and qkv_charts.STEP_COLUMN >= 2 * x["axis"]["labelFontSize"]
    assert chart.usermeta["maxWidth"] == qkv_charts.STEP_COLUMN * 4 + qkv_charts.STEP_AXIS
    data = spec["datasets"][(spec["layer"][0].get("data") or spec["data"])["name"]]
    assert "2: supercalifragilisticexpialidocious" in {r["key"] for r in data}  # hover shows it whole


def test_the_qkv_page_draws_its_charts_with_these_labels():
    at = _app(page="qkv", text=LONG, query=1)
    strips = [s for s in _specs(at) if "k vectors" in str(s.get("title"))][0]
    _readable(strips["encoding"]["y"]["axis"])
    names = {r["vector"] for r in _rows(at, "k vectors")}
    assert all(len(n) <= len("k  ") + qkv_charts.LABEL_CHARS for n in names)
    assert any(n.startswith("k  3: [UNK:🙂") and n.endswith("…") for n in names), names
    steps = [s for s in _specs(at) if isinstance(s.get("title"), dict) and s["title"].get("text") == "q·k"][0]
    _readable(steps["layer"][0]["encoding"]["x"]["axis"])
    assert any(k.startswith("3: [UNK:🙂") and k.endswith("…") for k in steps["layer"][0]["encoding"]["x"]["sort"])
    assert "3: [UNK:" + "🙂" * 30 + "]" in _steps_table(at)["key"].tolist()  # the table keeps it whole


def test_step_bars_name_masked_keys_say_how_many_and_highlight_the_query():
    """A masked key (NaN: a future token) has no bar, but it keeps its place on the axis, marked ×, and the subtitle
    says how many of the keys are masked: none is dropped without a word."""
    steps = {"q·k": np.array([1.0, 2.0, np.nan]), "softmax weight": np.array([0.27, 0.73, np.nan])}
    charts = qkv_charts.step_bars(["a", "b", "c"], steps, query=1)
    assert [c.to_dict()["title"]["text"] for c in charts] == ["q·k", "softmax weight"]
    spec = charts[1].to_dict()
    bars, masked = charts[1].layer
    assert isinstance(bars.data, pd.DataFrame) and isinstance(masked.data, pd.DataFrame)  # each layer's own rows
    assert set(bars.data["key"]) == {"0: a", "1: b"} and list(masked.data["key"]) == ["2: c"]
    assert spec["layer"][1]["mark"]["text"] == "×" and list(masked.data["value"]) == [0.0]
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"] == ["0: a", "1: b", "2: c"]  # every key named
    subtitle = spec["title"]["subtitle"]  # in lines a phone's chart holds, every word kept (Vega would cut one)
    assert subtitle[0].startswith("1 of the 3 keys masked (×)") and " ".join(subtitle).endswith("and weight 0")
    assert all(len(line) <= SUBTITLE_MAX for line in subtitle)
    assert spec["layer"][0]["encoding"]["color"]["condition"]["test"] == "(datum.key_pos === 1)"
    unmasked = qkv_charts.step_bar(["a", "b"], "q·k", np.array([1.0, 2.0]), 0).to_dict()
    assert "subtitle" not in unmasked["title"] and len(unmasked["layer"]) == 1


def test_vector_strips_are_coloured_symmetrically_around_zero():
    spec = qkv_charts.vectors_heatmap({"q": np.array([1.0, -3.0]), "k": np.array([0.5, 2.0])}, "vectors").to_dict()
    assert spec["encoding"]["color"]["scale"]["domain"] == [-3.0, 3.0]
    assert spec["encoding"]["y"]["sort"] == ["q", "k"]
