"""The Explore page, driven headless by AppTest: the selected head's heatmap (the model's own weights,
word level, windowed for long inputs, a decoder's future left blank), the query picker, the bertviz views,
and other models and sources. (To be merged with test_explore.py.)"""

from __future__ import annotations

import json
import re

import pytest
from apptest import (
    open_app as _app,
    opening,
    rerun as _rerun,
    rows as _rows,
    sidebar_text,
    specs as _specs,
    texts as _texts,
    titles as _titles,
)

from dashboard.core.state import CHINESE_TEXT, DEFAULT_TEXT, STORIES


def test_changing_the_head_and_query_changes_the_view_and_the_link():
    at = _app(page="explore")
    layer, head = opening()
    at.sidebar.slider(key="w_head").set_value(7)
    _rerun(at)
    assert at.header[0].value == f"minilm: layer {layer}, head 7"
    assert f"Layer {layer}, head 7" in _titles(at)
    assert f"Head {layer}.{head}, the best on half of the 96 controls" in _texts(at.warning)  # still the chosen one
    assert f"The sidebar's head, {layer}.7, judged on every item (it was not chosen on them)," in _texts(at.caption)
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
    ref = probes.run(model, sidebar_text(at)).attention(2, 5).numpy()
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
    found = re.search(r"const params = (.*);\n", html)
    assert found, "the head view's page has no params"
    shown = json.loads(found[1])
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
    multiples = [r for r in _rows(at, '"multiples"') if "head" in r]
    assert len(multiples) == 12 and {r["tokens"] for r in multiples} == {"0–63"}  # one 64×64 picture a head


def test_explore_on_smollm2_from_scratch_says_its_heads_share_keys():
    at = _app(model="smollm2", source="scratch", backend="sdpa", layer=18, head=6)
    assert at.header[0].value == "smollm2: layer 18, head 6"
    assert "30 layers × 9 heads reading 3 key/value heads · source: our from-scratch pass" in at.caption[0].value
    rows = [r for r in _rows(at, '"Layer 18, head 6"') if "weight" in r]
    assert rows and all(r["key_pos"] <= r["query_pos"] for r in rows)  # a decoder: no future drawn


@pytest.mark.parametrize("model, text", [("minilm", DEFAULT_TEXT), ("smollm2", DEFAULT_TEXT),
                                         ("smollm2", CHINESE_TEXT)])
def test_the_answer_box_is_green_only_when_the_evidence_says_supported(model, text):
    """The story sentences: the box's colour follows the verdict the library gives the head chosen on half of the
    controls (English on both models: not supported, not green; smollm2's Chinese: supported, green), names that
    head and its held-out figures, and the app opens on it, at the query word."""
    import probes
    from probes.evidence.claims import question_evidence
    from probes.evidence.record import percent, span

    ev = question_evidence(probes.load(model), text, *STORIES[text])
    at = _app(model=model, text=text)
    assert ev.head is not None and ev.split is not None  # the story's question: a head chosen on half the controls
    layer, head = ev.head
    assert at.header[0].value == f"{model}: layer {layer}, head {head}"
    figures = f"{percent(ev.score)} (95 % interval {span(ev.low, ev.high)})"
    query = STORIES[text][0]
    if ev.supported:
        said = _texts(at.success)
        assert f"Who is “{query}”? Head {layer}.{head} of {model}, chosen on half of the {ev.split.n} controls," in said
        assert figures in said and not _texts(at.warning)
    else:
        said = _texts(at.warning)
        assert f"Who is “{query}”? No head of {model} is shown to answer it. Head {layer}.{head}, the best on half" \
               in said
        assert figures in said and not _texts(at.success)
    assert (model, text, ev.supported) != ("minilm", DEFAULT_TEXT, True)  # the crown of one sentence is gone
    if text == CHINESE_TEXT:
        assert at.selectbox(key="w_query").value == 22  # 她's last piece: the one that has read the whole character


def test_a_question_no_control_can_judge_says_so_and_names_no_head(gpt2_dir, monkeypatch):
    """"cat" is no pronoun the controls know, and in a decoder "cat" cannot see "mat" (after it): no item is left to
    judge a head on, and the box says so instead of naming one."""
    from dashboard.core import state

    text = "the cat sat on the mat by the door"  # a text of its own: the app caches a text's answer per process
    monkeypatch.setitem(state.STORIES, text, ("cat", "mat", "sat"))
    at = _app(model=str(gpt2_dir), text=text)
    said = _texts(at.info)
    assert "Who is “cat”? Too few controls to judge a head: 0 held out, and a verdict needs 30." in said
    assert "not a pronoun the built-in controls know" in said and not _texts(at.success)


def test_a_query_token_past_the_text_is_said_not_silently_moved():
    at = _app(query=999999)
    assert "Query token 999,999 does not exist in this text (tokens 0–14): showing 14, the last." in _texts(at.caption)
    assert at.selectbox(key="w_query").value == 14


def test_a_planted_head_that_follows_the_nearer_name_is_said_to_in_the_box(pronoun_dir):
    """The planted model's head 0.0 gives "Xiaohong" most of "she"'s attention on the story sentence (the nearer
    name), and on the controls follows the nearer candidate: opened on it, the box says so, not in green."""
    from checkpoints import PRONOUN_TEXT

    at = _app(model=str(pronoun_dir), text=PRONOUN_TEXT, layer=0, head=0, query=7)
    said = _texts(at.caption)
    assert "The sidebar's head, 0.0, judged on every item (it was not chosen on them), follows the nearer candidate: " \
           "on 96 controls it picks the answer" in said
    assert not any("0.0" in s for s in _texts(at.success).splitlines())
    chosen = next(b for b in at.button if b.label.startswith("Open head "))
    layer, head = (int(x) for x in chosen.label.removeprefix("Open head ").split("."))
    chosen.click()  # back to the head the box's verdict is about
    _rerun(at)
    assert at.header[0].value.endswith(f"layer {layer}, head {head}") and (layer, head) != (0, 0)
