"""Explore answers clicks (AppTest cannot click inside a chart: a click is the chart's selection state, set
under the chart's key as the browser would): a heatmap cell sets the query and draws its column as bars, a
bar of either bar chart follows its token, a small multiple opens its head (outlined among the others), and
every secondary chart of a long input is windowed like the heatmap."""

from __future__ import annotations

import numpy as np
import pytest
from apptest import open_app, rerun, rows, sidebar_text, specs, titles
from numeric import fp32

import probes
from dashboard.app_pages.explore import charts
from dashboard.core import budgets, questions
from dashboard.core.shared_work import SharedWork
from probes.explain import why as why_words


def _outlined(at, title: str) -> set[int]:
    """The query rows the heatmap titled ``title`` outlines (its table's marked rows)."""
    return {int(r["query_pos"]) for r in rows(at, title) if r["marked"]}


LONG = "the cat sat on the mat " * 20  # 122 tokens on minilm


def _click(at, chart: str, selection: str, **point):
    """What the browser sends when a point of chart ``chart`` is clicked (its key counts the clicks taken)."""
    taken = at.session_state[f"explore_clicks_{chart}"] if f"explore_clicks_{chart}" in at.session_state else 0
    at.session_state[f"explore_{chart}_{taken}"] = {"selection": {selection: [point]}}
    return rerun(at)


def _grid_spec(at) -> str:
    """The "Why this weight?" grid's spec as the browser gets it (its table aside)."""
    (grid,) = [c.proto.spec for c in at.get("vega_lite_chart") if "what wrote the key" in c.proto.spec]
    return grid


def _link(at, name: str) -> str:
    value = at.query_params[name]
    return value[0] if isinstance(value, list) else value


@pytest.mark.numeric
def test_a_cell_click_sets_the_query_and_draws_the_column_who_attends_to_its_key(minilm):
    at = open_app(layer=2, head=5, query=3)
    tokens = at.selectbox(key="w_query").options
    assert tokens[10] == "10: she"  # the picker reads "index: token" (and is searchable: a select box)
    assert "Who attends to '3: gave'" in titles(at)  # before any click the column is the query's own
    _click(at, "cell", "cell", query_pos=7, key_pos=5)
    assert at.session_state["view"].query == 7 and _link(at, "query") == "7"  # the link follows
    assert at.selectbox(key="w_query").value == 7
    assert "Where '7: xiao' looks" in titles(at) and "Who attends to '5: apple'" in titles(at)
    reference = probes.run(minilm, sidebar_text(at)).attention(2, 5).numpy()
    column = {r["query_pos"]: r["weight"] for r in rows(at, "Who attends to")}
    assert sorted(column) == list(range(len(tokens)))
    assert np.array_equal([column[q] for q in sorted(column)], reference[:, 5])  # the model's weights, exactly
    heatmap = [s for s in specs(at) if s.get("title") == "Layer 2, head 5"][0]
    assert heatmap["encoding"]["stroke"]["condition"]["test"] == "datum.marked"  # the row outlined: in its table
    assert _outlined(at, "Layer 2, head 5") == {7}
    assert [p["name"] for p in heatmap["params"]] == ["cell"]


@pytest.mark.numeric
def test_a_bar_click_follows_its_token(minilm):
    at = open_app(layer=0, head=1, query=10)
    _click(at, "keybar", "key", key_pos=5)  # a bar of "Where '10: she' looks": that key's column
    assert "Who attends to '5: apple'" in titles(at) and at.session_state["view"].query == 10
    _click(at, "querybar", "query", query_pos=12)  # a bar of "Who attends to …": that query
    assert at.session_state["view"].query == 12 and "Where '12: hungry' looks" in titles(at)
    reference = probes.run(minilm, sidebar_text(at)).attention(0, 1).numpy()
    where = {r["key_pos"]: r["weight"] for r in rows(at, "Where '12: hungry' looks")}
    assert np.array_equal([where[k] for k in sorted(where)], reference[12])


