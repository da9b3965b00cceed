"""The app as a whole, driven headless by Streamlit's AppTest on the offline default: how it opens, its one page
list, the sidebar, the shareable link, and every bad input the app must answer with advice instead of a
traceback, whichever page is open. Each page's own tests are in tests/dashboard/app_pages/<page>/."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptest import (
    APP,
    model_options as at_options,
    open_app as _app,
    opening,
    opening_header,
    rerun as _rerun,
    rows,
    texts as _texts,
    titles as _titles,
)
from streamlit.testing.v1 import AppTest

from probes.families import coverage


# -- the frame: opening, navigation, the sidebar's model menu ------------------------------------------------
def test_opens_on_the_offline_default_at_she_and_the_head_chosen_on_its_controls():
    """The app opens on "she" and the head the evidence chose on half of the question's controls, not on the head with
    the largest margin on the sentence alone (1.2, which follows the nearer name); its box is not green, since no
    head of minilm answers the question on the other half."""
    at = _app(page="explore")
    layer, head = opening()
    assert at.sidebar.selectbox[0].value == "minilm"
    assert at.header[0].value == f"minilm: layer {layer}, head {head}" and (layer, head) != (1, 2)
    assert not at.success
    said = _texts(at.warning)
    assert f"Who is “she”? No head of minilm is shown to answer it. Head {layer}.{head}, the best on half of the 96 " \
           "controls," in said
    assert "Parity PASS" in _texts(at.sidebar.markdown)
    titles = _titles(at)
    assert f"Layer {layer}, head {head}" in titles and "Where '10: she' looks" in titles
    assert [r["head"] for r in rows(at, '"multiples"')] == [f"{layer}.{h}" for h in range(12)]  # the layer's heads
    assert at.query_params["model"] == ["minilm"] or at.query_params["model"] == "minilm"


def test_the_navigation_offers_exactly_the_one_page_list_in_order(monkeypatch):
    """``dashboard.core.pages.PAGES`` is the one list of pages: the menu shows its pages, titles and icons in its
    order, each page is a folder ``dashboard/app_pages/<key>/`` (no page folder left out of it), and a link's ``page=``
    takes its keys."""
    import streamlit as st

    from dashboard.core.pages import HOME, PAGES
    from dashboard.core.state import ViewState

    offered = []
    real = st.navigation

    def navigation(pages, *args, **kwargs):
        offered.append([(p.url_path or HOME, p.title, p.icon) for p in pages])
        return real(pages, *args, **kwargs)

    monkeypatch.setattr(st, "navigation", navigation)
    _app(page="explore")
    assert offered and offered[-1] == [(key, page.title, page.icon) for key, page in PAGES.items()]
    folders = Path(APP).parent / "app_pages"
    assert sorted(p.parent.name for p in folders.glob("*/__init__.py")) == sorted(PAGES)
    for key in PAGES:
        assert ViewState.from_query({"page": key}) == (ViewState(page=key), [])
    assert ViewState.from_query({"page": "nowhere"})[0].page == "explore"


def _hub_cache(monkeypatch, tmp_path, *names: str) -> None:
    """A local Hugging Face cache holding these hub models (their config), and nothing else."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    for name in names:
        folder = tmp_path / f"models--{name.replace('/', '--')}"
        (folder / "snapshots" / "abc").mkdir(parents=True)
        (folder / "snapshots" / "abc" / "config.json").write_text("{}")
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text("abc")


