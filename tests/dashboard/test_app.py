"""The app, driven headless by Streamlit's AppTest on the offline default: every page, the shareable
link, and every bad input the app must answer with advice instead of a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from apptest import APP, open_app as _app, texts as _texts


def _specs(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def _titles(at) -> list[str]:
    return [s.get("title") if isinstance(s.get("title"), str) else (s.get("title") or {}).get("text") for s in _specs(at)]


def _rows(at, title: str) -> list[dict]:
    """The data rows of the chart with this title (Streamlit ships chart data as Arrow, beside the spec)."""
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    charts = [c for c in at.get("vega_lite_chart") if title in c.proto.spec]
    assert charts, f"no chart titled {title!r}"
    main = charts[0].proto.datasets[0]  # the first layer's data (a highlight layer has its own)
    return convert_arrow_bytes_to_pandas_df(main.data.data).to_dict("records")


def at_options(at) -> list[str]:
    return list(at.sidebar.selectbox[0].options)


def _upload(at, name: str, csv: bytes) -> AppTest:
    """On the Heads page: switch to "Upload a table" and upload ``csv``."""
    at.segmented_control(key="heads_how").set_value("Upload a table")
    _rerun(at)
    at.file_uploader(key="probe_upload").set_value((name, csv, "text/csv"))
    return _rerun(at)


def _rerun(at) -> AppTest:
    at.run()
    assert not at.exception, at.exception
    return at


# -- the frame, Explore ----------------------------------------------------------------------------
def test_opens_on_the_offline_default_at_she_and_the_head_that_answers_who_she_is():
    at = _app()
    assert at.sidebar.selectbox[0].value == "minilm"
    # of every layer and head, 1.2 puts the most of "she"'s attention on "xiao ##hong" (0.36; 0.01 on Xiaoming)
    assert at.header[0].value == "minilm: layer 1, head 2"
    assert "Who is “she”? This head, 1.2, puts 0.36 of “she”'s attention on “Xiaohong” (0.01 on “Xiaoming”)" in \
        _texts(at.success)
    assert "Parity PASS" in _texts(at.sidebar.markdown)
    titles = _titles(at)
    assert "Layer 1, head 2" in titles and "Where '10: she' looks" in titles
    facet = [s for s in _specs(at) if "facet" in s][0]
    assert facet["facet"]["sort"][0] == "1.0" and len(facet["facet"]["sort"]) == 12
    assert at.query_params["model"] == ["minilm"] or at.query_params["model"] == "minilm"


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
    assert np.abs(got - ref).max() < 1e-6


def test_word_level_toggle_merges_pieces():
    at = _app(text="Xiaohong was hungry")
    tokens_axis = [s for s in _specs(at) if s.get("title") == "Layer 0, head 0"][0]
    assert any("##" in t for t in json.dumps(tokens_axis).split('"'))  # xiaohong is split into pieces
    at.toggle(key="w_words").set_value(True)
    _rerun(at)
    spec = [s for s in _specs(at) if s.get("title") == "Layer 0, head 0 (words)"][0]
    assert spec["encoding"]["x"]["sort"] == ["0: Xiaohong", "1: was", "2: hungry"]


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


# -- the other pages --------------------------------------------------------------------------------
def _steps_table(at):
    """The Q/K/V page's table of every key's steps (q·k, × scale, softmax weight…)."""
    return next(d.value for d in at.dataframe if "softmax weight" in d.value.columns)


def test_qkv_page_from_a_link_shows_each_step_and_reproduces_the_model():
    at = _app(page="qkv", layer=3, head=4, query=10)
    assert at.header[0].value == "Q/K/V step by step: layer 3, head 4"
    assert at.selectbox(key="w_query").value == 10
    steps = [s for s in _specs(at) if "facet" in s][0]
    assert steps["facet"]["row"]["sort"] == ["q·k", "q·k × scale", "softmax weight"]
    numbers, table = (d.value for d in at.dataframe)
    assert abs(table["softmax weight"].sum() - 1) < 1e-6
    assert (table["softmax weight"] - table["model's weight"]).abs().max() < 1e-6
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


def test_parity_page_shows_the_per_head_grid_and_a_pass():
    at = _app(page="parity")
    assert "PASS" in _texts(at.success)
    cells = [r for r in _rows(at, "per head") if "max_abs_diff" in r]
    assert len(cells) == 72 and all(r["within"] for r in cells)
    assert "python -m probes parity --model minilm" in at.code[0].value


def _run_probe(probe: str, items: int) -> AppTest:
    """On the Heads page: run a built-in probe over ``items`` items."""
    at = _app(page="heads")
    at.selectbox(key="w_probe").set_value(probe)
    at.number_input(key="w_items").set_value(items)
    at.button[0].click()
    return _rerun(at)


def test_heads_page_runs_a_probe_and_reads_an_uploaded_table():
    at = _run_probe("positional", 5)
    assert "previous" in at.selectbox(key="w_label").options
    table = at.dataframe[0].value
    assert len(table) == 72 and table["score"].is_monotonic_decreasing
    at = _upload(_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score\nsyntactic,nsubj,1,2,0.9\nsyntactic,nsubj,0,0,0.1\n")
    assert list(at.dataframe[0].value["score"]) == [0.9, 0.1]
    grid = [s for s in _specs(at) if "click a cell" in str(s.get("title"))][0]
    assert [p["name"] for p in grid["params"]] == ["head"] and grid["params"][0]["select"]["on"] == "click"
    at.file_uploader(key="probe_upload").set_value(("bad.csv", b"a,b\n1,2\n", "text/csv"))
    _rerun(at)
    assert "missing column(s) label, layer, head, score" in _texts(at.error)


def test_cost_page_draws_the_saved_benchmark_and_measures_live():
    at = _app(page="cost")
    specs = _specs(at)
    assert any("c·L² (quadratic)" in json.dumps(s, ensure_ascii=False) for s in specs)
    at.multiselect(key="cost_lengths").set_value([16, 32])
    at.button[0].click()
    _rerun(at)
    live = at.dataframe[0].value
    assert sorted(live["tokens"].unique()) == [16, 32] and (live["seconds"] > 0).all()


# -- bad input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("   ", "empty"),
    ("hungry " * 2858, "minilm reads at most 512: shorten it"),  # 20,006 characters, ~2,860 tokens > 512
])
def test_bad_text_gets_advice_and_the_app_recovers(text, message):
    at = _app()
    at.sidebar.text_area[0].set_value(text)
    _rerun(at)
    assert message in _texts(at.error)
    at.sidebar.text_area[0].set_value("She was hungry.")
    _rerun(at)
    assert not at.error and at.header[0].value == "minilm: layer 1, head 2"


def test_a_too_long_text_is_told_what_to_do_in_the_apps_words():
    """The library's advice names its argument and the CLI's flag; the app names its own sidebar box."""
    at = _app(text="hungry " * 2858)
    message = _texts(at.error)
    assert "minilm reads at most 512" in message and 'tick "Cut to the context window" in the sidebar' in message
    assert "--truncate" not in message and "truncate=True" not in message


def test_too_long_text_can_be_cut_to_the_context_window():
    at = _app(text="hungry " * 2858, truncate=1)
    assert "the rest was cut off" in _texts(at.warning)
    assert "Layer 0, head 0" in _titles(at)


def test_emoji_cjk_and_control_characters_render():
    at = _app(text="她很饿 🙂 tab\there\x07bell")
    assert not at.error
    spec = [s for s in _specs(at) if s.get("title") == "Layer 0, head 0"][0]
    labels = spec["encoding"]["x"]["sort"]
    assert any("[UNK:🙂]" in x for x in labels) and any("饿" in x for x in labels)
    assert not any("\x07" in x or "\t" in x for x in labels)


def test_a_text_mostly_unknown_to_the_model_is_warned_and_a_reader_named(monkeypatch):
    at = _app(text="小明把苹果给了小红，因为她很饿")
    warned = _texts(at.warning)
    assert "11 of 17 tokens are unknown to minilm" in warned  # [CLS] + 15 characters + [SEP]; 她 is among them
    assert "smollm2 reads every character" in warned
    assert "unknown to" not in _texts(_app().warning)  # the English default reads fine
    assert "unknown to" not in _texts(_app(model="smollm2", text="小明把苹果给了小红，因为她很饿").warning)
    monkeypatch.setenv("PROBES_MODELS", "minilm")  # a deployment without smollm2 does not point at it
    assert "smollm2" not in _texts(_app(text="小明把苹果给了小红，因为她很饿").warning)


def test_hub_models_not_in_the_local_cache_are_marked_needs_download(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # a cache holding gpt2 only
    snapshot = tmp_path / "models--gpt2" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--gpt2" / "refs").mkdir()
    (tmp_path / "models--gpt2" / "refs" / "main").write_text("abc")
    options = _app().sidebar.selectbox(key="w_model_pick").options
    assert options[0] == "minilm" and "smollm2" in options  # built in: no mark
    assert "gpt2" in options  # cached: loads without the hub
    assert "bert-base-uncased · needs download" in options and "bert-base-uncased" not in options


def test_unknown_and_broken_models_get_advice(tmp_path):
    at = _app()
    at.sidebar.selectbox[0].set_value("other…")
    _rerun(at)
    at.sidebar.text_input(key="w_model_custom").set_value("nobody/no-such-model")
    _rerun(at)
    assert "nobody/no-such-model" in _texts(at.error)
    assert "pick the offline default, minilm, in the sidebar's Model menu" in _texts(at.error)
    assert "--model" not in _texts(at.error)  # the app's own words, not the CLI's
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    at.sidebar.text_input(key="w_model_custom").set_value(str(broken))
    _rerun(at)
    assert at.error and "Traceback" not in _texts(at.error)
    at.sidebar.selectbox[0].set_value("minilm")
    _rerun(at)
    assert not at.error and at.header[0].value == "minilm: layer 1, head 2"


def test_a_bad_link_is_explained_and_clamped():
    at = _app(layer=40, head="x")
    warnings = _texts(at.warning)
    assert "head='x' ignored" in warnings and "layer 40 does not exist here (0–5): showing 5" in warnings
    assert at.header[0].value == "minilm: layer 5, head 0"


def test_public_deployment_refuses_local_paths_and_caps_length(monkeypatch, tmp_path):
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    monkeypatch.delenv("PROBES_MODELS", raising=False)
    # only the built-in offline models: a link cannot make the server open a file or download a checkpoint
    assert at_options(_app()) == ["minilm", "smollm2"]
    for name in (str(tmp_path), "dashboard/app.py", "gpt2"):
        at = _app(model=name)
        assert f"model {name!r} is not offered here: showing minilm" in _texts(at.warning)
        assert at.header[0].value == "minilm: layer 1, head 2"
    at = _app(text="a" * 2500)
    assert "this deployment takes up to 2,000" in _texts(at.error)


def test_the_public_setting_can_come_from_streamlit_secrets(monkeypatch):
    monkeypatch.delenv("PROBES_PUBLIC", raising=False)
    at = AppTest.from_file(APP, default_timeout=180)
    at.secrets["PROBES_PUBLIC"] = "1"
    at.secrets["PROBES_MAX_CHARS"] = "30"
    at.query_params["text"] = "a sentence of more than thirty characters"
    at.run()
    assert not at.exception
    assert at_options(at) == ["minilm", "smollm2"]
    assert "this deployment takes up to 30" in _texts(at.error)


# -- other models, backends, long inputs ----------------------------------------------------------
def test_a_gpt2_checkpoint_leaves_the_future_blank_and_refuses_pairs(gpt2_dir):
    at = _app(model=str(gpt2_dir), text="the cat sat on the mat")
    assert at.header[0].value.endswith("layer 0, head 0")
    rows = [r for r in _rows(at, '"Layer 0, head 0"') if "weight" in r]
    n = max(r["query_pos"] for r in rows) + 1
    assert len(rows) == n * (n + 1) // 2 and all(r["key_pos"] <= r["query_pos"] for r in rows)
    assert "Parity PASS" in _texts(at.sidebar.markdown)
    at.sidebar.text_input(key="w_pair").set_value("a second sentence")
    _rerun(at)
    assert "no sentence pairs" in _texts(at.error)


def test_a_hf_only_model_offers_no_scratch_source_and_says_why(neox_dir):
    at = _app(model=str(neox_dir), text="hello there")
    assert at.sidebar.radio(key="w_source").options == ["Hugging Face"]
    assert "Parity" not in _texts(at.sidebar.markdown)
    at = _app(model=str(neox_dir), text="hello there", page="parity")
    assert "Hugging Face view only" in _texts(at.info) and "covers BERT, GPT-2, Llama" in _texts(at.info)


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
    assert len(multiples) == 12 * 64 * 64


def test_parity_page_follows_the_backend_and_heads_grid_follows_the_label():
    at = _app(page="parity", source="scratch", backend="sdpa")
    verdict = _texts(at.success)
    assert "hf vs scratch/sdpa" in verdict and "identical to the last bit" not in verdict
    diffs = [r["max_abs_diff"] for r in _rows(at, "per head")]
    assert 0 < max(diffs) <= 1e-5
    at = _upload(_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score\nsyntactic,nsubj,1,2,0.9\nsyntactic,obj,0,3,0.4\n")
    at.selectbox(key="w_label").set_value("obj")
    _rerun(at)
    assert "obj: score by head, no baseline (click a cell to open it)" in _titles(at)
    assert [(r["layer"], r["head"], r["score"]) for r in _rows(at, "obj: score")] == [(0, 3, 0.4)]


def test_a_probe_run_survives_a_visit_to_explore_and_a_link_runs_it_again():
    at = _run_probe("positional", 6)
    at.selectbox(key="w_label").set_value("self")
    _rerun(at)
    assert len(at.dataframe[0].value) == 72
    link = {k: v for k, v in at.query_params.items()}
    assert (link["items"], link["label"]) in (("6", "self"), (["6"], ["self"]))
    at.session_state["goto"] = "explore"  # a grid click, or the menu, opens another page…
    _rerun(at)
    assert at.header[0].value.startswith("minilm: layer")
    at.session_state["goto"] = "heads"  # …and back: the same probe, items, label and table, no rerun asked for
    _rerun(at)
    assert at.number_input(key="w_items").value == 6 and at.selectbox(key="w_label").value == "self"
    assert len(at.dataframe[0].value) == 72 and "self: score above or below" in " ".join(_titles(at))
    shared = _app(page="heads", probe="positional", items=6, label="self")  # the link, in a new session
    assert shared.selectbox(key="w_label").value == "self" and len(shared.dataframe[0].value) == 72
    bad = _app(page="heads", probe="nonsense", items=99999)
    assert "There is no probe 'nonsense' here" in _texts(bad.warning)
    assert bad.selectbox(key="w_probe").value == "positional" and bad.number_input(key="w_items").value == 2000


def test_a_probe_table_written_for_another_model_is_refused(minilm, tmp_path):
    from probes.heads import profile

    profile.profile(minilm, ["positional"], "ewt-dev", 5, tmp_path / "minilm.csv")
    at = _upload(_app(page="heads", model="smollm2"), "minilm.csv", (tmp_path / "minilm.csv").read_bytes())
    assert "minilm.csv: no rows for smollm2; it holds minilm: select it in the sidebar" in _texts(at.error)
    assert not [s for s in _specs(at) if "click a cell" in str(s.get("title"))]  # nothing drawn in the wrong frame


def test_heads_grid_opens_on_the_label_that_gains_most_and_warns_on_few_examples():
    at = _upload(_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score,baseline,n\nsyntactic,acl,0,0,0.9,0.85,12\n"
                 b"syntactic,nsubj,0,1,0.8,0.3,12\nsyntactic,nsubj,1,0,0.35,0.3,12\n")
    assert at.selectbox(key="w_label").value == "nsubj"  # 0.5 above its baseline; acl only 0.05
    assert "nsubj: score above or below its baseline 0.3 (click a cell to open it)" in _titles(at)
    assert "Only 12 examples behind these scores" in _texts(at.warning)


def test_a_deployment_can_offer_only_some_models(monkeypatch):
    monkeypatch.setenv("PROBES_MODELS", "minilm")
    at = _app(model="gpt2", head=2)
    assert at.sidebar.selectbox[0].options == ["minilm"]
    assert "model 'gpt2' is not offered here: showing minilm" in _texts(at.warning)
    assert at.header[0].value == "minilm: layer 0, head 2"


def test_qkv_on_a_decoder_masks_the_future(gpt2_dir):
    at = _app(model=str(gpt2_dir), text="the cat sat on the mat", page="qkv", query=2)
    table = _steps_table(at)
    assert list(table["allowed"]) == [True] * 3 + [False] * (len(table) - 3)
    assert (table.loc[~table["allowed"], "softmax weight"] == 0).all()
    assert abs(table["softmax weight"].sum() - 1) < 1e-9
    assert "future tokens are masked out" in _texts(at.markdown)


@pytest.mark.parametrize("source", ["hf", "scratch"])
def test_qkv_on_smollm2_shows_the_rotation_and_the_shared_heads(source):
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
    table = _steps_table(at)
    assert (table["softmax weight"] - table["model's weight"]).abs().max() < 1e-5
    assert "reproduce the model's own attention row" in _texts(at.caption)


def test_qkv_on_a_windowed_model_says_what_the_window_leaves_out(ckpt_dir):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from checkpoints import make_llama

    path = make_llama(ckpt_dir / "mistral-app", family="mistral", sliding_window=3)
    at = _app(model=str(path), text="the cat sat on the mat because it was warm", page="qkv", query=6,
              source="scratch", backend="sdpa")
    table = _steps_table(at)
    assert list(table["allowed"][:8]) == [False] * 4 + [True] * 3 + [False]
    assert "outside this layer's sliding window of 3" in _texts(at.markdown)
    assert (table["softmax weight"] - table["model's weight"]).abs().max() < 1e-5


def test_parity_page_and_badge_on_smollm2():
    at = _app(model="smollm2", text="小明把苹果给了小红，因为她很饿", page="parity", source="scratch", backend="sdpa")
    assert "PASS" in _texts(at.success) and "Parity PASS" in _texts(at.sidebar.markdown)
    cells = [r for r in _rows(at, "per head") if "max_abs_diff" in r]
    assert len(cells) == 30 * 9 and all(r["within"] for r in cells)
    assert "--backend sdpa" in at.code[0].value


def test_explore_on_smollm2_from_scratch_says_its_heads_share_keys():
    at = _app(model="smollm2", source="scratch", backend="sdpa", layer=18, head=6)
    assert at.header[0].value == "smollm2: layer 18, head 6"
    assert "30 layers × 9 heads reading 3 key/value heads · source: our from-scratch pass" in at.caption[0].value
    rows = [r for r in _rows(at, '"Layer 18, head 6"') if "weight" in r]
    assert rows and all(r["key_pos"] <= r["query_pos"] for r in rows)  # a decoder: no future drawn


def test_user_text_in_links_is_shown_escaped():
    """A link's model name or parameter never becomes a working link or an outside image in the app."""
    at = _app(model="[Session expired: log in again](https://evil.example/login)")
    errors = "\n".join(e.value for e in at.error)  # the markdown source the browser gets
    assert "\\[Session expired\\: log in again\\]\\(https" in errors
    assert "[Session expired: log in again](https://evil.example/login)" in _texts(at.error)  # what a reader sees
    at = _app(layer="![t](https://evil.example/t.png)")
    warnings = "\n".join(e.value for e in at.warning)
    assert "\\!\\[t\\]" in warnings and "](https" not in warnings