def test_a_small_multiple_click_opens_its_head():
    at = open_app(layer=1, head=2, query=10)
    spec = [s for s in specs(at) if s.get("name") == "multiples"][0]
    assert [p["name"] for p in spec["params"] if "select" in p] == ["head"]  # a click selects the panel's head
    _click(at, "heads", "head", head="1.7")
    assert at.header[0].value == "minilm: layer 1, head 7" and at.sidebar.slider(key="w_head").value == 7
    assert "Layer 1, head 7" in titles(at) and _link(at, "head") == "7"  # the heatmap and the link follow
    _click(at, "heads", "head", head="1.3")  # the next click, on the chart drawn after the first
    assert at.header[0].value == "minilm: layer 1, head 3"


def test_a_long_input_windows_every_chart(minilm):
    at = open_app(text=LONG, query=100)
    assert at.slider(key="window").value == 58  # the heatmap's window: tokens 58..121
    keys = [r["key_pos"] for r in rows(at, "Where '100: ")]
    queries = [r["query_pos"] for r in rows(at, "Who attends to '100: ")]
    multiples = {r["head"]: r for r in rows(at, '"multiples"') if "head" in r}
    assert (min(keys), max(keys), len(keys)) == (58, 121, 64)
    assert (min(queries), max(queries), len(queries)) == (58, 121, 64)
    assert len(multiples) == 12 and multiples["0.4"]["tokens"] == "58–121"  # one picture a head, of the window
    reference = probes.run(minilm, LONG).attention(0, 4).numpy()[58:, 58:]
    assert np.abs(charts.image_weights(multiples["0.4"]["url"]) - reference).max() <= 1 / 240
    assert "Tokens 58–121 of 122, the heatmap's window" in "\n".join(c.value for c in at.caption)
    _click(at, "cell", "cell", query_pos=70, key_pos=61)  # a click inside the window
    assert at.session_state["view"].query == 70 and "Who attends to '61: the'" in titles(at)


def test_word_level_keeps_the_query_outlined_and_a_word_click_sets_its_first_token():
    at = open_app(text="Xiaohong was hungry", query=4)  # [CLS] xiao ##hong was hungry [SEP]: 4 is "hungry"
    at.toggle(key="w_words").set_value(True)
    rerun(at)
    spec = [s for s in specs(at) if s.get("title") == "Layer 0, head 0 (words)"][0]
    assert spec["encoding"]["y"]["sort"] == ["0: Xiaohong (1)", "1: was (3)", "2: hungry (4)"]  # picker's numbers
    assert _outlined(at, "Layer 0, head 0 (words)") == {2}
    _click(at, "cell", "cell", query_pos=0, key_pos=1)  # the word "Xiaohong" (tokens 1, 2) on "was" (3)
    assert at.session_state["view"].query == 1 and "Who attends to '3: was'" in titles(at)
    spec = [s for s in specs(at) if s.get("title") == "Layer 0, head 0 (words)"][0]
    assert spec["encoding"]["stroke"]["condition"]["test"] == "datum.marked"
    assert _outlined(at, "Layer 0, head 0 (words)") == {0}


def test_a_decoder_column_leaves_out_the_queries_before_the_key():
    at = open_app(model="smollm2", text="one two three four five", layer=0, head=0, query=4)
    _click(at, "cell", "cell", query_pos=4, key_pos=2)
    column = rows(at, "Who attends to '2: ")
    assert sorted(r["query_pos"] for r in column) == [2, 3, 4]  # queries 0, 1 cannot see key 2: not drawn as 0


