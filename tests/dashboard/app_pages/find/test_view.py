"""The Find heads page, driven headless by AppTest: one query token to one key word, over every layer
and head."""

from __future__ import annotations

import pytest
from apptest import open_app as _app, opening, rerun as _rerun, rows as _rows, specs as _specs, texts as _texts
from numeric import fp32


@pytest.mark.numeric
def test_find_heads_grids_one_query_to_one_key_word_over_every_head():
    at = _app(page="find")
    assert at.header[0].value == "Find heads: where one token looks, in every layer and head"
    assert at.selectbox(key="w_query").value == 10 and at.selectbox(key="find_key").value == 5  # she → Xiaohong
    assert at.selectbox(key="find_against").value == 0  # …against Xiaoming: heads ranked by the margin
    assert ("On this sentence alone (one sentence: a description, not evidence), head 1.2 gives “Xiaohong” the largest "
            "margin over “Xiaoming” for “she”: 0.36 against 0.01" in _texts(at.caption))
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
    assert "head 1.2 puts the most of “she”'s attention on “Xiaohong”: 0.36, against 0.13" in _texts(at.caption)
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
    trace = runner.trace(minilm, "Xiaoming gave the apple to Xiaohong because she was hungry.")
    assert np.array_equal(got, query_norms(trace, minilm, 10, [7, 8]))  # "xiao ##hong": the app's call, its numbers
    assert all("weight" in r for r in rows)
    assert at.query_params["find_measure"] in ("norm", ["norm"])  # in the link: opened elsewhere, the same grid
    assert _rows(_app(**{k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}),
                 "value-weighted norm") == rows
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
    against 小明; the head with the largest margin on the sentence (described, not crowned) prefers 小红 (the weight
    alone would name 9.2, which gives 小明 more); 小明's first
    piece is the first token (the sink), so its weight is said."""
    at = _app(model="smollm2", text="小明把苹果给了小红，因为她很饿", page="find")
    assert not at.error, _texts(at.error)
    words = at.selectbox(key="find_key").options
    assert "5: 小红" in words and "0: 小明" in words and "0: 小" not in words
    assert at.selectbox(key="find_key").value == 5 and at.selectbox(key="find_against").value == 0
    caption = _texts(at.caption)
    assert "head 1.3 gives “小红” the largest margin over “小明” for “她(2/2)”: 0.31 against 0.07" in caption
    assert "to the first token (“小(1/2)”, the attention sink)" in caption
    margins = _rows(at, " minus ")
    assert max(margins, key=lambda r: r["margin"])["margin"] > 0
    at.selectbox(key="find_key").set_value(0)  # 小明, whose first piece is the sink: left out unless counted
    at.selectbox(key="find_against").set_value(5)
    _rerun(at)
    assert "left out of “小明”'s weight" in _texts(at.caption)
    assert at.checkbox(key="find_sink").value is False
    at.checkbox(key="find_sink").check()  # counted: the link keeps it, and the question picked
    _rerun(at)
    link = {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert (link["count_sink"], link["ask_key"], link["ask_against"]) == ("1", "小明", "小红")
    shared = _app(**link)  # opened elsewhere: the same question, the sink counted
    assert shared.checkbox(key="find_sink").value is True
    assert (shared.selectbox(key="find_key").value, shared.selectbox(key="find_against").value) == (0, 5)
    assert "left out of “小明”'s weight" not in _texts(shared.caption)


def test_the_question_picked_is_judged_below_the_grid_and_shared_with_explore():
    """The grid's question (she → Xiaohong, not Xiaoming) judged on its controls, in the answer box; another key word
    asks another question, which the view (and Explore's box, and the link) then asks too."""
    at = _app(page="find")
    assert "Which head answers it, on sentences it was not chosen on?" in [h.value for h in at.subheader]
    layer, head = opening()
    assert f"Who is “she”? No head of minilm is shown to answer it. Head {layer}.{head}, the best on half of the 96 " \
           "controls," in _texts(at.warning)
    at.selectbox(key="find_against").set_value(-1)  # no other candidate: nothing to judge, and it says why
    _rerun(at)
    assert "A grid of one sentence names no head" in _texts(at.caption)
    at.selectbox(key="find_against").set_value(5)  # Xiaohong as the other candidate…
    at.selectbox(key="find_key").set_value(0)  # …of Xiaoming: another question
    _rerun(at)
    assert "Who is “she”?" in _texts(at.warning) + _texts(at.success)
    params = {k: at.query_params[k] for k in ("ask_query", "ask_key", "ask_against")}
    assert [v if isinstance(v, str) else v[0] for v in params.values()] == ["she", "Xiaoming", "Xiaohong"]


def test_your_own_questions_judge_a_planted_head_and_every_bad_line_is_named(pronoun_dir, gender_file, tmp_path):
    """On the planted model, the gender questions uploaded: head 0.1 (it follows gender) is chosen and supported,
    green; a file with bad lines lists each with its number and why."""
    from checkpoints import PRONOUN_TEXT

    at = _app(model=str(pronoun_dir), text=PRONOUN_TEXT, page="find", query=7)
    at.file_uploader(key="find_questions").set_value(("gender.jsonl", gender_file.read_bytes(), "application/json"))
    _rerun(at)
    said = _texts(at.success)
    assert "Who is “she”? Head 0.1 of " in said and "chosen on half of the 80 items, picks the answer on 40 held-out " \
           "items 100 % (95 % interval 91–100 %)" in said
    bad = gender_file.read_bytes() + b'{"text": "Mary met Tom.", "pronoun": "she", "candidates": ["Mary", "Tom"], ' \
                                     b'"answer": "Mary"}\nnot json\n'
    at.file_uploader(key="find_questions").set_value(("bad.jsonl", bad, "application/json"))
    _rerun(at)
    warned = _texts(at.warning)
    assert "2 line(s) of bad.jsonl cannot be used and are left out:" in warned
    assert "bad.jsonl:81: the pronoun 'she' is not a word of the text" in warned and "bad.jsonl:82: not JSON" in warned


def test_an_upload_of_questions_too_big_or_too_many_is_refused_before_it_is_read():
    at = _app(page="find")
    at.file_uploader(key="find_questions").set_value(("huge.jsonl", b"{}\n" * 700_001, "application/json"))
    _rerun(at)
    assert "huge.jsonl is 2.1 MB; a file of questions here takes up to 2 MB: keep fewer questions" in _texts(at.error)
    many = b'{"text": "a b", "pronoun": "a", "candidates": ["b", "c"], "answer": "b"}\n' * 2001
    at.file_uploader(key="find_questions").set_value(("many.jsonl", many, "application/json"))
    _rerun(at)
    assert "many.jsonl holds 2,001 questions; this app judges up to 2,000 at once" in _texts(at.error)