def test_hub_models_not_in_the_local_cache_are_marked_needs_download(monkeypatch, tmp_path):
    """Where the hub is reachable, every hub model can be picked: after what loads here, marked ↓ (a mark short enough
    for the sidebar's width), which one line under the menu reads as "needs download"."""
    import probes
    from dashboard.core import models

    monkeypatch.setattr(models, "hub_reachable", lambda: True)  # a server with network (this one has none)
    _hub_cache(monkeypatch, tmp_path, "gpt2")
    at = _app(page="explore")
    options = at.sidebar.selectbox(key="w_model_pick").options
    # built in (no mark), then cached (loads without the hub), then the rest, then a name typed
    assert options == ["minilm", "smollm2", "gpt2",
                       *(f"{m} ↓" for m in probes.KNOWN_HUB_MODELS if m != "gpt2"), "other…"]
    assert "hub models" not in _texts(at.sidebar.caption)  # nothing left out
    assert "↓ needs download: a hub model not in this machine's Hugging Face cache" in _texts(at.sidebar.caption)
    at.sidebar.selectbox[0].set_value("distilgpt2")  # selectable: the view follows (its load is the page's business)
    _rerun(at)
    assert at.query_params["model"] in ("distilgpt2", ["distilgpt2"])


def test_a_hf_only_model_offers_no_scratch_source_and_says_why(opt_dir):
    at = _app(model=str(opt_dir), text="hello there")
    assert at.sidebar.radio(key="w_source").options == ["Hugging Face"]
    assert "Parity" not in _texts(at.sidebar.markdown)
    at = _app(model=str(opt_dir), text="hello there", page="parity")
    assert "Hugging Face view only" in _texts(at.info) and coverage() in _texts(at.info)


def test_a_deployment_can_offer_only_some_models(monkeypatch):
    monkeypatch.setenv("PROBES_MODELS", "minilm")
    at = _app(model="gpt2", head=2)
    assert at.sidebar.selectbox[0].options == ["minilm"]
    assert "model 'gpt2' is not offered here: showing minilm" in _texts(at.warning)
    assert at.header[0].value == "minilm: layer 0, head 2"


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
    """The app keeps at most ``budgets.ATTENTION_BUDGET`` bytes of probabilities per trace: past it, the page still
    draws the head (recovered from Hugging Face's q and k), a note says why, and parity still passes."""
    from dashboard.core import budgets, models, trace


    monkeypatch.setattr(budgets, "ATTENTION_BUDGET", 1024)
    text = "A text that is over a one-kilobyte budget, which no other test of the app uses."
    at = _app(text=text)
    assert "recomputed from Hugging Face's own q and k" in _texts(at.info)
    inp = models.Input("minilm", text, None, "hf", "eager", False)
    assert trace.trace(inp).lazy
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
            _app(page="explore")
            assert in_a_new_thread() == int(asked)
    finally:
        torch.set_num_threads(before)


def test_the_app_sums_with_the_thread_count_of_the_tests_own_library_calls():
    """The page tests compare the app's numbers with the library's computed on the test's thread: one count for
    both (tests/conftest.py), else a sum splits another way and the last bits differ (issue 40: Circuit's shares by
    3e-8 where PROBES_THREADS was 1 and this thread had torch's default of one per core)."""
    import threading

    import torch

    _app(page="explore")
    seen = []  # the count the app's run set is what a new thread starts with
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert seen == [torch.get_num_threads()]




# -- bad input, on any page ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("   ", "empty"),
    ("hungry " * 2858, "minilm reads at most 512: shorten it"),  # 20,006 characters, ~2,860 tokens > 512
])
def test_bad_text_gets_advice_and_the_app_recovers(text, message):
    at = _app(page="explore")
    at.sidebar.text_area[0].set_value(text)
    _rerun(at)
    assert message in _texts(at.error)
    at.sidebar.text_area[0].set_value("She was hungry.")
    _rerun(at)
    assert not at.error and at.header[0].value == opening_header()


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


def test_a_text_mostly_unknown_to_the_model_is_warned_and_a_reader_named(monkeypatch):
    at = _app(text="小明把苹果给了小红，因为她很饿")
    warned = _texts(at.warning)
    assert "11 of 17 tokens are unknown to minilm" in warned  # [CLS] + 15 characters + [SEP]; 她 is among them
    assert "smollm2 reads every character" in warned
    assert "unknown to" not in _texts(_app(page="explore").warning)  # the English default reads fine
    assert "unknown to" not in _texts(_app(model="smollm2", text="小明把苹果给了小红，因为她很饿").warning)
    monkeypatch.setenv("PROBES_MODELS", "minilm")  # a deployment without smollm2 does not point at it
    assert "smollm2" not in _texts(_app(text="小明把苹果给了小红，因为她很饿").warning)


