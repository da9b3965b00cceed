"""The Circuit page: who the sidebar's head reads from, as layered graphs whose heads open on Explore."""

from __future__ import annotations

import pytest
from apptest import cancel_at_first_update, open_app, rerun, rows, said, specs, texts, titles
from numeric import F64

from dashboard.core.state import DEFAULT_TEXT
from probes.evidence.edges import COMPOSITION_RULE, composition_floors


@pytest.mark.numeric
def test_the_text_graph_draws_the_library_senders_and_a_click_opens_the_head(minilm):
    from probes.effects.why import senders_on_text

    at = open_app(layer=2, head=3, page="circuit")
    assert "Head 2.3: its scores' senders on this text" in titles(at)
    expected = senders_on_text(minilm, DEFAULT_TEXT, 2, 3)
    top = expected.loc[expected.contribution.abs().sort_values(ascending=False).index[:5]]
    drawn = rows(at, "senders on this text")
    assert sorted((r["layer"], r["head"], r["kind"]) for r in drawn) == sorted(
        zip(top.sender_layer, top.sender_head, top.kind, strict=True))
    assert max(abs(r["value"] - s)
               for r, s in zip(sorted(drawn, key=lambda r: r["value"]), sorted(top.share), strict=True)) <= F64
    spec = [s for s in specs(at) if s.get("title") == "Head 2.3: its scores' senders on this text"][0]
    assert [p["name"] for p in spec["params"]] == ["head"]  # a click on a head opens it on Explore


def test_a_head_in_layer_0_has_no_senders_and_says_so():
    at = open_app(layer=0, head=3, page="circuit")
    assert "reads only the embeddings" in texts(at.info)


@pytest.mark.numeric
def test_the_weights_graph_and_path_patching_draw_only_edges_above_their_floor(minilm):
    from probes.effects.compose import composition_scores
    from probes.evidence.edges import patch_floors

    at = open_app(layer=2, head=3, page="circuit")
    expected = composition_floors(composition_scores(minilm, receivers=[(2, 3)]))
    above = expected[expected.above_floor]
    assert 5 < len(above) < len(expected.dropna(subset=["score"]))  # 17 of 72 on minilm
    drawn = rows(at, "composition from the weights")
    assert sorted(r["value"] for r in drawn) == sorted(above.nlargest(5, "score").score)  # the same float64 scores
    floor = float(expected.floor.iloc[0])
    assert all(r["value"] > floor for r in drawn)
    mean, sd = expected.baseline_mean.iloc[0], expected.baseline_sd.iloc[0]
    assert any(t.startswith("Head 2.3: composition from the weights") and f"random: {mean:.3f} ± {sd:.3f}" in t
               and f"floor {floor:.3f}" in t for t in said(at))  # a long title: its detail in the subtitle
    caption = texts(at.caption)
    assert "an edge's width is that composition score" in caption and COMPOSITION_RULE in caption
    assert "Type a corrupted text" not in caption  # the story sentence has its minimal pair ready
    at.button(key="circuit_run").click()
    at.run()
    assert not at.exception
    # she -> he on minilm's head 2.3: no sender's effect through its key is above what a change elsewhere does
    story = patch_floors(minilm, DEFAULT_TEXT, DEFAULT_TEXT.replace(" she ", " he "), (2, 3), "k")
    assert story.above.empty and story.measure == "pattern_shift"
    assert "No earlier head's effect through this head's key is above its noise floor" in texts(at.info)
    assert not [t for t in titles(at) if t and "senders through its key" in t]  # no graph
    table = at.dataframe[-1].value
    assert len(table) == 24 and "shift of the attention pattern: noise floor" in table.columns  # every sender


def _run_patching(text: str, corrupt: str):
    """Circuit on minilm's head 3.1 with ``text`` in the sidebar and ``corrupt`` as its corrupted text, after "Run path
    patching" (no exception raised)."""
    at = open_app(text=text, layer=3, head=1, page="circuit")
    at.text_input(key="w_patch_text").set_value(corrupt)
    rerun(at)
    at.button(key="circuit_run").click()
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.numeric
def test_path_patching_draws_the_checked_senders_above_their_floor(minilm):
    from probes.evidence.edges import NULLS, patch_floors

    clean, corrupt = "the cat sat on the mat", "the dog sat on the mat"
    at = _run_patching(clean, corrupt)
    batch = 256 // minilm.encode(clean).input_ids.shape[-1]  # the app's passes (budgets.STEP_ROWS tokens each)
    expected = patch_floors(minilm, clean, corrupt, (3, 1), "k", batch=batch)
    above = expected.above
    assert 0 < len(above) < len(expected.checked) == 10  # on minilm: 2.7, 0.6 and 0.7 of the 10 largest
    drawn = rows(at, "senders through its key, by ")
    assert sorted((r["layer"], r["head"]) for r in drawn) == sorted(zip(above["layer"], above["head"], strict=True))
    assert sorted(r["value"] for r in drawn) == pytest.approx(sorted(above.pattern_shift), abs=F64, rel=0)
    table = at.dataframe[-1].value  # the column an edge's width is, next to the sender, not off to the right
    assert list(table.columns[:4]) == ["layer", "head", "shift of the attention pattern",
                                      "shift of the attention pattern: noise floor"]
    caption = texts(at.caption)
    assert "an edge's width is the change in shift of the attention pattern" in caption
    assert f"from {NULLS} corruptions that change as many tokens elsewhere" in caption and "89th percentile" in caption


