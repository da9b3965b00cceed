"""Does it matter? (and Explore's colour control), driven headless by AppTest: the grids hold the library's own
numbers (single-head ablation, direct logit attribution, a minimal pair's difference), Explore's heatmap coloured by
value-weighted norms or rollout holds those, and bad input is a message, never an exception."""

from __future__ import annotations

import numpy as np
import pytest
from apptest import drawn, open_app, texts, titles
from numeric import fp32

import probes
from dashboard.core.charts import title_lines
from dashboard.core.state import DEFAULT_TEXT
from dashboard.core.words import said
from probes.effects import ablation, attribution, norms, pairs, rollout
from probes.parity import TOLERANCES


def _rerun(at):
    at.run()
    assert not at.exception, at.exception
    return at


def _specs(at) -> list[dict]:
    return [drawn(c) for c in at.get("vega_lite_chart")]


def _title(spec: dict) -> str:
    title = spec.get("title")
    text = title if isinstance(title, str) else (title or {}).get("text", "")
    return " ".join(title_lines(text))  # a long title wraps into lines


def _spec(at, title: str) -> dict:
    found = [s for s in _specs(at) if title in _title(s)]
    assert found, f"no chart titled {title!r} among {[_title(s) for s in _specs(at)]}"
    return found[0]


def _rows(at, title: str):
    """The data of the chart with this title (its first layer's: a highlight layer has its own)."""
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    charts = [c for c in at.get("vega_lite_chart") if title in _title(drawn(c))]
    assert charts, f"no chart titled {title!r}"
    return convert_arrow_bytes_to_pandas_df(charts[0].proto.datasets[0].data.data)


def _grid(frame, value: str) -> np.ndarray:
    out = np.full((int(frame["layer"].max()) + 1, int(frame["head"].max()) + 1), np.nan)
    out[frame["layer"].to_numpy(int), frame["head"].to_numpy(int)] = frame[value].to_numpy(float)
    return out


def _heat(frame, value: str, n: int) -> np.ndarray:
    out = np.zeros((n, n))
    out[frame["query_pos"].to_numpy(int), frame["key_pos"].to_numpy(int)] = frame[value].to_numpy(float)
    return out


# -- Explore: colour by weights, norms or rollout ---------------------------------------------------
# The grids are the library's numbers: the test makes the app's call again, so they are equal, not close.
@pytest.mark.numeric
def test_explore_colours_the_heatmap_by_value_norms_or_rollout(minilm):
    import probes

    at = open_app(layer=2, head=5)
    assert at.radio(key="w_colour").value == "weights"
    assert list(at.radio(key="w_colour").options) == ["attention weights", "value-weighted norms", "rollout"]
    trace = probes.run(minilm, DEFAULT_TEXT)
    n = len(trace.token_strings())
    weights = _heat(_rows(at, "Layer 2, head 5"), "weight", n)
    assert np.array_equal(weights, trace.attention(2, 5).numpy())

    at.radio(key="w_colour").set_value("norms")
    _rerun(at)
    assert at.query_params["colour"] in ("norms", ["norms"])  # part of the link
    spec = _spec(at, "Layer 2, head 5: value-weighted norms")
    expected = norms.value_norms(trace, minilm, 2, 5).numpy()
    got = _heat(_rows(at, "value-weighted norms"), "norm", n)
    # not probabilities: a row of n probabilities sums to 1 within eps × n
    assert np.array_equal(got, expected) and not np.allclose(expected.sum(-1), 1, atol=fp32(n), rtol=0)
    colour = spec["encoding"]["color"]
    assert colour["title"] == "value-weighted norm" and colour["scale"]["domain"] == [0, float(expected.max())]
    assert "Not probabilities" in texts(at.caption)

    at.radio(key="w_colour").set_value("rollout")
    _rerun(at)
    spec = _spec(at, "Layer 2: rollout through layers 0–2")
    got = _heat(_rows(at, "rollout through"), "rollout", n)
    assert np.array_equal(got, rollout.rollout(trace)[2].numpy())
    assert spec["encoding"]["color"]["scale"]["domain"] == [0, 1]
    assert "Rollout is per layer, not per head" in texts(at.caption)

    at.radio(key="w_colour").set_value("weights")  # and back: the weights heatmap as before
    _rerun(at)
    assert np.abs(_heat(_rows(at, "Layer 2, head 5"), "weight", n) - weights).max() == 0