@pytest.mark.numeric
def test_hide_the_first_token_rescales_the_rows_keeps_the_true_weight_and_is_part_of_the_link(minilm):
    at = open_app(layer=0, head=3, query=10)
    assert not at.toggle(key="w_hide_first").value and "Layer 0, head 3" in titles(at)
    at.toggle(key="w_hide_first").set_value(True)
    rerun(at)
    assert _link(at, "hide_first") == "1"  # part of the link: it opens the same way
    title = "Layer 0, head 3, first token hidden (rows rescaled)"
    assert title in titles(at)
    captions = "\n".join(c.value for c in at.caption)
    assert "First token hidden: the colours are rescaled" in captions and "true weight" in captions
    reference = probes.run(minilm, sidebar_text(at)).attention(0, 3).double().numpy()
    cells = rows(at, title)
    n = reference.shape[0]
    assert {r["key_pos"] for r in cells} == set(range(1, n))  # the first column ([CLS]) is not drawn
    true = np.zeros((n, n))
    shown = np.zeros((n, n))
    for r in cells:
        true[r["query_pos"], r["key_pos"]] = r["true_weight"]
        shown[r["query_pos"], r["key_pos"]] = r["rescaled"]
    assert np.array_equal(true[:, 1:], reference[:, 1:].astype(np.float32))  # the tooltip: the model's own weights
    expected = reference[:, 1:] / reference[:, 1:].sum(axis=1, keepdims=True)
    # fp32 weights rescaled in float64: a row of n fp32 roundings of weights ≤ 1, divided by a sum ≤ 1 above 1e-3
    assert np.abs(shown[:, 1:] - expected).max() <= fp32(n) / reference[:, 1:].sum(axis=1).min()
    assert np.abs(shown[:, 1:].sum(axis=1) - 1).max() <= fp32(n)  # each row sums to 1 over the keys shown
    where = {r["key_pos"]: r["weight"] for r in rows(at, "Where '10: she' looks")}
    assert where[0] == reference[10, 0].astype(np.float32)  # the bars keep the true weights, first token included

    at.radio(key="w_colour").set_value("rollout")  # another colouring: drawn as it is, and the page says so
    rerun(at)
    assert "rescales the token-level attention weights only" in "\n".join(c.value for c in at.caption)
    assert not [t for t in titles(at) if t and "first token hidden" in t]
    at.radio(key="w_colour").set_value("weights")
    at.toggle(key="w_hide_first").set_value(False)  # reversible: the true weights again
    rerun(at)
    assert "Layer 0, head 3" in titles(at) and "hide_first" not in at.query_params
    shared = open_app(layer=0, head=3, hide_first=1)  # the link, in a new session
    assert shared.toggle(key="w_hide_first").value and title in titles(shared)


@pytest.mark.numeric
def test_a_cell_click_opens_why_this_weight_and_the_link_reopens_it(minilm):
    from apptest import texts

    from dashboard.core.state import DEFAULT_TEXT
    from probes.effects.why import qk_attribution

    at = open_app(layer=1, head=2)
    assert "Click a cell of the heatmap" in texts(at.caption)  # no cell picked yet: the panel says how to open it
    _click(at, "cell", "cell", query_pos=10, key_pos=7)  # "she" on the first piece of "Xiaohong"
    assert _link(at, "key") == "7" and at.session_state["view"].query == 10  # the cell is part of the link
    expected = qk_attribution(minilm, DEFAULT_TEXT, 1, 2, 10, 7)
    shown = texts(at.markdown)
    # the reading first: minilm's position is its position embedding's terms (no rotary bands)
    assert f"**Position or content?** {why_words.reading(expected)}" in shown
    assert shown.index("Position or content?") < shown.index(why_words.sentence(expected, expected.top(1).iloc[0]))
    for row in expected.top(5).itertuples():  # the top terms in words, the library's numbers
        assert why_words.sentence(expected, row) in shown
    title = f"Head 1.2: “she” (10) → “xiao” (7), score {expected.score:.3g}"
    assert title in titles(at)
    cells = rows(at, f"(7), score {expected.score:.3g}")  # (the spec is JSON with its quotes and arrow escaped)
    assert len(cells) == 36  # buckets: 3 embeddings, layer 0's heads, MLP 0, the biases
    assert "heads of layer 0 (12 parts)" in {r["query_part"] for r in cells}  # a bucket says how many it holds
    # the grid still sums to the score (the same float64 terms, summed in another order)
    assert sum(r["contribution"] for r in cells) == pytest.approx(expected.total, abs=fp32(36, expected.bound),
                                                                   rel=0)
    assert "Sum of the parts" in texts(at.caption) and why_words.grid_caption(expected, 3) in texts(at.caption)
    grid = _grid_spec(at)
    _click(at, "cell", "cell", query_pos=12, key_pos=3)  # another cell: its grid has other buckets and another scale
    other = qk_attribution(minilm, DEFAULT_TEXT, 1, 2, 12, 3)
    assert f"Head 1.2: “hungry” (12) → “gave” (3), score {other.score:.3g}" in titles(at)
    assert _grid_spec(at) == grid  # the same spec (the browser swaps the table in the grid it has)
    reopened = open_app(layer=1, head=2, query=10, key=7)  # the link opens on the same panel
    assert title in titles(reopened)