def test_no_composition_edge_above_its_floor_draws_no_graph(gpt2_dir):
    # the tiny random GPT-2: onto head 1.0 every earlier head scores what random matrices do
    at = open_app(model=str(gpt2_dir), layer=1, head=0, page="circuit")
    assert "No earlier head's composition score is above the noise floor (random matrices" in texts(at.info)
    assert not [t for t in titles(at) if t and "composition from the weights" in t]
    assert "K-composition (weights) onto head 1.0" in " ".join(t or "" for t in said(at))  # the grid stays


@pytest.mark.numeric
def test_the_grid_shows_every_earlier_head_by_weights_or_on_this_text(minilm):
    from probes.effects.compose import composition_scores
    from probes.effects.why import senders_on_text

    at = open_app(layer=2, head=3, page="circuit")
    k = composition_scores(minilm, kind="k", receivers=[(2, 3)])
    mean, sd = k.baseline_mean.iloc[0], k.baseline_sd.iloc[0]
    assert f"K-composition (weights) onto head 2.3 · random matrices {mean:.3f} ± {sd:.3f}" in said(at)
    cells = rows(at, "K-composition (weights) onto head 2.3")
    assert len(cells) == 2 * 12 and sorted(r["score"] for r in cells) == sorted(k.score)  # every earlier head
    # coloured by the distance above the baseline, so a random-sized score is white
    assert sorted(r["above_random"] for r in cells) == pytest.approx(sorted(k.score - mean), abs=F64, rel=0)
    at.radio(key="w_circuit_grid").set_value("text q")
    at.run()
    shares = senders_on_text(minilm, DEFAULT_TEXT, 2, 3)
    drawn = rows(at, "query side on this text")
    assert sorted(r["share"] for r in drawn) == pytest.approx(sorted(shares[shares.kind == "q"].share), abs=F64,
                                                               rel=0)


@pytest.mark.numeric
def test_the_convention_control_switches_the_weights_scores_and_the_caption_names_it(gpt2_dir, llama_dir):
    import probes
    from probes.effects.compose import composition_scores

    at = open_app(model=str(gpt2_dir), layer=1, head=0, page="circuit")
    control = at.radio(key="w_convention")
    assert control.value == "raw" and not control.disabled
    model = probes.load(str(gpt2_dir))
    raw, folded = (composition_scores(model, kind="k", receivers=[(1, 0)], convention=c)
                   for c in ("raw", "transformerlens"))
    title = "K-composition (weights) onto head 1.0"
    assert sorted(r["score"] for r in rows(at, title)) == pytest.approx(sorted(raw.score), abs=F64, rel=0)
    assert "Composition from the weights, convention as computed here (raw): LayerNorm's centring left out." \
        in texts(at.caption)
    control.set_value("transformerlens")
    rerun(at)
    got = sorted(r["score"] for r in rows(at, title))
    assert got == pytest.approx(sorted(folded.score), abs=F64, rel=0)
    # 0.014 on this head of the tiny GPT-2
    assert max(abs(a - b) for a, b in zip(got, sorted(raw.score), strict=True)) > 1e-3
    caption = texts(at.caption) + texts(at.info)
    assert ("convention TransformerLens's default: LayerNorm's centring folded in (fold_ln, center_writing_weights)"
            in caption)
    table = at.dataframe[0].value  # the weights' table: every score, in the convention picked, named beside it
    assert sorted(table[table["into"] == "k"].score) == pytest.approx(sorted(folded.score), abs=F64, rel=0)
    assert "convention: transformerlens" in caption
    # an RMSNorm model: both conventions are the same numbers, and the page says so
    at = open_app(model=str(llama_dir), layer=1, head=0, page="circuit")
    assert "the raw and transformerlens conventions give the same numbers here" in texts(at.caption)


