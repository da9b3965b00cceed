"""What if it attended less?, driven headless by AppTest on tiny checkpoints: the budget sweep holds the library's own
perplexities, a link reopens the same policies, budgets and text, the kept tokens are the sidebar's head's, the heads
button gives one row per key/value head, a bar opens its head on Explore, an encoder gets a note, and bad links,
short texts and a public deployment's bound are messages, never exceptions."""

from __future__ import annotations

import numpy as np
import pytest
from apptest import open_app, rerun, rows, texts, titles

import probes
from probes.kv import parse, stream as kvstream, sweep as kv
from probes.kv.layered import head_effects_layered
from probes.kv.texts import ewt_text

SWEEP = "Perplexity against the budget"  # the sweep chart's title says it
KEPT = "keys read at each step"


@pytest.fixture(scope="module")
def llama(llama_dir):
    return probes.load(str(llama_dir))


def _captions(at) -> str:
    return texts(at.caption)


@pytest.mark.numeric
def test_the_page_sweeps_every_policy_and_budget_with_the_librarys_numbers(llama_dir, llama):
    at = open_app(model=str(llama_dir), page="kv", kv_tokens=40)
    assert at.header[0].value == "What if it attended less?"
    assert not at.error and not at.warning
    assert any(SWEEP in t for t in titles(at) if t)
    text = ewt_text(llama, 40)
    tokens = int(kvstream.token_ids(llama, text).shape[1])
    plan = kv.sweep_plan(["window", "sinks", "h2o"], [16, 32, 64, 128], tokens)
    drawn = rows(at, SWEEP)
    assert sorted(r["name"] for r in drawn) == sorted(p.policy.name for p in plan.runs) and drawn
    for row in drawn:  # the library's own run, exactly (the same call)
        expected = kvstream.stream(llama, text, parse(row["name"]), method="masked")
        assert row["perplexity"] == expected.perplexity and row["kv_bytes"] == expected.kv_bytes
    full = kvstream.stream(llama, text, parse("full"), method="masked").perplexity
    assert f"Dashed: the full cache ({full:.2f})" in _captions(at)
    # issue 61: the words a student meets first, and the tokens read beside the box that asked for 40
    from dashboard.core.words import gloss

    assert gloss("H2O") in _captions(at)
    assert "its **perplexity** (exp of the mean next-token loss" in at.markdown[0].value
    assert (f"{tokens} tokens read: the whole sentences that fit in 40." in _captions(at)) is (tokens != 40)
    assert "exp of the mean next-token loss" in _captions(at)
    covered = [b for b in (16, 32, 64, 128) if b >= tokens]
    if covered:  # said, not drawn
        assert f"covers the whole {tokens}-token text: that is full attention, left out" in _captions(at)
    assert "Memory: what each budget holds" in [s.value for s in at.subheader]
    memory = next(d.value for d in at.dataframe if "policies" in d.value.columns)
    assert list(memory["policies"]) == ["window, sinks + window, H2O"] * len(memory)  # every evicting kind: the same
    assert list(memory["budget (keys)"]) == sorted({p.budget for p in plan.runs})
    # the kept tokens: the sidebar's layer and head (0, 0: key/value head 0), the view's policy (sinks + window)
    assert any(KEPT in t for t in titles(at) if t)
    picture = rows(at, KEPT)
    chosen = next(p for p in plan.runs if p.kind == "sinks")
    evicted = kvstream.stream(llama, text, chosen.policy, method="masked").evicted_at[0, 0]
    want = kv.kept_picture(chosen.policy, evicted)
    assert [r["kept"] for r in picture] == pytest.approx(want["kept"].tolist(), abs=0, rel=0)  # the same run: exact
    assert "The first 4 columns stay dark to the end: the sinks." in _captions(at)


def test_a_link_reopens_the_same_policies_budgets_and_text(llama_dir):
    at = open_app(model=str(llama_dir), page="kv", kv_policies="tova,window", kv_budgets="4,8", kv_tokens=30,
                  kv_policy="tova", kv_budget=4, layer=1, head=5)
    assert at.multiselect(key="w_kv_policies").value == ["window", "tova"]
    assert at.multiselect(key="w_kv_budgets").value == [4, 8]
    assert at.number_input(key="w_kv_tokens").value == 30
    assert {r["name"] for r in rows(at, SWEEP)} == {"window:4", "window:8", "tova:4", "tova:8"}
    assert at.selectbox(key="w_kv_policy").value == "tova" and at.selectbox(key="w_kv_budget").value == 4
    assert "What layer 1, head 5 kept under tova:4" in [s.value for s in at.subheader]
    assert "Query head 5 reads key/value head 1, with query heads 3–5" in _captions(at)
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert params["kv_policies"] == "window,tova" and params["kv_budgets"] == "4,8" and params["kv_tokens"] == "30"

    at.multiselect(key="w_kv_budgets").set_value([8, 16])  # the link follows a change
    rerun(at)
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert params["kv_budgets"] == "8,16"
    assert "Budget 4 is not among those swept for TOVA: showing 8." in _captions(at)


def test_the_sidebars_sentence_is_shorter_than_every_budget_and_the_page_says_so(llama_dir):
    at = open_app(model=str(llama_dir), page="kv", kv_text="sidebar", text="The cat sat on the mat.")
    said = texts(at.info)
    assert "Every budget picked covers the sidebar's text" in said and "nothing is evicted" in said
    assert "Pick the EWT web text, or budgets below the text's length." in said
    assert not at.error and not any(SWEEP in t for t in titles(at) if t)


