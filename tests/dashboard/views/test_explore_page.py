"""The Explore page, driven headless by AppTest: the selected head's heatmap (the model's own weights,
word level, windowed for long inputs, a decoder's future left blank), the query picker, the bertviz views,
and other models and sources. (To be merged with test_explore.py.)"""

from __future__ import annotations

import json
import re

import pytest
from apptest import open_app as _app
from apptest import rerun as _rerun
from apptest import rows as _rows
from apptest import specs as _specs
from apptest import texts as _texts
from apptest import titles as _titles


def test_changing_the_head_and_query_changes_the_view_and_the_link():
    at = _app()
    at.sidebar.slider(key="w_head").set_value(7)
    _rerun(at)
    assert at.header[0].value == "minilm: layer 1, head 7"
    assert "Layer 1, head 7" in _titles(at)
    assert "Who is “she”? Head 1.2 (query token 10) puts 0.36" in _texts(at.caption)  # still pointed at
    assert at.sidebar.slider(key="w_head").max == 11 and at.sidebar.slider(key="w_layer").max == 5
    at.selectbox(key="w_query").set_value(12)
    _rerun(at)
    assert "Where '12: hungry' looks" in _titles(at)
    assert {k: at.query_params[k] for k in ("head", "query")} in ({"head": "7", "query": "12"},
                                                                     {"head": ["7"], "query": ["12"]})


@pytest.mark.numeric
def test_the_heatmap_weights_are_the_models():
    import numpy as np

    import probes

    at = _app(layer=2, head=5)
    rows = [r for r in _rows(at, '"Layer 2, head 5"') if "weight" in r]
    model = probes.load("minilm")
    ref = probes.run(model, at.sidebar.text_area[0].value).attention(2, 5).numpy()
    got = np.zeros_like(ref)
    for r in rows:
        got[r["query_pos"], r["key_pos"]] = r["weight"]
    assert np.array_equal(got, ref)  # the model's fp32 weights, exactly (the chart ships them as float32)


def test_word_level_toggle_merges_pieces():
    at = _app(text="Xiaohong was hungry")
    tokens_axis = [s for s in _specs(at) if s.get("title") == "Layer 0, head 0"][0]
    assert any("##" in t for t in json.dumps(tokens_axis).split('"'))  # xiaohong is split into pieces
    at.toggle(key="w_words").set_value(True)
    _rerun(at)
    spec = [s for s in _specs(at) if s.get("title") == "Layer 0, head 0 (words)"][0]
    assert spec["encoding"]["x"]["sort"] == ["0: Xiaohong (1)", "1: was (3)", "2: hungry (4)"]  # (the picker's token)


def test_bertviz_views_are_embedded_and_capped():
    at = _app(layer=3, head=7)
    at.toggle(key="bertviz").set_value(True)
    _rerun(at)
    frames = at.get("iframe")
    assert len(frames) == 2
    html = frames[0].proto.srcdoc
    assert not re.search(r'src="https?:', html) and '"gave"' in html and "d3js.org v5" in html
    shown = json.loads(re.search(r"const params = (.*);\n", html)[1])
    assert (shown["layer"], shown["heads"]) == (3, [7])  # the head view opens on the sidebar's layer and head
    assert "fitToWidth" in frames[1].proto.srcdoc and "fitToWidth" not in html  # the model view fits its frame
    at = _app(text="word " * 80)
    at.toggle(key="bertviz").set_value(True)
    _rerun(at)
    assert not at.get("iframe") and "64 tokens" in _texts(at.info)


def test_emoji_cjk_and_control_characters_render():
    at = _app(text="她很饿 🙂 tab\there\x07bell")
    assert not at.error
    spec = [s for s in _specs(at) if s.get("title") == "Layer 0, head 0"][0]
    labels = spec["encoding"]["x"]["sort"]
    assert any("[UNK:🙂]" in x for x in labels) and any("饿" in x for x in labels)
    assert not any("\x07" in x or "\t" in x for x in labels)