def test_a_post_norm_model_has_the_raw_convention_alone():
    at = open_app(layer=2, head=3, page="circuit")  # minilm: BERT
    control = at.radio(key="w_convention")
    assert control.value == "raw" and control.disabled
    assert "a post-norm model, like BERT: TransformerLens folds no LayerNorm into it" in texts(at.caption)


def _public_patch(monkeypatch, minilm, text: str, corrupt: str, budget: int):
    """Path patching on a public app whose work budget is ``budget`` bytes: the page, and each pass's ``batch`` the
    library was asked for (the run itself and its noise floor's null runs)."""
    import probes.effects.path_patching as paths
    from dashboard.core import budgets

    monkeypatch.setenv("PROBES_PUBLIC", "1")
    monkeypatch.setattr(budgets, "PUBLIC_WORK_BYTES", budget)
    asked, patch = [], paths.path_patch

    def spy(*args, **kwargs):
        asked.append(kwargs.get("batch"))
        return patch(*args, **kwargs)

    monkeypatch.setattr(paths, "path_patch", spy)
    return _run_patching(text, corrupt), asked


def test_public_path_patching_passes_are_sized_from_the_work_budget(minilm, monkeypatch):
    from probes.effects.ablation import copy_bytes
    from probes.effects.path_patching import fixed_bytes

    text, corrupt = "the fox ran to the barn", "the owl ran to the barn"
    length = minilm.encode(text).input_ids.shape[-1]
    two = fixed_bytes(minilm, length, False) + 2 * copy_bytes(minilm, length)
    at, asked = _public_patch(monkeypatch, minilm, text, corrupt, two)
    assert asked and set(asked) == {2}  # 256 token rows would allow 32 senders a pass: the budget holds two
    assert len(at.dataframe[-1].value) == 3 * 12  # every sender's row, as without a budget


def test_public_path_patching_refuses_a_text_too_long_for_its_budget_in_words(minilm, monkeypatch):
    text, corrupt = "the fox ran to the old barn", "the owl ran to the old barn"
    from probes.effects.ablation import copy_bytes

    length = minilm.encode(text).input_ids.shape[-1]
    at, asked = _public_patch(monkeypatch, minilm, text, corrupt, copy_bytes(minilm, length) - 1)
    assert asked == []  # nothing ran
    assert (f"Path patching on this public app may hold 0 MiB at a time, and this text of {length} tokens needs more "
            "for one earlier head: shorten the text, or run the app on your own machine (make app).") in texts(at.info)


def test_the_link_reopens_the_grid_the_convention_and_the_path_patching_run():
    """Every choice on the page is in its link, path patching's run too: the link opened in a new session draws the
    same grid and the same patching table without "Run path patching" pressed."""
    clean, corrupt = "the cat sat on the mat", "the dog sat on the mat"
    at = _run_patching(clean, corrupt)
    at.radio(key="w_circuit_grid").set_value("text q")
    rerun(at)
    link = {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert (link["ran"], link["circuit_grid"], link["patch_text"]) == ("patch", "text q", corrupt)
    table = at.dataframe[-1].value
    shared = open_app(**link)
    assert shared.radio(key="w_circuit_grid").value == "text q"
    assert shared.text_input(key="w_patch_text").value == corrupt
    assert shared.dataframe[-1].value.equals(table)  # the patching table, with no button pressed


def _patch_tables(at) -> list:
    """The path-patching tables drawn (those with a noise floor column)."""
    return [t.value for t in at.dataframe if "checked against its floor" in t.value.columns]


def test_cancel_stops_path_patching_keeps_nothing_and_runs_it_again(monkeypatch):
    """Issue 44: path patching has a progress bar with a Cancel button. Cancelled at its first pass, the page says so
    and draws no table; nothing was kept (Run it again computes it afresh, every pass reported on the bar up to
    the whole run), and the table then drawn is the full run's."""
    clean, corrupt = "the cat ran to the old mat", "the dog ran to the old mat"
    shown = cancel_at_first_update(monkeypatch, "patch")
    at = _run_patching(clean, corrupt)
    assert "Path patching was cancelled: nothing of it is shown or kept." in texts(at.info)
    assert not _patch_tables(at) and len(shown) == 1 and 0 < shown[0] < 1
    at.button(key="again_patch").click()
    at.run()
    assert not at.exception, at.exception
    assert "was cancelled" not in texts(at.info)
    assert [len(t) for t in _patch_tables(at)] == [3 * 12]  # every sender of layer 3's head
    assert shown[1:] == sorted(shown[1:]) and shown[-1] == 1.0 and len(shown) > 2  # the run again, pass by pass
