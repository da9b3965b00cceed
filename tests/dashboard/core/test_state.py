"""The link: its shared core (dashboard/core/state.py) and each page's own part, read back from a link, with a note
for what a hand-edited link holds that cannot be used."""

from dataclasses import fields, is_dataclass

import pytest

import dashboard.app_pages  # noqa: F401 - registers every page and its part of the link
from dashboard.app_pages.explore.state import ExploreState
from dashboard.app_pages.generate.state import GenerateState
from dashboard.app_pages.kv.state import KVState
from dashboard.core import pages
from dashboard.core.state import DEFAULT_TEXT, Link, ViewState


def test_a_link_round_trips_every_field():
    state = ViewState(model="gpt2", text="她很饿 🙂\tok", pair="", source="scratch", backend="sdpa", layer=3,
                      head=7, query=2, truncate=True, page="qkv")
    params = state.to_query()
    assert params["layer"] == "3" and params["truncate"] == "1" and params["page"] == "qkv"
    back, problems = ViewState.from_query(params)
    assert back == state and problems == []


def test_defaults_stay_out_of_the_link_but_the_model_is_always_named():
    assert ViewState().to_query() == {"model": "minilm"}
    assert ViewState.from_query({}) == (ViewState(), [])
    assert ViewState.from_query({})[0].text == DEFAULT_TEXT
    assert ViewState.from_link({}, "smollm2")[0].model == "smollm2"  # the deployment's default, where a link names none


def test_a_hand_edited_link_keeps_what_it_can_and_says_what_it_ignored():
    state, problems = ViewState.from_query({"layer": "two", "head": "-1", "page": "nowhere", "backend": "fast",
                                            "model": " ", "query": "4"})
    assert (state.layer, state.head, state.page, state.backend, state.model) == (0, 0, "explore", "eager", "minilm")
    assert state.query == 4
    assert len(problems) == 5
    assert any("layer='two'" in p and "whole number" in p for p in problems)
    assert any("page='nowhere'" in p and "explore" in p for p in problems)


def test_clamp_keeps_layer_head_and_query_inside_the_model():
    state, problems = ViewState(layer=9, head=20, query=3).clamp(n_layers=6, n_heads=12, n_tokens=3)
    assert (state.layer, state.head, state.query) == (5, 11, 2)
    assert len(problems) == 3 and "layer 9 does not exist here (0–5): showing 5" in problems[0]
    assert ViewState(layer=2).clamp(6, 12) == (ViewState(layer=2), [])


def test_a_link_number_in_other_digits_is_ignored_with_a_reason():
    """int('٣') is 3: a link's layer written in Arabic-Indic digits was taken as layer 3 (issue 40). Numbers in a
    link are ASCII digits; anything else is kept out, and said."""
    state, problems = ViewState.from_query({"layer": "٣", "head": "²", "query": "３"})
    assert (state.layer, state.head, state.query) == (0, 0, ViewState().query)
    assert len(problems) == 3 and all("whole number" in p for p in problems), problems


def test_the_work_a_view_ran_is_the_pages_runs_in_one_spelling():
    """``ran``: the long work of the pages that have some (Heads' probe run, Circuit's path patching), which a link
    runs again; a name no page registered is said, the default kept."""
    state = ViewState(ran="heads,patch")
    back, problems = ViewState.from_query(state.to_query())
    assert back == state and problems == []
    assert back.has_run("patch") and back.has_run("heads") and not ViewState().has_run("heads")
    assert ViewState().with_run("patch").with_run("heads").with_run("patch").ran == "heads,patch"  # one spelling
    assert pages.runs() == {"heads": "the probe run (Heads)", "patch": "path patching (Circuit)"}
    bad, problems = ViewState.from_query({"ran": "everything"})
    assert bad == ViewState() and problems == [
        "link parameter ran='everything' ignored: expected some of heads, patch, comma-separated"]


def test_a_whole_link_holds_the_core_and_every_pages_part():
    """A link is read into its parts (each page's own) and written back the same; a page's parameter never lands in
    another part, and the notes come the core's first, then each page's in menu order."""
    params = {"model": "smollm2", "layer": "3", "colour": "norms", "prompt": "Once", "kv_tokens": "64"}
    link, problems = Link.read(params)
    assert problems == []
    assert link.view == ViewState(model="smollm2", layer=3)
    assert link.parts[ExploreState] == ExploreState(colour="norms")
    assert link.parts[GenerateState] == GenerateState(prompt="Once")
    assert link.parts[KVState] == KVState(kv_tokens=64)
    assert link.to_query() == params
    assert list(link.parts) == pages.parts()
    _, problems = Link.read({"kv_tokens": "1", "colour": "plaid", "head": "x"})
    assert [p.split("=")[0] for p in problems] == ["link parameter head", "link parameter colour",
                                                   "link parameter kv_tokens"]


def test_a_parameter_of_a_link_is_one_field_of_one_part():
    """Each parameter names one field: no page's part repeats the core's or another page's (a link could not say
    whose it is)."""
    names: list[str] = []
    for part in (ViewState, *pages.parts()):
        assert is_dataclass(part), part  # each part is a frozen dataclass
        names += [f.name for f in fields(part)]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_every_page_is_registered_once_with_a_view_that_draws_it():
    import importlib

    assert list(pages.PAGES) == ["start", "explore", "find", "qkv", "generate", "lens", "parity", "heads", "effects",
                                 "circuit", "cost", "kv"]
    for page in pages.PAGES.values():
        assert callable(importlib.import_module(page.view).render), page.key
    with pytest.raises(ValueError, match="two pages are registered as 'kv'"):
        pages.register(pages.Page("kv", "Another KV page", ":material/compress:"))
    with pytest.raises(ValueError, match="share one part of the link"):
        pages.register(pages.Page("kv2", "KV again", ":material/compress:", state=KVState))
    assert "kv2" not in pages.PAGES
