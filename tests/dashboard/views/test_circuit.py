"""The Circuit page: who the sidebar's head reads from, as layered graphs whose heads open on Explore."""

from __future__ import annotations

import pytest
from apptest import open_app, rows, said, specs, texts, titles
from numeric import F64

from dashboard.state import DEFAULT_TEXT


@pytest.mark.numeric
def test_the_text_graph_draws_the_library_senders_and_a_click_opens_the_head(minilm):
    from probes.effects.qk import senders_on_text

    at = open_app(layer=2, head=3, page="circuit")
    assert "Head 2.3: its scores' senders on this text" in titles(at)
    expected = senders_on_text(minilm, DEFAULT_TEXT, 2, 3)
    top = expected.loc[expected.contribution.abs().sort_values(ascending=False).index[:5]]
    drawn = rows(at, "senders on this text")
    assert sorted((r["layer"], r["head"], r["kind"]) for r in drawn) == sorted(
        zip(top.sender_layer, top.sender_head, top.kind))
    assert max(abs(r["value"] - s) for r, s in zip(sorted(drawn, key=lambda r: r["value"]), sorted(top.share))) <= F64
    spec = [s for s in specs(at) if s.get("title") == "Head 2.3: its scores' senders on this text"][0]
    assert [p["name"] for p in spec["params"]] == ["head"]  # a click on a head opens it on Explore


def test_a_head_in_layer_0_has_no_senders_and_says_so():
    at = open_app(layer=0, head=3, page="circuit")
    assert "reads only the embeddings" in texts(at.info)


@pytest.mark.numeric
def test_the_weights_graph_and_path_patching_draw_the_library_numbers(minilm):
    from probes.effects.compose import composition_scores
    from probes.effects.paths import path_patch

    at = open_app(layer=2, head=3, page="circuit")
    expected = composition_scores(minilm, receivers=[(2, 3)])
    top = expected.nlargest(5, "score")
    drawn = rows(at, "composition from the weights")
    assert sorted(r["value"] for r in drawn) == sorted(top.score)  # the same float64 scores
    mean, sd = expected.baseline_mean.iloc[0], expected.baseline_sd.iloc[0]
    assert any(t.startswith("Head 2.3: composition from the weights") and f"random: {mean:.3f} ± {sd:.3f}" in t
               for t in said(at))  # a long title: its detail in the subtitle
    assert "Type a corrupted text" not in texts(at.caption)  # the story sentence has its minimal pair ready
    at.button(key="circuit_run").click()
    at.run()
    assert not at.exception
    patched = path_patch(minilm, DEFAULT_TEXT, DEFAULT_TEXT.replace(" she ", " he "), (2, 3), into="k").frame
    best = patched.nlargest(5, "pattern_shift")
    drawn = rows(at, "senders through its key, by ")
    assert sorted(r["value"] for r in drawn) == pytest.approx(sorted(best.pattern_shift), abs=F64, rel=0)


@pytest.mark.numeric
def test_the_grid_shows_every_earlier_head_by_weights_or_on_this_text(minilm):
    from probes.effects.compose import composition_scores
    from probes.effects.qk import senders_on_text

    at = open_app(layer=2, head=3, page="circuit")
    k = composition_scores(minilm, kind="k", receivers=[(2, 3)])
    mean, sd = k.baseline_mean.iloc[0], k.baseline_sd.iloc[0]
    assert f"K-composition (weights) onto head 2.3 · random matrices {mean:.3f} ± {sd:.3f}" in said(at)
    cells = rows(at, "K-composition (weights) onto head 2.3")
    assert len(cells) == 2 * 12 and sorted(r["score"] for r in cells) == sorted(k.score)  # every earlier head
    # coloured by the distance above the baseline, so a random-sized score is white
    assert sorted(r["above_random"] for r in cells) == pytest.approx(sorted(k.score - mean), abs=F64, rel=0)
    at.radio(key="circuit_grid").set_value("text q")
    at.run()
    shares = senders_on_text(minilm, DEFAULT_TEXT, 2, 3)
    drawn = rows(at, "query side on this text")
    assert sorted(r["share"] for r in drawn) == pytest.approx(sorted(shares[shares.kind == "q"].share), abs=F64,
                                                               rel=0)