def test_a_model_outside_the_scratch_families_is_not_offered_norms(opt_dir):
    at = open_app(model=str(opt_dir), colour="norms")
    assert list(at.radio(key="w_colour").options) == ["attention weights", "rollout"]
    assert at.radio(key="w_colour").value == "weights"
    assert "Value-weighted norms are not offered" in at.radio(key="w_colour").help
    at = open_app(model=str(opt_dir), page="effects")
    assert "does not cover" in texts(at.info) and not at.error


# -- Does it matter? on an encoder -------------------------------------------------------------------
@pytest.mark.numeric
def test_the_ablation_grid_is_every_single_head_ablation_at_the_query_token(minilm):
    at = open_app(page="effects")
    assert at.header[0].value == "Does it matter? What each head changes"
    assert [s.value for s in at.subheader] == ["Take one head out: what changes?",
                                               "Minimal pair: change a word, see which heads move"]  # no LM head
    assert at.selectbox(key="w_effects_measure").value == "token_change" and at.selectbox(key="w_query").value == 10
    expected = ablation.ablate_each(minilm, DEFAULT_TEXT, position=10)
    title = "Change of the query token when one head is zeroed"
    got = _grid(_rows(at, title), "token_change")
    assert np.array_equal(got, _grid(expected, "token_change"))  # the same call: the same numbers
    top = expected.loc[expected["token_change"].idxmax()]
    assert (f"The largest change of the query token: {top['token_change']:.4g}, when head {int(top['layer'])}."
            f"{int(top['head'])} is taken out") in texts(at.markdown)
    spec = _spec(at, title)
    rect = spec["layer"][0]
    assert rect["encoding"]["color"]["scale"]["domain"][0] == 0  # a change ≥ 0: from 0 (white)
    assert [p["name"] for p in spec["params"]] == ["head"]  # a click opens the head on Explore

    at.selectbox(key="w_effects_measure").set_value("embedding_change")
    at.radio(key="w_effects_how").set_value("mean")
    _rerun(at)
    from probes.datasets import catalog

    reference = catalog.texts(catalog.read_items("ewt-dev")[:32])
    expected = ablation.ablate_each(minilm, DEFAULT_TEXT, how="mean", reference=reference, position=10)
    got = _grid(_rows(at, "Change of the sentence embedding when one head is"), "embedding_change")
    assert np.array_equal(got, _grid(expected, "embedding_change"))
    link = {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert (link["effects_measure"], link["effects_how"]) == ("embedding_change", "mean")  # the link keeps both…
    shared = open_app(**link)  # …and opened elsewhere draws the same grid
    assert np.array_equal(_grid(_rows(shared, "Change of the sentence embedding when one head is"),
                                "embedding_change"), got)


@pytest.mark.numeric
def test_the_minimal_pair_grid_and_both_texts_of_the_selected_head(minilm):
    at = open_app(page="effects")
    assert at.text_input(key="effects_b").value == DEFAULT_TEXT.replace("she", "he")
    assert (at.selectbox(key="effects_qword").value, at.selectbox(key="effects_kword").value) == ("she", "Xiaohong")
    expected = pairs.minimal_pair(minilm, DEFAULT_TEXT, DEFAULT_TEXT.replace("she", "he"), "she", "Xiaohong").weights
    got = _rows(at, "“she” → “Xiaohong”: second text − first")
    assert np.array_equal(_grid(got, "diff"), _grid(expected, "diff"))  # the same call: the same numbers
    assert "Changed: “she” → “he”." in texts(at.caption)
    scale = _spec(at, "second text − first")["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domainMid"] == 0 and scale["domain"][0] == -scale["domain"][1]  # diverging, centred at 0
    # the sidebar's head in both texts, side by side: the link's (none: 0.0; a story's head moves only on the page
    # whose answer box shows its evidence)
    assert {"First text: layer 0, head 0", "Second text: layer 0, head 0"} <= {_title(s) for s in _specs(at)}


@pytest.mark.parametrize("second, message, kind", [
    ("Xiaoming gave the apple to Xiaohong because was hungry.", "has no counterpart in the second text", "error"),
    (DEFAULT_TEXT, "The second text is the same as the sidebar's", "info"),
    ("   ", "Type a second text", "info"),
])
def test_a_bad_minimal_pair_is_a_message_not_an_exception(second, message, kind):
    at = open_app(page="effects")
    at.text_input(key="effects_b").set_value(second)
    _rerun(at)
    assert message in texts(getattr(at, kind))
    assert not any("second text − first" in _title(s) for s in _specs(at))
    assert "Take one head out: what changes?" in [s.value for s in at.subheader]  # the rest of the page stays


def test_user_text_on_the_page_is_escaped():
    at = open_app(page="effects", text="a *b* she [c](d) was.", query=2)  # query: the first "*"
    raw = "\n".join(e.value for e in at.caption)
    assert "at “\\*” (token 2)" in raw  # shown as typed, never as markdown
    assert at.text_input(key="effects_b").value == "a *b* he [c](d) was."
    assert "Changed: “she” → “he”." in texts(at.caption)


def test_does_it_matter_says_its_measures_in_words_not_their_identifiers():
    """The Measure menu, the caption, the grid's title and legend and the line under it say "change of the query
    token", never the identifier token_change; the CSV keeps the raw column names."""
    at = open_app(page="effects")
    menu = at.selectbox(key="w_effects_measure")
    assert list(menu.options) == ["change of the query token", "change of the hidden states",
                                  "change of the sentence embedding"]
    shown = texts(at.caption) + texts(at.markdown) + "\n".join(str(t) for t in titles(at) if t)
    assert "token_change" not in shown and "hidden_change" not in shown
    spec = _spec(at, "Change of the query token when one head is zeroed")
    assert spec["layer"][0]["encoding"]["color"]["title"] == "change of the query token"
    assert "token_change" in _rows(at, "Change of the query token when one head is zeroed").columns  # data: raw


# -- Does it matter? on a decoder --------------------------------------------------------------------
@pytest.mark.numeric
@pytest.mark.xdist_group("effects_smollm2")  # (with the next test, which opens the same page: one grid for both)
def test_a_decoder_opens_on_the_query_token_and_gets_the_logit_attribution_of_she_against_he(smollm2):
    at = open_app(page="effects", model="smollm2")
    # the grid answers the question beside it (the query token "she"), not the whole text's loss
    assert at.selectbox(key="w_effects_measure").value == "token_change"
    query = at.selectbox(key="w_query").value
    assert smollm2.encode(DEFAULT_TEXT).tokens[0][query].text == " she"
    assert _grid(_rows(at, "Change of the query token when one head is zeroed"), "token_change").shape == (30, 9)

    # " she" against " he", predicted at "because" (the token before "she")
    assert (at.text_input(key="effects_target").value, at.text_input(key="effects_other").value) == (" she", " he")
    position = at.selectbox(key="effects_at").value
    assert smollm2.encode(DEFAULT_TEXT).tokens[0][position].text.strip() == "because"
    want = attribution.logit_attribution(smollm2, DEFAULT_TEXT, attribution.target_id(smollm2, " she"),
                                         attribution.target_id(smollm2, " he"), position)
    got = _grid(_rows(at, "each head's direct share of logit(␣she) − logit(␣he)"), "share")
    assert np.array_equal(got, want.heads)
    assert f"heads {want.heads.sum():+.3f} + rest {want.rest:+.3f} = {want.total:+.3f}" in texts(at.markdown)

    at.text_input(key="effects_target").set_value("Xiaohong")  # several tokens: refused, with the reason
    _rerun(at)
    assert "is 4 tokens on smollm2" in texts(at.error)
    assert "Minimal pair: change a word, see which heads move" in [s.value for s in at.subheader]


@pytest.mark.numeric
@pytest.mark.xdist_group("effects_smollm2")  # on the worker of the test above: its first grid is in the app's cache
def test_a_decoder_gets_the_loss_on_the_text_when_each_head_is_zeroed(smollm2):
    """The loss grid, each cell a head ablated on its own (a test of its own: with the query token's grid above in
    one test it ran past a minute under the numeric re-run's portable kernels)."""
    at = open_app(page="effects", model="smollm2")
    query = at.selectbox(key="w_query").value
    at.selectbox(key="w_effects_measure").set_value("loss")
    _rerun(at)
    got = _grid(_rows(at, "Loss on the text when one head is zeroed"), "loss")
    assert got.shape == (30, 9)
    top = divmod(int(got.argmax()), got.shape[1])  # (layer, head) of the largest
    assert f"Taking out head {top[0]}.{top[1]} raises the loss the most" in texts(at.markdown)
    # a few cells, each head ablated on its own (the page ablates all 270 in batches: the same function in
    # another batch composition). A loss moves by at most twice the largest change of a logit, and two fp32
    # passes' logits agree within parity's error model (TOLERANCES["logits"] of their scale)
    logits = probes.run(smollm2, DEFAULT_TEXT, source="scratch").logits
    assert logits is not None  # a decoder's
    scale = max(1.0, float(logits.abs().max()))
    for layer, head in {top, (0, 0), (15, 4), (29, 8)}:
        want = ablation.ablate(smollm2, DEFAULT_TEXT, [(layer, head)], position=query)["loss"]
        assert got[layer, head] == pytest.approx(want, abs=2 * TOLERANCES["logits"] * scale, rel=0), (layer, head)
    scale = _spec(at, "Loss on the text when one head is zeroed")["layer"][0]["encoding"]["color"]["scale"]
    assert scale["domainMid"] == 0  # a loss can fall: diverging


@pytest.mark.numeric
@pytest.mark.bitwise  # the page's numbers against what the library returned it, and one reader's two calls: exactly
def test_the_chinese_sentence_on_smollm2_opens_on_what_the_page_can_draw(smollm2, monkeypatch):
    """小明把苹果给了小红，因为她很饿 on smollm2: the ablation grid is the change of the query token 她 (the library's
    numbers for that one measure, as the library returned them to the page), and the logit attribution's target is
    the raw text of one token that the text predicts (为, predicted at 因's second piece), never a token's label such
    as 饿(3/3), which is 8 tokens."""
    from dashboard.core import ablation as grids

    text = "小明把苹果给了小红，因为她很饿"
    calls = []  # the page's own call of the library, and what it returned (not a second grid of 270 passes here)
    each = ablation.ablate_each_kept

    def recorded(*args, **kw):
        calls.append((args, kw, each(*args, **kw)))
        return calls[-1][2]

    monkeypatch.setattr(ablation, "ablate_each_kept", recorded)
    grids._ablation_kept.clear()  # a grid another test left in the cache would be drawn without a call
    grids._each_kept.clear()
    at = open_app(page="effects", model="smollm2", text=text)
    assert not at.error, texts(at.error)
    assert at.selectbox(key="w_effects_measure").value == "token_change"
    query = at.selectbox(key="w_query").value
    assert smollm2.encode(text).tokens[0][query].text.startswith("她")
    [(args, kw, kept)] = calls  # every head's copy, kept: each measure is read from them
    assert args[0].name == "smollm2" and args[1] == text and kw.get("how", "zero") == "zero"
    expected = kept.frame(["token_change"], query)
    got = _grid(_rows(at, "Change of the query token when one head is zeroed"), "token_change")
    assert np.array_equal(got, _grid(expected, "token_change"))  # the library's numbers, drawn as they are

    target, position = at.text_input(key="effects_target").value, at.selectbox(key="effects_at").value
    ids = smollm2.encode(text).input_ids[0].tolist()
    assert position is not None
    assert target == "为" and attribution.target_id(smollm2, target) == ids[position + 1]
    assert smollm2.tokenizer.encode(target, add_special_tokens=False) == [ids[position + 1]]  # one token
    want = attribution.logit_attribution(smollm2, text, ids[position + 1], None, position)
    assert np.array_equal(_grid(_rows(at, "each head's direct share of logit(为)"), "share"), want.heads)


def test_an_importance_table_uploads_on_the_heads_page():
    """A table as ``python -m probes importance --out F.csv`` writes it (probe, label gradient/ablation, layer, head,
    score, baseline, n, model, n_layers, n_heads) shows on Heads like a probe's."""
    import pandas as pd

    rows = [dict(probe="importance", label=label, layer=layer, head=head, score=(layer * 12 + head) / 72 * scale,
                 baseline=0.5 * scale, n=40, model="minilm", n_layers=6, n_heads=12)
            for label, scale in (("gradient: hidden", 2.0), ("ablation: hidden_change", 0.01))
            for layer in range(6) for head in range(12)]
    at = open_app(page="heads")
    at.segmented_control(key="heads_how").set_value("Upload a table")
    _rerun(at)
    at.file_uploader(key="probe_upload").set_value(("importance.csv", pd.DataFrame(rows).to_csv(index=False).encode(),
                                                   "text/csv"))
    _rerun(at)
    assert not at.error
    assert set(at.selectbox(key="w_label").options) == {"gradient: hidden", "ablation: change of the hidden states"}
    label = said(at.selectbox(key="w_label").value)
    grid = [s for s in _specs(at) if _title(s) == label]  # the label whole as the title…
    # …detail below
    assert grid and "score above or below its baseline" in " ".join(title_lines(grid[0]["title"]["subtitle"]))


def test_the_minimal_pair_opens_on_the_same_words_as_find_heads():
    """The pair's query and key words come from where Find heads and the callout take theirs: on the Chinese
    sentence 她 → 小红 (words, not the characters 小 and 红), and on a text with no question a key word that is not
    the first word (the sink's)."""
    at = open_app(page="effects", text="小明把苹果给了小红，因为她很饿")
    assert (at.selectbox(key="effects_qword").value, at.selectbox(key="effects_kword").value) == ("她", "小红")
    assert at.text_input(key="effects_b").value == "小明把苹果给了小红，因为他很饿"
    at = open_app(page="effects", text="The keys to the cabinet are on the table.")
    words = at.selectbox(key="effects_kword").options
    assert words[0] == "The" and at.selectbox(key="effects_kword").value not in ("The", at.selectbox(
        key="effects_qword").value)


def _pair_heatmaps(at) -> tuple[list[str], list[str]]:
    """The titles of the minimal pair's two heatmaps: all of them, and those drawn inside columns (side by side)."""
    pair = ("First text:", "Second text:")
    everywhere = [t for t in map(_title, _specs(at)) if t.startswith(pair)]
    in_columns = [t for col in at.columns for c in col.get("vega_lite_chart")
                  if (t := _title(drawn(c))).startswith(pair)]
    return everywhere, in_columns


def test_the_minimal_pairs_heatmaps_stack_when_the_text_is_long():
    """Side by side, two heatmaps of 15 tokens squeeze their cells and clip their legends: past 12 tokens they are
    drawn one above the other, each the page's width; a short pair stays side by side."""
    at = open_app(page="effects")  # the default text: 15 tokens
    everywhere, in_columns = _pair_heatmaps(at)
    # the link names no head, and a story's head moves only on the page whose answer box shows its evidence: 0.0
    assert everywhere == ["First text: layer 0, head 0", "Second text: layer 0, head 0"]
    assert not in_columns
    short = open_app(page="effects", text="She saw him there.")
    everywhere, in_columns = _pair_heatmaps(short)
    assert len(everywhere) == 2 and in_columns == everywhere


def test_a_public_deployment_bounds_the_pages_work_by_the_texts_length(monkeypatch):
    """The link that held a public server (smollm2, "Does it matter?", 2,000 characters: 270 copies of a long text)
    gets a message instead of its grids, and asks for none of them: each of the page's computations is replaced by
    one that records being asked (whatever the machine's speed, nothing past the text's one forward pass runs)."""
    from dashboard.app_pages.effects import data
    from dashboard.core import ablation as grids

    asked = []
    computations = {grids: ("ablation", "reference_texts"),
                    data: ("attribution", "attribution_default", "minimal_pair", "pair_head")}
    for module, names in computations.items():
        for name in names:
            monkeypatch.setattr(module, name, lambda *args, _name=name, **kwargs: asked.append(_name))
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    long_text = ("Xiaoming gave the apple to Xiaohong because she was hungry. " * 34)[:2000]
    at = open_app(model="smollm2", page="effects", text=long_text)
    assert asked == []
    said = texts(at.info)
    assert "on this public deployment this page takes up to 64" in said and "270 heads" in said
    assert not at.get("vega_lite_chart") and not at.error


def test_a_public_deployment_stops_a_grid_that_runs_past_its_seconds(monkeypatch):
    """Past ``budgets.PUBLIC_SECONDS`` (here 0: the first head trips it) the grid stops with one line that says what to
    do; the page goes on (the minimal pair below), and nothing raises."""
    from dashboard.core import budgets

    monkeypatch.setenv("PROBES_PUBLIC", "1")
    monkeypatch.setattr(budgets, "PUBLIC_SECONDS", 0, raising=False)
    at = open_app(page="effects", text="She waited for him by the door.")  # a text no other test's grid is kept for
    assert texts(at.error) == ("This took longer than the 0 seconds the public app gives one computation, so it was "
                               "stopped: shorten the text, or run the app on your own machine (make app).")
    assert not any("when one head is" in t for t in titles(at) if t)  # no grid
    assert "Minimal pair: change a word, see which heads move" in [s.value for s in at.subheader]
    assert not at.get("progress")  # the bar is gone


def test_a_grid_whose_browser_has_gone_stops_quietly(monkeypatch):
    """A closed tab's session stays on the server for a while (to reconnect), and its run with it: the grid's next
    step sees the session is no longer connected and stops the run, with nothing drawn and nothing kept."""
    from streamlit import runtime

    real = runtime.get_instance

    class Gone:  # the runtime, with no session connected
        def is_active_session(self, session_id: str) -> bool:
            return False

        def __getattr__(self, name: str):
            return getattr(real(), name)

    monkeypatch.setattr(runtime, "get_instance", lambda: Gone())
    at = open_app(page="effects", text="She sang to him at dawn.")
    assert not at.error and not any("when one head is" in t for t in titles(at) if t)
    assert "Minimal pair: change a word, see which heads move" not in [s.value for s in at.subheader]  # stopped there
    monkeypatch.undo()
    at = open_app(page="effects", text="She sang to him at dawn.")  # the browser back: the grid is computed afresh
    assert any("when one head is zeroed" in t for t in titles(at) if t)


def test_cancel_stops_the_ablation_grid_and_run_it_again_draws_it(monkeypatch):
    """Issue 61: cancelled at its first head, the grid is not drawn and the page says so; Run it again runs every
    head again (the bar up to the whole grid) and draws the grid."""
    from apptest import cancel_at_first_update

    shown = cancel_at_first_update(monkeypatch, "ablation")
    at = _rerun(open_app(page="effects", text="A grey heron stood still by the reeds."))  # a text no grid is kept for
    assert "Taking each head out in turn was cancelled: nothing of it is shown or kept." in texts(at.info)
    assert not [t for t in titles(at) if t and "when one head is zeroed" in t] and 0 < shown[0] < 1
    at.button(key="again_ablation").click()
    _rerun(at)
    assert "was cancelled" not in texts(at.info)
    assert [t for t in titles(at) if t and "when one head is zeroed" in t], titles(at)
    assert shown[-1] == 1.0 and len(shown) > 2