@pytest.mark.numeric
def test_the_heads_button_cuts_each_key_value_head_alone(llama_dir, llama):
    at = open_app(model=str(llama_dir), page="kv", kv_tokens=40, kv_policies="window", kv_budgets="8",
                  kv_policy="window", kv_budget=8)
    assert not any("hurts most" in t for t in titles(at) if t)  # behind the button
    at.button(key="kv_heads").click()
    rerun(at)
    table = at.dataframe[-1].value
    assert len(table) == llama.n_layers * llama.n_kv_heads  # 2 layers × 2 key/value heads
    assert list(table["loss change (nats)"]) == sorted(table["loss change (nats)"], reverse=True)
    text = ewt_text(llama, 40)
    expected = kv.heads_frame(head_effects_layered(llama, text, [parse("window:8")]).rows)
    # the same runs: exact
    np.testing.assert_allclose(table["loss change (nats)"], expected["loss_change"], rtol=0, atol=0)
    assert any("hurts most" in t for t in titles(at) if t)
    assert not [b for b in at.button if b.key == "kv_heads"]  # the offer is gone once the heads are cut
    assert "A click opens its first query head on Explore" in _captions(at)


def test_a_bar_of_the_heads_most_hurt_selects_its_layer_and_first_query_head(llama_dir):
    """AppTest cannot click inside a chart: the bars carry the selection ``head`` (layer, first query head) that
    ui.open_clicked_head opens on Explore, and the page listens to it (the browser test clicks one)."""
    import json

    at = open_app(model=str(llama_dir), page="kv", kv_tokens=40, kv_policies="window", kv_budgets="8",
                  kv_policy="window", kv_budget=8)
    if [b for b in at.button if b.key == "kv_heads"]:  # (not when another test of this process has run it)
        at.button(key="kv_heads").click()
        rerun(at)
    chart = next(c for c in at.get("vega_lite_chart") if "hurts most" in c.proto.spec)
    spec = json.loads(chart.proto.spec)
    assert [(p["name"], p["select"]["fields"]) for p in spec["params"]] == [("head", ["layer", "head"])]
    assert list(chart.proto.selection_mode) == ["head"]
    bars = rows(at, "hurts most")
    assert all(r["head"] == 3 * r["kv_head"] for r in bars)  # 6 query heads read 2 key/value heads


def test_an_encoder_gets_a_note_and_a_way_to_the_decoder(bert_dir):
    at = open_app(model=str(bert_dir), page="kv")
    said = texts(at.info)
    assert "is an encoder" in said and "keeps no KV cache" in said
    assert not at.error and not at.get("vega_lite_chart")
    assert at.button(key="kv_switch").label.startswith("Switch to smollm2")


def test_a_bad_link_is_the_apps_warning_not_a_traceback(llama_dir):
    at = open_app(model=str(llama_dir), page="kv", kv_budgets="0,16", kv_budget="0", kv_policies="lru",
                  kv_tokens=99999, kv_text="web")
    said = texts(at.warning)
    assert "link parameter kv_budgets='0,16' ignored: expected budgets from 1 to 8,192 keys" in said
    assert "link parameter kv_budget='0' ignored: expected 1 or more" in said
    assert "link parameter kv_policies='lru' ignored: expected some of window, sinks, h2o" in said
    assert "link parameter kv_text='web' ignored" in said
    assert "The link asks for tokens 99,999 (set to 1,024)" in said
    assert not at.error and any(SWEEP in t for t in titles(at) if t)  # the defaults kept, the page drawn


def test_a_public_deployment_stops_the_page_past_its_seconds(monkeypatch):
    """Past ``budgets.PUBLIC_SECONDS`` (here 0: the first layer trips it) the page stops with one line that says what to
    do (a public deployment loads the offline models only: smollm2, on a sentence no other test reads)."""
    from dashboard.core import budgets

    monkeypatch.setenv("PROBES_PUBLIC", "1")
    monkeypatch.setattr(budgets, "PUBLIC_SECONDS", 0, raising=False)
    at = open_app(model="smollm2", page="kv", kv_text="sidebar",
                  text="The dog watched the cat from the door, and she said that he would come back tomorrow.")
    assert texts(at.error) == ("This took longer than the 0 seconds the public app gives one computation, so it was "
                               "stopped: pick fewer policies or budgets, or a shorter text, or run the app on your "
                               "own machine (make app).")
    assert not at.get("progress")



def test_the_sink_is_linked_to_this_page_where_explore_hides_it(gpt2_dir):
    at = open_app(model=str(gpt2_dir), hide_first=1)
    links = [e for e in at.get("page_link")]
    assert [e.proto.label for e in links] == ["What happens without the sink: What if it attended less?"]
    assert links[0].proto.page == "kv"
    assert not open_app(hide_first=1).get("page_link")  # an encoder keeps no cache: no link


def test_cancel_stops_the_sweep_and_run_it_again_draws_it(llama_dir, monkeypatch):
    """Issue 61: the sweep cancelled at its first layer draws no chart and says so; Run it again reads the text with
    every policy (the bar up to the end) and draws the chart."""
    from apptest import cancel_at_first_update

    from dashboard.app_pages.kv import view

    shown = cancel_at_first_update(monkeypatch, "kv")
    view._kept_run.clear()  # runs another test left in the cache would be drawn without the bar
    at = open_app(model=str(llama_dir), page="kv", kv_tokens=48, kv_policies="window", kv_budgets="4,16")
    assert "Reading the text with the policies not yet run was cancelled" in texts(at.info)
    assert not any(SWEEP in t for t in titles(at) if t) and 0 < max(shown) < 1
    at.button(key="again_kv").click()
    rerun(at)
    assert "was cancelled" not in texts(at.info)
    assert any(SWEEP in t for t in titles(at) if t) and len(rows(at, SWEEP)) == 2
    assert shown[-1] == 1.0 and len(shown) > 2