def test_an_upload_is_bounded_by_the_model_before_anything_is_drawn():
    import time

    at = _app(page="heads")
    started = time.perf_counter()
    _upload(at, "huge.csv", b"label,layer,head,score\nx,1000000,0,0.5\n")
    assert time.perf_counter() - started < 30  # (it used to build a million-row grid for minutes)
    assert "layer 1000000 does not exist in this model (layers 0–5)" in _texts(at.error)
    assert not at.get("vega_lite_chart")


def test_a_damaged_checkpoint_is_a_message_not_a_traceback(gpt2_dir, tmp_path):
    import shutil

    shutil.copytree(gpt2_dir, tmp_path / "trunc")
    weights = tmp_path / "trunc" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    at = _app(model=str(tmp_path / "trunc"))
    assert "may be truncated or damaged" in _texts(at.error)


def test_the_parity_badge_reuses_the_pages_trace_and_comes_after_the_page(monkeypatch):
    """Opening a text runs Hugging Face once (for the page and the badge alike) and the scratch pass once, after
    the page has read its head from the trace (the badge never delays the first chart)."""
    from probes import Trace, runner

    calls = []
    real_forward, real_attention = runner.forward, Trace.attention

    def forward(model, enc, source="hf", *args, **kwargs):
        calls.append(source)
        return real_forward(model, enc, source, *args, **kwargs)

    def attention(self, *args, **kwargs):
        calls.append("page reads a head" if "scratch" not in calls else "parity reads")
        return real_attention(self, *args, **kwargs)

    monkeypatch.setattr(runner, "forward", forward)
    monkeypatch.setattr(Trace, "attention", attention)
    at = _app(text="A sentence that no other test opens, so no trace of it is cached yet.")
    assert "Parity PASS" in "\n".join(m.value for m in at.sidebar.markdown)
    assert sorted(c for c in calls if c in ("hf", "scratch")) == ["hf", "scratch"]
    assert calls[0] == "hf" and calls.index("page reads a head") < calls.index("scratch")