@pytest.mark.numeric
def test_why_this_weight_on_a_rotary_model_reads_position_by_band_first(smollm2):
    from apptest import texts

    from probes.effects.why import qk_attribution

    text = "The president called for new talks with Iran."
    at = open_app(model="smollm2", text=text, layer=16, head=0, query=5, key=4)  # " talks" on " new"
    expected = qk_attribution(smollm2, text, 16, 0, 5, 4)
    shown = texts(at.markdown)
    reading = why_words.reading(expected)
    assert f"**Position or content?** {reading}" in shown and reading.startswith("position")
    groups = why_words.labelled_band_groups(expected)
    assert groups.label[0] == "high-frequency band 0 (local position)"
    for row in groups.itertuples():  # the band groups next, each in words
        push = why_words.pushes(row.contribution, expected.score)
        assert f"- {row.label}: {push}; content {row.content:+.3g}" in shown
    assert shown.index("Position or content?") < shown.index(groups.label[0]) < \
        shown.index(why_words.sentence(expected, expected.top(1).iloc[0]))
    assert "The 32 bands sum to the score" in texts(at.caption)
    cells = rows(at, f"(4), score {expected.score:.3g}")
    buckets = expected.buckets(3)
    lumps = {f"{row.bucket} ({row.parts} parts)" for row in buckets[buckets.parts > 1].itertuples()}
    assert "heads of layers 0–7 (72 parts)" in lumps and lumps <= {r["key_part"] for r in cells}
    assert sum(r["contribution"] for r in cells) == pytest.approx(expected.total, abs=fp32(len(cells),
                                                                                           expected.bound), rel=0)


def test_why_this_weight_on_a_decoder_says_a_later_key_has_no_score(gpt2_dir):
    from apptest import texts

    at = open_app(model=str(gpt2_dir), text="the cat sat on the mat", layer=1, head=0, query=2, key=4)
    assert "a query sees only itself and earlier tokens" in texts(at.info)
    at = open_app(model=str(gpt2_dir), text="the cat sat on the mat", layer=1, head=0, query=4, key=2)
    assert any(t and t.startswith("Head 1.0:") for t in titles(at))


@pytest.mark.parametrize("budget, batch", [(None, 16), (1, 1)])
def test_public_evidence_traces_as_many_texts_at_once_as_the_work_budget_holds(monkeypatch, budget, batch):
    # every head's probabilities of each text traced at once: the story's controls fit 16 at a time in 96 MiB

    from probes.evidence import claims

    monkeypatch.setenv("PROBES_PUBLIC", "1")
    if budget is not None:
        monkeypatch.setattr(budgets, "PUBLIC_WORK_BYTES", budget)
        none_kept = SharedWork("question-evidence", questions.EVIDENCE_KEPT)  # computed again
        monkeypatch.setattr(questions, "_evidence", none_kept)
    asked: list[tuple[int | None, int | None]] = []  # each call's (batch_size, attention_budget)
    run = claims.question_evidence

    def counted(*a, **kw):
        asked.append((kw.get("batch_size"), kw.get("attention_budget")))
        return run(*a, **kw)

    monkeypatch.setattr(claims, "question_evidence", counted)
    at = open_app(page="explore")
    assert not at.exception
    if budget is not None or asked:  # past the public attention budget a text's trace is lazy (its rows recomputed)
        assert asked == [(batch, budgets.PUBLIC_ATTENTION_BUDGET)]