def test_unknown_and_broken_models_get_advice(tmp_path):
    at = _app(page="explore")
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
    assert not at.error and at.header[0].value == opening_header()


def test_a_damaged_checkpoint_is_a_message_not_a_traceback(gpt2_dir, tmp_path):
    import shutil

    shutil.copytree(gpt2_dir, tmp_path / "trunc")
    weights = tmp_path / "trunc" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    at = _app(model=str(tmp_path / "trunc"))
    assert "may be truncated or damaged" in _texts(at.error)


def test_a_bad_link_is_explained_and_clamped():
    at = _app(layer=40, head="x")
    warnings = _texts(at.warning)
    assert "head='x' ignored" in warnings and "layer 40 does not exist here (0–5): showing 5" in warnings
    assert at.header[0].value == "minilm: layer 5, head 0"


def test_user_text_in_links_is_shown_escaped():
    """A link's model name or parameter never becomes a working link or an outside image in the app."""
    at = _app(model="[Session expired: log in again](https://evil.example/login)")
    errors = "\n".join(e.value for e in at.error)  # the markdown source the browser gets
    assert "\\[Session expired\\: log in again\\]\\(https" in errors
    assert "[Session expired: log in again](https://evil.example/login)" in _texts(at.error)  # what a reader sees
    at = _app(layer="![t](https://evil.example/t.png)")
    warnings = "\n".join(e.value for e in at.warning)
    assert "\\!\\[t\\]" in warnings and "](https" not in warnings


def test_public_deployment_refuses_local_paths_and_caps_length(monkeypatch, tmp_path):
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    monkeypatch.delenv("PROBES_MODELS", raising=False)
    # only the built-in offline models: a link cannot make the server open a file or download a checkpoint
    assert at_options(_app(page="explore")) == ["minilm", "smollm2"]
    for name in (str(tmp_path), "dashboard/app.py", "gpt2"):
        at = _app(model=name)
        assert f"model {name!r} is not offered here: showing minilm" in _texts(at.warning)
        assert at.header[0].value == opening_header()
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


def test_the_model_menu_lists_what_loads_here_and_one_line_for_the_hub_models_that_cannot(monkeypatch, tmp_path):
    """No network here: the menu offers what loads (the offline models, then the cached hub models) and "other…";
    the hub models that cannot load are not options, one line under the menu names them."""
    import probes
    from dashboard.core import models


    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    _hub_cache(monkeypatch, tmp_path)  # an empty cache
    at = _app(page="explore")
    assert at_options(at) == ["minilm", "smollm2", "other…"]
    assert not any(m in option for m in probes.KNOWN_HUB_MODELS for option in at_options(at))
    lines = [c.value for c in at.sidebar.caption if "hub model" in c.value]
    every = len(probes.KNOWN_HUB_MODELS)  # every family's examples: none of them is cached or reachable

    from probes import families

    def named(cached=()):  # one example of each of the first two families that has one missing
        firsts = [next((m for m in f.examples if m not in cached), None) for f in families.families()]
        return ", ".join([m for m in firsts if m][:2])

    assert named() == "bert-base-uncased, distilbert-base-uncased"  # the families in their order (by name)
    assert lines == [f"{every} hub models ({named()}, …) need the Hugging Face hub, which this server cannot reach."]
    _hub_cache(monkeypatch, tmp_path, "gpt2")  # gpt2 in the cache: it loads without the hub, so it is offered
    at = _app(page="explore")
    assert at_options(at) == ["minilm", "smollm2", "gpt2", "other…"]
    assert f"{every - 1} hub models ({named(['gpt2'])}, …) need the Hugging Face hub" in _texts(at.sidebar.caption)
    assert "gpt2" not in _texts(at.sidebar.caption).split("need the Hugging Face hub")[0].split(", ")
    at = _app(model="distilgpt2")  # a link to a hub model that cannot load: typed under "other…", and why it fails
    assert at.sidebar.selectbox[0].value == "other…"
    assert at.sidebar.text_input(key="w_model_custom").value == "distilgpt2"
    assert "'distilgpt2' is not in the local cache" in _texts(at.error)