def test_a_text_over_the_attention_budget_is_traced_lazily_and_says_so(monkeypatch):
    """The app keeps at most ``data.ATTENTION_BUDGET`` bytes of probabilities per trace: past it, the page still
    draws the head (recovered from Hugging Face's q and k), a note says why, and parity still passes."""
    from dashboard import data

    monkeypatch.setattr(data, "ATTENTION_BUDGET", 1024)
    text = "A text that is over a one-kilobyte budget, which no other test of the app uses."
    at = _app(text=text)
    assert "recomputed from Hugging Face's own q and k" in _texts(at.info)
    inp = data.Input("minilm", text, None, "hf", "eager", False)
    assert data.trace(inp).lazy
    assert "Parity PASS" in "\n".join(m.value for m in at.sidebar.markdown)
    assert [h.value for h in at.header][0] == "minilm: layer 0, head 0"


def test_the_app_sets_torchs_threads_for_an_app(monkeypatch):
    """The app's script runs in a new thread each time; the count it sets is what new threads start with."""
    import threading

    import torch

    def in_a_new_thread() -> int:
        seen = []
        thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        return seen[0]

    before = torch.get_num_threads()
    try:
        for asked in ("1", "2"):
            monkeypatch.setenv("PROBES_THREADS", asked)
            _app()
            assert in_a_new_thread() == int(asked)
    finally:
        torch.set_num_threads(before)


def test_find_heads_grids_one_query_to_one_key_word_over_every_head():
    at = _app(page="find")
    assert at.header[0].value == "Find heads: where one token looks, in every layer and head"
    assert at.selectbox(key="w_query").value == 10 and at.selectbox(key="find_key").value == 5  # she → Xiaohong
    grid = [s for s in _specs(at) if "click a cell" in str(s.get("title"))][0]
    assert grid["title"].startswith("“she” → “Xiaohong”: score above or below its baseline 0.133")  # 2 of 15 keys
    rows = _rows(at, "score above or below its baseline 0.133")
    assert len(rows) == 72 and max(rows, key=lambda r: r["score"])[("layer")] == 1
    assert "Head 1.2 puts the most of “she”'s attention on “Xiaohong”: 0.36, against 0.13" in _texts(at.caption)
    assert [p["name"] for p in grid["params"]] == ["head"]  # a click opens the head on Explore
    at.selectbox(key="find_key").set_value(0)  # "Xiaoming"
    _rerun(at)
    assert "on “Xiaoming”" in _texts(at.caption)
