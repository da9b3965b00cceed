"""The Find heads page, driven headless by AppTest: one query token to one key word, over every layer
and head."""

from __future__ import annotations

import pytest
from apptest import open_app as _app
from apptest import rerun as _rerun
from apptest import rows as _rows
from apptest import specs as _specs
from apptest import texts as _texts
from numeric import fp32


@pytest.mark.numeric
def test_find_heads_grids_one_query_to_one_key_word_over_every_head():
    at = _app(page="find")
    assert at.header[0].value == "Find heads: where one token looks, in every layer and head"
    assert at.selectbox(key="w_query").value == 10 and at.selectbox(key="find_key").value == 5  # she → Xiaohong
    assert at.selectbox(key="find_against").value == 0  # …against Xiaoming: heads ranked by the margin
    assert ("Head 1.2 gives “Xiaohong” the largest margin over “Xiaoming” for “she”: 0.36 against 0.01"
            in _texts(at.caption))
    assert "It gives 0.19 to the first token (“[CLS]”, the attention sink)." in _texts(at.caption)
    margins = _rows(at, " minus ")
    best = max(margins, key=lambda r: r["margin"])
    assert (best["layer"], best["head"]) == (1, 2) and all(
        abs(r["margin"] - (r["weight"] - r["against"])) <= fp32(2) for r in margins)  # fp32 weights ≤ 1
    at.selectbox(key="find_against").set_value(-1)  # the weight alone
    _rerun(at)
    grid = [s for s in _specs(at) if "click a cell" in str(s.get("title"))][0]
    assert "“she” → “Xiaohong”" in str(grid["title"]) and "baseline 0.133" in str(grid["title"])  # 2 of 15 keys
    rows = _rows(at, "score above or below its baseline 0.133")
    assert len(rows) == 72 and max(rows, key=lambda r: r["score"])[("layer")] == 1
    assert "Head 1.2 puts the most of “she”'s attention on “Xiaohong”: 0.36, against 0.13" in _texts(at.caption)
    assert [p["name"] for p in grid["params"]] == ["head"]  # a click opens the head on Explore
    at.selectbox(key="find_key").set_value(0)  # "Xiaoming"
    _rerun(at)
    assert "on “Xiaoming”" in _texts(at.caption)


@pytest.mark.numeric
def test_find_heads_coloured_by_value_weighted_norm_and_ablation_effect(minilm):
    """The grid's other colourings equal the library: query_norms on "she" → "Xiaohong", and the zero-ablation
    change of "she"'s last hidden state; the weight stays in the tooltip."""
    import numpy as np

    from probes import runner
    from probes.effects.ablation import ablate_each
    from probes.effects.norms import query_norms

    at = _app(page="find")
    at.radio(key="find_measure").set_value("norm")
    at.run()
    assert not at.exception and not at.error
    rows = _rows(at, "value-weighted norm")
    got = np.zeros((6, 12))
    for r in rows:
        got[r["layer"], r["head"]] = r["norm"]
    trace = runner.run(minilm, "Xiaoming gave the apple to Xiaohong because she was hungry.")
    assert np.array_equal(got, query_norms(trace, minilm, 10, [7, 8]))  # "xiao ##hong": the app's call, its numbers
    assert all("weight" in r for r in rows)
    at.radio(key="find_measure").set_value("ablation")
    at.run()
    assert not at.exception and not at.error
    rows = _rows(at, "is zeroed")
    frame = ablate_each(minilm, "Xiaoming gave the apple to Xiaohong because she was hungry.", position=10)
    best = frame.loc[frame["token_change"].idxmax()]
    top = max(rows, key=lambda r: r["token_change"])
    assert (top["layer"], top["head"]) == (best["layer"], best["head"])
    assert top["token_change"] == best["token_change"]


def test_find_heads_on_the_chinese_sentence_keys_words_ranks_by_margin_and_names_the_sink():
    """On smollm2 with 小明把苹果给了小红，因为她很饿: the key word is 小红 (one word: jieba), never the first token,
    against 小明; the head crowned prefers 小红 (the weight alone crowned 9.2, which gives 小明 more); 小明's first
    piece is the first token (the sink), so its weight is said."""
    at = _app(model="smollm2", text="小明把苹果给了小红，因为她很饿", page="find")
    assert not at.error, _texts(at.error)
    words = at.selectbox(key="find_key").options
    assert "5: 小红" in words and "0: 小明" in words and "0: 小" not in words
    assert at.selectbox(key="find_key").value == 5 and at.selectbox(key="find_against").value == 0
    caption = _texts(at.caption)
    assert "Head 1.3 gives “小红” the largest margin over “小明” for “她(2/2)”: 0.31 against 0.07" in caption
    assert "to the first token (“小(1/2)”, the attention sink)" in caption
    margins = _rows(at, " minus ")
    assert max(margins, key=lambda r: r["margin"])["margin"] > 0
    at.selectbox(key="find_key").set_value(0)  # 小明, whose first piece is the sink: left out unless counted
    at.selectbox(key="find_against").set_value(5)
    _rerun(at)
    assert "left out of “小明”'s weight" in _texts(at.caption)
    assert at.checkbox(key="find_sink").value is False