def test_a_deployments_hub_model_is_marked_and_refused_when_the_hub_cannot_be_reached(monkeypatch, tmp_path):
    """A deployment's own list (PROBES_MODELS) is kept as it is: a hub model in it that cannot load here is marked,
    and picking it keeps the model shown."""
    from dashboard.core import models


    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    _hub_cache(monkeypatch, tmp_path)  # an empty cache
    monkeypatch.setenv("PROBES_MODELS", "minilm,smollm2,gpt2")
    at = _app(page="explore")
    menu = at.sidebar.selectbox[0]
    assert at_options(at) == ["minilm", "smollm2", "gpt2 · hub unreachable"]
    menu.set_value("gpt2")
    at.run()
    assert not at.exception and not at.error
    assert at.query_params["model"] == "minilm" and at.sidebar.selectbox[0].value == "minilm"
    assert "gpt2 needs the Hugging Face hub, which this server cannot reach" in _texts(at.warning)
    monkeypatch.setattr(models, "hub_reachable", lambda: True)
    at = _app(page="explore")
    assert at.sidebar.selectbox[0].format_func("gpt2") == "gpt2 ↓"


def test_a_decoder_with_a_second_sentence_reads_the_first_with_a_note():
    at = _app(model="smollm2", pair="Where did she go?")
    assert not at.error and not at.exception
    assert "reads one text, not sentence pairs: the second sentence is left out" in _texts(at.sidebar.info)
    assert at.get("vega_lite_chart"), "the page still draws the first text"


def test_every_script_run_hands_freed_memory_back(monkeypatch):
    # glibc keeps what a session's thread freed; each run ends by trimming it (dashboard.core.budgets.release_memory)


    from dashboard.core import budgets
    calls = []
    monkeypatch.setattr(budgets, "release_memory", lambda: calls.append(1))
    at = _app(page="cost")
    assert len(calls) == 1
    at.run()
    assert len(calls) == 2


def test_a_malformed_mmap_threshold_is_a_warning_and_the_app_runs(monkeypatch):
    # PROBES_MMAP_THRESHOLD is read once per process (probes.memory.steady): a deployment that sets it wrongly is
    # told on every page, in words, and the app still draws
    from probes import memory

    monkeypatch.setenv(memory.ENV, "lots")
    memory.steady.cache_clear()
    try:
        at = _app(page="explore")
        assert not at.exception
        assert "PROBES_MMAP_THRESHOLD='lots' is not a number of bytes: give one in digits" in _texts(at.warning)
        assert at.header, "the page still draws"
    finally:
        monkeypatch.delenv(memory.ENV)
        memory.steady.cache_clear()
        memory.steady()


def test_streamlit_sees_the_app_as_its_navigation_not_a_pages_folder():
    """Streamlit reads a folder named ``pages`` beside the entry script as its older multipage mode: a session's first
    run then ignores ``st.navigation``, and a link to a page's path (``/cost``) opens on "Page not found". The app's
    pages are ``dashboard/app_pages/``, so Streamlit's own check of the entry script finds no such folder."""
    from streamlit.runtime.pages_manager import PagesManager

    before = PagesManager.uses_pages_directory
    PagesManager.uses_pages_directory = None  # as at a server's start: Streamlit looks once, for the entry script
    try:
        for entry in ("app.py", "serve.py"):
            PagesManager.uses_pages_directory = None
            PagesManager(str(Path(APP).parent / entry))
            assert PagesManager.uses_pages_directory is False, entry
    finally:
        PagesManager.uses_pages_directory = before