def test_a_gpt2_checkpoint_leaves_the_future_blank_and_leaves_out_a_second_sentence(gpt2_dir):
    at = _app(model=str(gpt2_dir), text="the cat sat on the mat")
    assert at.header[0].value.endswith("layer 0, head 0")
    rows = [r for r in _rows(at, '"Layer 0, head 0"') if "weight" in r]
    n = max(r["query_pos"] for r in rows) + 1
    assert len(rows) == n * (n + 1) // 2 and all(r["key_pos"] <= r["query_pos"] for r in rows)
    assert "Parity PASS" in _texts(at.sidebar.markdown)
    at.sidebar.text_input(key="w_pair").set_value("a second sentence")
    _rerun(at)
    assert not at.error and "reads one text, not sentence pairs: the second sentence is left out" in _texts(
        at.sidebar.info)  # a decoder reads the first text alone, with a note
    assert len([r for r in _rows(at, '"Layer 0, head 0"') if "weight" in r]) == len(rows)


def test_scratch_flash_on_a_cpu_machine_says_which_kernel_ran(monkeypatch):
    from probes.scratch import flash

    monkeypatch.setattr(flash, "interpreting", lambda: False)  # as on a CPU-only machine without the interpreter
    at = _app(source="scratch", backend="flash")
    assert "sdpa:flash_attention_cpu attention" in at.caption[0].value
    assert any("flash needs CUDA" in i.value for i in at.info)
    assert "Parity PASS" in _texts(at.sidebar.markdown)


def test_a_long_input_is_windowed_never_drawn_whole():
    at = _app(text="the cat sat on the mat " * 20, query=100)  # 122 tokens
    window = at.slider(key="window")
    assert window.max == 122 - 64 and window.value == 58  # the query's row is inside, near the middle if it can be
    rows = [r for r in _rows(at, '"Layer 0, head 0"') if "weight" in r]
    assert len(rows) == 64 * 64 and min(r["query_pos"] for r in rows) == 58
    window.set_value(0)
    _rerun(at)
    rows = [r for r in _rows(at, '"Layer 0, head 0"') if "weight" in r]
    assert len(rows) == 64 * 64 and max(r["key_pos"] for r in rows) == 63
    multiples = [r for r in _rows(at, '"facet"') if "head" in r]
    assert len(multiples) == 12 and {r["tokens"] for r in multiples} == {"0–63"}  # one 64×64 picture a head


def test_explore_on_smollm2_from_scratch_says_its_heads_share_keys():
    at = _app(model="smollm2", source="scratch", backend="sdpa", layer=18, head=6)
    assert at.header[0].value == "smollm2: layer 18, head 6"
    assert "30 layers × 9 heads reading 3 key/value heads · source: our from-scratch pass" in at.caption[0].value
    rows = [r for r in _rows(at, '"Layer 18, head 6"') if "weight" in r]
    assert rows and all(r["key_pos"] <= r["query_pos"] for r in rows)  # a decoder: no future drawn


def test_the_chinese_story_opens_on_a_head_that_prefers_the_referent_and_names_the_sink():
    """smollm2 on 小明把苹果给了小红，因为她很饿: the callout's head gives 小红 more than 小明 (the weight alone crowned 9.2,
    0.30 on 小红 against 0.41 on 小明), asks with 她's last piece (the one that has read the whole character) and
    says what went to the first token."""
    at = _app(model="smollm2", text="小明把苹果给了小红，因为她很饿")
    said = _texts(at.success)
    assert ("Who is “她”? This head, 1.3, puts 0.31 of “她”'s attention on “小红” (0.07 on “小明”): of every layer "
            "and head of smollm2, the largest margin for “小红” over “小明”." in said)
    assert "It gives 0.01 to the first token (“小(1/2)”)" in said and "attention sink" in said
    assert at.header[0].value == "smollm2: layer 1, head 3" and at.selectbox(key="w_query").value == 22


def test_a_question_no_head_answers_is_said_in_those_words(gpt2_dir, monkeypatch):
    """In a decoder "cat" cannot see "mat" (after it): no head prefers "mat" over "sat", and the callout says so and
    names the closest head, instead of crowning one."""
    from dashboard import state

    text = "the cat sat on the mat by the door"  # a text of its own: the app caches a text's answer per process
    monkeypatch.setitem(state.STORIES, text, ("cat", "mat", "sat"))
    at = _app(model=str(gpt2_dir), text=text)
    said = _texts(at.warning)
    assert f"Who is “cat”? No head of {gpt2_dir} prefers “mat” over “sat” for “cat”; the closest is" in said
    assert "puts 0.00 of “cat”'s attention on “mat”" in said and not _texts(at.success)


def test_a_query_token_past_the_text_is_said_not_silently_moved():
    at = _app(query=999999)
    assert "Query token 999,999 does not exist in this text (tokens 0–14): showing 14, the last." in _texts(at.caption)
    assert at.selectbox(key="w_query").value == 14
