"""The Heads page with a corpus run uploaded, driven headless by AppTest: the selected head's top examples (with
the run's table or without it), a clicked example opening on Explore at its query, one model's rows of a
several-model table, and bad uploads answered with a message."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from apptest import (
    open_app,
    rerun as _rerun,
    run_probe as _run_probe,
    said,
    specs as _specs,
    texts,
    titles as _titles,
    upload as _upload,
)
from numeric import F64, fp32

from dashboard.app_pages.heads import charts, view
from dashboard.core import budgets, charts as core_charts, grid_charts, ui
from dashboard.core.words import said as said_as
from probes.corpus import readback


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return buf.getvalue()


def _uploads(at, examples: bytes | None = None, table: bytes | None = None, name: str = "stats.examples.parquet"):
    """On the Heads page: "Upload a table", then the run's examples and/or table."""
    if at.segmented_control(key="heads_how").value != "Upload a table":
        at.segmented_control(key="heads_how").set_value("Upload a table")
        _rerun(at)
    if table is not None:
        at.file_uploader(key="probe_upload").set_value(("stats.csv", table, "text/csv"))
    if examples is not None:
        at.file_uploader(key="examples_upload").set_value((name, examples, "application/octet-stream"))
    return _rerun(at)


def _examples_table(at) -> pd.DataFrame:
    tables = [d for d in at.dataframe if d.key == "heads_examples"]
    assert len(tables) == 1, "no table of top examples"
    return tables[0].value


@pytest.mark.numeric
def test_the_selected_heads_examples_open_on_explore_at_their_query(corpus_run, minilm):
    _, raw = corpus_run
    expected = readback.read_examples(raw, "x", "minilm", 6, 12)
    expected = expected[(expected["layer"] == 1) & (expected["head"] == 9)].reset_index(drop=True)
    at = _uploads(open_app(page="heads", layer=1, head=9), raw)
    assert [s.value for s in at.subheader] == ["Top examples of head 1.9"]
    assert "The head is the one selected in the sidebar" in texts(at.caption)  # no table: the sidebar picks it
    shown = _examples_table(at)
    assert list(shown.columns) == ["rank", "weight", "query_token", "key_token", "snippet"]
    assert shown["rank"].tolist() == [1, 2, 3] and shown["snippet"].tolist() == expected["snippet"].tolist()
    assert shown["weight"].tolist() == expected["weight"].tolist()  # read from the same Parquet file

    # a click on a row (AppTest sets the dataframe's selection state) opens its context on Explore; the row
    # picked has its query inside a word of several pieces (e.g. "##ie" of "Unbelievably")
    pick = int(expected.index[expected["query_token"].str.startswith("##")][-1])
    row = expected.iloc[pick]
    at.session_state["heads_examples"] = {"selection": {"rows": [pick], "columns": [], "cells": []}}
    _rerun(at)
    assert at.header[0].value == "minilm: layer 1, head 9"  # Explore's heading: the same head
    assert at.sidebar.text_area[0].value == row["context"] and at.sidebar.text_input[0].value == ""
    tokens = minilm.encode(row["context"]).tokens[0]
    query = at.selectbox(key="w_query").value
    assert (tokens[query].start, tokens[query].end, tokens[query].text) == \
        (row["query_start"], row["query_end"], row["query_token"])
    assert f"Where '{query}: {row['query_token']}' looks" in _titles(at)
    assert query != 10 and at.query_params["query"] in (str(query), [str(query)])  # (10: the default, not in links)

    # back on Heads (through the app's own page switch), the upload is still there to pick another example
    at.session_state["goto"] = "heads"
    _rerun(at)
    assert at.segmented_control(key="heads_how").value == "Upload a table"
    assert at.subheader[0].value == "Top examples of head 1.9" and len(_examples_table(at)) == 3
    assert at.button(key="examples_upload_forget").label == "Forget stats.examples.parquet (uploaded earlier)"
    at.button(key="examples_upload_forget").click()
    _rerun(at)
    assert not at.subheader and not at.dataframe  # forgotten


def test_removing_the_upload_removes_its_examples(corpus_run):
    _, raw = corpus_run
    at = _uploads(open_app(page="heads", layer=0, head=0), raw)
    assert at.subheader[0].value == "Top examples of head 0.0"
    at.file_uploader(key="examples_upload").set_value(None)
    _rerun(at)
    assert not at.subheader and not at.dataframe
    assert not [b for b in at.button if b.key == "examples_upload_forget"]  # removed, not kept


def test_a_runs_table_of_several_models_shows_the_selected_ones_beside_its_examples(corpus_run):
    table, raw = corpus_run
    stats = pd.read_csv(io.BytesIO(table))
    both = pd.concat([stats, stats.assign(model="gpt2", layer=stats["layer"] + 6)]).to_csv(index=False).encode()
    at = _uploads(open_app(page="heads", layer=0, head=7), raw, both)
    assert not at.error
    grid = [t for t in said(at) if "click a cell" in t]
    assert grid, said(at)
    whole = next(d for d in at.dataframe if d.key != "heads_examples").value
    assert "model" not in whole and whole["layer"].max() == 5  # only the selected model's rows…
    assert "model: minilm" in texts(at.caption)  # …the same in every row: said once above the table
    best = at.selectbox(key="w_label").value
    assert best == charts.best_label(stats) and best in ("previous", "offset-1")  # the label that gains most
    assert [s.value for s in at.subheader] == ["Top examples of head 0.7", "Does the model use these heads?",
                                               f"Every head: {ui.safe(said_as(best))}, by score"]
    assert "The head is the one selected in the sidebar" not in texts(at.caption)  # the grid is there
    assert len(_examples_table(at)) == 3
    at.sidebar.slider(key="w_head").set_value(3)
    _rerun(at)
    assert at.subheader[0].value == "Top examples of head 0.3"  # the examples follow the sidebar

    only_other = stats.assign(model="gpt2").to_csv(index=False).encode()
    at = _uploads(at, table=only_other)
    assert "stats.csv: no rows for minilm; it holds gpt2: select it in the sidebar" in texts(at.error)
    assert len(_examples_table(at)) == 3  # the examples still show


def test_bad_examples_are_messages_not_tracebacks(corpus_run):
    _, raw = corpus_run
    frame = pd.read_parquet(io.BytesIO(raw))
    at = _uploads(open_app(page="heads", layer=1, head=2), _parquet(frame.assign(model="gpt2")), name="gpt2.parquet")
    assert "gpt2.parquet: no rows for minilm; it holds gpt2: select it in the sidebar" in texts(at.error)
    assert not [d for d in at.dataframe if d.key == "heads_examples"]

    at = _uploads(at, b"rank,weight\n1,0.5\n", name="notes.parquet")
    assert "notes.parquet: not a Parquet file" in texts(at.error)

    no_head = frame[(frame["layer"] != 1) | (frame["head"] != 2)]
    at = _uploads(at, _parquet(no_head), name="some.parquet")
    assert not at.error
    assert "Head 1.2 has no examples in some.parquet." in texts(at.info)


def test_upload_bombs_are_refused_with_a_message_before_they_are_read(monkeypatch):
    """The issue's two bombs, smaller: a CSV whose header names 100,000 columns and a Parquet of a million zero rows
    in a few kB (zstd). Each is answered in the page from its first bytes or its footer, and pandas never reads
    either file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def unread(*args, **kwargs):
        raise AssertionError("the upload was read")

    at = open_app(page="heads")
    monkeypatch.setattr(pd, "read_csv", unread)
    monkeypatch.setattr(pq, "read_table", unread)
    wide = ("label,layer,head,score," + ",".join(f"c{i}" for i in range(100_000)) + "\nx,0,0,0.5\n").encode()
    zeros = pa.array(pd.Series([0] * 1_000_000, dtype="int8"))
    buf = io.BytesIO()
    pq.write_table(pa.table({c: zeros for c in readback.COLUMNS}), buf, compression="zstd")
    at = _uploads(at, buf.getvalue(), wide, name="zeros.parquet")
    said = texts(at.error)
    assert "stats.csv: the header line is longer than 4,096 bytes" in said
    assert "zeros.parquet: 1,000,000 rows, more than the 100,000 this app reads" in said
    assert not at.get("vega_lite_chart") and not [d for d in at.dataframe if d.key == "heads_examples"]


@pytest.mark.numeric
def test_importance_beside_a_probe_grid(minilm, monkeypatch):
    """Run a probe, then "Compute importance": a second grid with the library's importance of every head over the
    same sentences, and an importance column in the table."""
    import numpy as np

    from probes.datasets import catalog
    from probes.effects.importance import importance

    monkeypatch.setattr(view, "IMPORTANCE_ITEMS", 4)
    at = open_app(page="heads")
    at.selectbox(key="w_probe").set_value("positional")
    at.number_input(key="w_items").set_value(5)
    at.button[0].click()
    _rerun(at)
    assert "Does the model use these heads?" in [s.value for s in at.subheader]
    at.button(key="heads_importance").click()
    _rerun(at)
    sentences = catalog.texts(catalog.read_items("ewt-dev")[:4])
    expected = importance(minilm, sentences, ablation=False)
    grid = [c for c in at.get("vega_lite_chart") if "gradient: hidden" in c.proto.spec]
    assert grid, "no importance grid"
    table = at.dataframe[0].value
    joined = table.merge(expected, on=["layer", "head"], suffixes=("", "_lib"))
    # the app runs with fewer threads (probes.threads): each gate's gradient, a sum of tokens × d_head products, is
    # summed in another order; importances are normalised to ≤ 1 in each layer
    terms = minilm.encode(sentences, truncate=True).input_ids.shape[1] * minilm.d_head
    assert len(joined) == 72 and np.allclose(joined["importance"], joined["score_lib"], atol=fp32(terms), rtol=0)
    assert "Spearman" in texts(at.caption)


def test_cancel_stops_the_importance_run_and_shows_the_button_again(monkeypatch):
    """Issue 44: importance's progress bar has a Cancel button. Cancelled at its first batch, no grid is drawn
    and nothing is kept (the button is back); pressed again, it runs every sentence and draws its grid."""
    from apptest import cancel_at_first_update


    monkeypatch.setattr(view, "IMPORTANCE_ITEMS", 3)  # a count no other test's table is kept for
    shown = cancel_at_first_update(monkeypatch, "importance")
    at = open_app(page="heads")
    at.selectbox(key="w_probe").set_value("positional")
    at.number_input(key="w_items").set_value(5)
    at.button[0].click()
    _rerun(at)
    at.button(key="heads_importance").click()
    _rerun(at)
    assert not [c for c in at.get("vega_lite_chart") if "gradient: hidden" in c.proto.spec], shown
    assert [b.key for b in at.button if b.key == "heads_importance"] and shown == [0.0, 1.0]  # one batch of 3
    at.button(key="heads_importance").click()
    _rerun(at)
    assert [c for c in at.get("vega_lite_chart") if "gradient: hidden" in c.proto.spec], "no importance grid"
    assert shown[2:] == [0.0, 1.0]


def test_heads_page_runs_a_probe_and_reads_an_uploaded_table():
    at = _run_probe("positional", 5)
    # the label "previous", in words, and its verdict (2 of 5 items held out: too few to judge)
    assert "previous token · too few to judge" in at.selectbox(key="w_label").options
    table = at.dataframe[0].value
    assert len(table) == 72 and table["score"].is_monotonic_decreasing
    at = _upload(open_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score\nsyntactic,nsubj,1,2,0.9\nsyntactic,nsubj,0,0,0.1\n")
    assert list(at.dataframe[0].value["score"]) == [0.9, 0.1]
    grid = [s for s in _specs(at) if "click a cell" in str(s.get("title"))][0]
    assert [p["name"] for p in grid["params"]] == ["head"] and grid["params"][0]["select"]["on"] == "click"
    at.file_uploader(key="probe_upload").set_value(("bad.csv", b"a,b\n1,2\n", "text/csv"))
    _rerun(at)
    assert "missing column(s) label, layer, head, score" in texts(at.error)


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
    assert len(at.dataframe[0].value) == 72 and "self: score above or below" in " ".join(t for t in _titles(at) if t)
    shared = open_app(page="heads", probe="positional", items=6, label="self")  # the link, in a new session
    assert shared.selectbox(key="w_label").value == "self" and len(shared.dataframe[0].value) == 72
    bad = open_app(page="heads", probe="nonsense", items=99999)
    assert "There is no probe 'nonsense' here" in texts(bad.warning)
    assert "The link asks for 99,999 items; this app runs 5 to 2,000: set to 2,000" in texts(bad.warning)
    assert bad.selectbox(key="w_probe").value == "positional" and bad.number_input(key="w_items").value == 2000
    assert not bad.dataframe  # what the link asked for is not here: nothing else is run in its name


def test_a_probe_table_written_for_another_model_is_refused(minilm, tmp_path):
    from probes.heads import profile

    profile.profile(minilm, ["positional"], "ewt-dev", 5, tmp_path / "minilm.csv")
    at = _upload(open_app(page="heads", model="smollm2"), "minilm.csv", (tmp_path / "minilm.csv").read_bytes())
    assert "minilm.csv: no rows for smollm2; it holds minilm: select it in the sidebar" in texts(at.error)
    assert not [s for s in _specs(at) if "click a cell" in str(s.get("title"))]  # nothing drawn in the wrong frame


def test_heads_grid_opens_on_the_label_that_gains_most_and_warns_on_few_examples():
    at = _upload(open_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score,baseline,n\nsyntactic,acl,0,0,0.9,0.85,12\n"
                 b"syntactic,nsubj,0,1,0.8,0.3,12\nsyntactic,nsubj,1,0,0.35,0.3,12\n")
    assert at.selectbox(key="w_label").value == "nsubj"  # 0.5 above its baseline; acl only 0.05
    assert "nsubj: score above or below its baseline 0.3" in _titles(at)  # "click a cell to open it" below it
    assert "Only 12 examples behind these scores, and no label here has 30 or more: a head's score" in texts(at.warning)


def test_heads_grid_opens_on_a_label_with_enough_examples_and_counts_them_in_english():
    at = _upload(open_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score,baseline,n\nsyntactic,parataxis,0,0,0.9,0.2,1\n"
                 b"syntactic,nsubj,0,1,0.6,0.3,38\nsyntactic,nsubj,1,0,0.35,0.3,38\n")
    assert at.selectbox(key="w_label").value == "nsubj"  # parataxis gains more, over one example
    assert "parataxis" in at.selectbox(key="w_label").options and not texts(at.warning)
    at.selectbox(key="w_label").set_value("parataxis")  # any label can still be picked
    _rerun(at)
    assert "Only 1 example behind these scores: below 30, a head's score moves by chance" in texts(at.warning)


def test_a_syntactic_run_opens_on_a_relation_with_thirty_examples_or_more():
    """50 sentences of the built-in treebank: the label that gains most (expl, 5 examples) is not the one opened."""
    at = _run_probe("syntactic", 50)
    table, label = at.session_state["probe_tables"][("minilm", "syntactic", 50)], at.selectbox(key="w_label").value
    assert table.loc[table["label"].astype(str) == label, "n"].min() >= 30, label  # the run's own counts
    assert not texts(at.warning) and len(at.selectbox(key="w_label").options) > 40  # the rest can still be picked


def test_an_upload_is_bounded_by_the_model_before_anything_is_drawn(monkeypatch):
    """A head far past the model's is refused before any grid is built (it used to build a million-row grid, for
    minutes): every grid the page asks for is written down here, and none is (not timed)."""

    at = open_app(page="heads")
    grids: list[tuple] = []  # each grid's arguments

    def head_grid(*args, **kwargs):
        grids.append(args)
        return _no_grid()

    monkeypatch.setattr(grid_charts, "head_grid", head_grid)
    _upload(at, "huge.csv", b"label,layer,head,score\nx,1000000,0,0.5\n")
    assert "layer 1000000 is outside this model's layers (0–5)" in texts(at.error)
    assert not at.get("vega_lite_chart") and grids == []


def _no_grid():
    raise AssertionError("a grid was built")


@pytest.mark.numeric
def test_several_models_share_one_colour_scale(corpus_run):
    """A table of two models: the sidebar's grid spans the larger reach of the two, and says so."""
    table, _ = corpus_run
    stats = pd.read_csv(io.BytesIO(table))
    other = stats.assign(model="gpt2", score=stats["baseline"] + 3 * (stats["score"] - stats["baseline"]))
    both = pd.concat([stats, other]).to_csv(index=False).encode()
    at = _uploads(open_app(page="heads"), table=both)
    label = at.selectbox(key="w_label").value
    grid = [s for s in _specs(at) if "click a cell" in str(s.get("title"))][0]
    domain = grid["layer"][0]["encoding"]["color"]["scale"]["domain"]
    rows = stats[stats["label"] == label]
    mine = float((rows["score"] - rows["baseline"]).abs().max())
    # float64: the app's (b + 3(s − b)) − b, read back from CSV, against 3(s − b): a few roundings of values ≤ 3
    assert domain[1] == pytest.approx(3 * mine, abs=F64, rel=0) and domain[0] == -domain[1]
    assert "One colour scale" in texts(at.caption) and "gpt2" in texts(at.caption)
    alone = _uploads(open_app(page="heads"), table=table)
    grid = [s for s in _specs(alone) if "click a cell" in str(s.get("title"))][0]
    assert grid["layer"][0]["encoding"]["color"]["scale"]["domain"][1] == mine  # the same arithmetic on the same CSV


def test_the_sink_share_has_its_own_grid_on_a_fixed_share_scale():
    at = _run_probe("positional", 5)
    assert "attention sink (first token) · too few to judge" in at.selectbox(key="w_label").options
    assert at.selectbox(key="w_label").value != "sink"
    at.selectbox(key="w_label").set_value("sink")
    _rerun(at)
    grid = [s for s in _specs(at) if "click a cell" in str(s.get("title"))][0]
    title = " ".join(core_charts.title_lines(grid["title"]["text"])
                     + core_charts.title_lines(grid["title"]["subtitle"]))
    assert "attention sink (first token)" in title
    assert "share of attention from 0 to 1; uniform attention gives" in title
    color = grid["layer"][0]["encoding"]["color"]
    assert color["field"] == "score" and color["scale"]["domain"] == [0, 1]  # not a gain over the baseline
    captions = texts(at.caption)
    assert "the sink share: the weight on the first token" in captions and "not against a baseline" in captions
    table = at.dataframe[0].value
    assert len(table) == 72 and table["score"].between(0, 1).all()


def test_the_heads_table_says_constant_columns_once_shows_no_none_and_its_csv_keeps_raw_names(monkeypatch):
    """An uploaded table whose model, probe, label, baseline and count are the same on every row and whose offset is
    missing on some: the table shows the columns that differ, in words, with "—" for a missing value (no "None",
    no "nan"); the rest is said once above it. The CSV download is the table as it came: raw names, every column."""
    import streamlit as st

    saved = {}
    button = st.download_button

    def keep(label, data, *args, **kwargs):
        saved[label] = data() if callable(data) else data
        return button(label, data, *args, **kwargs)

    monkeypatch.setattr(st, "download_button", keep)
    csv = (b"model,probe,label,layer,head,score,baseline,n,offset\nminilm,positional,offset-1,0,0,0.9,0.2,40,\n"
           b"minilm,positional,offset-1,0,1,0.5,0.2,40,1\nminilm,positional,offset-1,1,0,0.1,0.2,40,\n")
    at = _upload(open_app(page="heads"), "mine.csv", csv)
    assert list(at.selectbox(key="w_label").options) == ["previous token (1 token back)"]  # not "offset-1"
    table = at.dataframe[0].value
    assert list(table.columns) == ["layer", "head", "score", "most attended offset"]
    assert list(table["most attended offset"]) == ["—", "1", "—"]
    cells = table.astype(str).to_numpy().ravel().tolist()
    assert not {"None", "nan", "NaN", "<NA>"} & set(cells)
    assert ("In every row: model: minilm; probe: positional; label: previous token (1 token back); baseline: 0.2; "
            "examples: 40.") in texts(at.caption)
    whole = pd.read_csv(io.BytesIO(saved["Whole table (CSV)"]))
    assert list(whole.columns) == ["model", "probe", "label", "layer", "head", "score", "baseline", "n", "offset"]
    assert set(whole["label"]) == {"offset-1"}


def test_an_upload_with_a_huge_label_is_refused_before_anything_is_drawn():
    """A CSV whose one label is 1 MB froze the browser's tab for minutes (the label went into the menu and the title):
    it is refused with its line, and no chart or menu carries it."""
    csv = b"label,layer,head,score\nx,0,0,0.5\n" + b"y" * 2**20 + b",1,1,0.5\n"
    at = _upload(open_app(page="heads"), "big.csv", csv)
    assert "big.csv line 3: a label of 1,048,576 characters; labels are at most 200" in texts(at.error)
    assert not at.get("vega_lite_chart") or all(len(c.proto.spec) < 100_000 for c in at.get("vega_lite_chart"))
    assert all(len(str(o)) <= 200 for s in at.selectbox for o in s.options)


@pytest.fixture(scope="module")
def million_rows() -> bytes:
    """A probe table of 10⁶ rows for minilm (6 layers × 12 heads): every head of 13,875 labels, and 1,000 rows of one
    label, "many", that repeat its 72 heads (12 MB, built as text)."""
    return ("label,layer,head,score\n" + "".join(
        f"{f'label-{i // 72}' if i < 999_000 else 'many'},{(i % 72) // 12},{i % 12},0.{i % 9973:04d}\n"
        for i in range(1_000_000))).encode()


def _bounded(at) -> None:
    """No error, a grid, and what went to the browser bounded: every table's and chart's rows, every menu."""
    from apptest import rows as chart_rows


    assert not at.error, texts(at.error)
    assert [s for s in _specs(at) if "click a cell" in str(s.get("title"))], "no grid"
    assert all(len(d.value) <= view.TOP for d in at.dataframe) and at.dataframe
    assert all(len(s.options) <= view.MENU for s in at.selectbox)
    assert len(chart_rows(at, "click a cell")) <= 72


def test_a_million_row_table_is_summarised_on_the_server(million_rows):
    """A 10⁶-row upload (12 MB) froze the tab for tens of seconds on an older main, and was then refused: it is read
    on the server, which sends one label's grid, its top rows and a bounded menu; "Find a label" reaches any label."""

    at = _upload(open_app(page="heads"), "big.csv", million_rows)
    _bounded(at)
    assert "The menu offers 300 of 13,876 labels: type part of a label in Find a label" in texts(at.caption)
    at.text_input(key="heads_label_find").set_value("many")
    _rerun(at)
    assert "many" in at.selectbox(key="w_label").options
    at.selectbox(key="w_label").set_value("many")
    _rerun(at)
    _bounded(at)
    assert f"Showing the top {view.TOP} of 1,000 rows; download the whole table (CSV) for all." in texts(at.caption)
    assert "928 rows of this label repeat a head: the grid shows the first row of each head" in texts(at.warning)
    assert at.dataframe[0].value["score"].is_monotonic_decreasing  # the top rows, best first


def test_a_table_of_more_than_two_million_rows_is_refused_with_its_count():
    at = _upload(open_app(page="heads"), "huge.csv", b"label,layer,head,score\n" + b"x,0,0,0.5\n" * 2_000_001)
    assert "huge.csv: 2,000,001 rows, more than the 2,000,000 a table shown here may have" in texts(at.error)
    assert not at.get("vega_lite_chart")


def test_each_labels_head_is_judged_on_held_out_items_and_the_page_opens_on_a_supported_one():
    """A run's table carries each label's head chosen on half of the items and its verdict on the other half: the
    page opens on the supported label with the largest held-out gain, says its verdict in green above the grid, and
    marks every label in the menu; a label whose head is not supported says so, not in green."""
    from dashboard.app_pages.heads.charts import chosen_rows, supported_label

    at = _run_probe("syntactic", 100)
    table = at.session_state["probe_tables"][("minilm", "syntactic", 100)]
    chosen = chosen_rows(table).set_index("label")
    best = supported_label(table)
    assert at.selectbox(key="w_label").value == best and chosen.loc[best, "verdict"] == "supported"
    row = chosen.loc[best]
    assert f"head {int(row['layer'])}.{int(row['head'])}, chosen on half of the items (split seed 0) and judged on " \
           f"the other half: {row['said']}." in texts(at.success)
    options = at.selectbox(key="w_label").options
    assert any(o.endswith(" · ✓ supported") for o in options) and any(o.endswith(" · no supported head")
                                                                       for o in options)
    weak = next(label for label in chosen.index if chosen.loc[label, "verdict"] == "baseline")
    at.selectbox(key="w_label").set_value(weak)
    _rerun(at)
    assert "no head of minilm is shown to do it" in texts(at.warning) and not texts(at.success)


def test_an_old_table_without_verdicts_says_it_has_none():
    at = _upload(open_app(page="heads"), "old.csv",
                 b"probe,label,layer,head,score,baseline,n\nsyntactic,nsubj,1,2,0.9,0.3,40\n"
                 b"syntactic,nsubj,0,0,0.1,0.3,40\n")
    assert "This table has no held-out verdicts" in texts(at.caption) and not texts(at.success)


def test_a_decoders_run_says_which_directions_it_leaves_out_and_never_offers_them():
    """smollm2 cannot attend from a determiner to its later noun: "det (dep→head)" is not in the menu, and the
    page says which directions were left out and why; "det (head→dep)" is."""
    at = open_app(model="smollm2", page="heads")
    at.selectbox(key="w_probe").set_value("syntactic")
    at.number_input(key="w_items").set_value(12)  # (what is left out is the model's doing, not the items')
    at.button[0].click()
    _rerun(at)
    assert "label(s) left out: a decoder's query cannot attend to a later word" in texts(at.caption)
    options = " | ".join(at.selectbox(key="w_label").options)
    assert "det, determiner (head → dependent)" in options and "det, determiner (dependent → head)" not in options


def test_a_public_probe_run_traces_a_few_sentences_at_a_time(monkeypatch):
    # a trace keeps every head's probabilities: on a public app a run's batches stay within its memory budget

    from probes.evidence import probes as judged

    monkeypatch.setenv("PROBES_PUBLIC", "1")
    asked: list[int | None] = []  # each run's batch size
    run = judged.run_probe

    def counted(*a, **kw):
        asked.append(kw.get("batch_size"))
        return run(*a, **kw)

    monkeypatch.setattr(judged, "run_probe", counted)
    at = open_app(page="heads", probe="positional", items=7)
    assert asked == [budgets.PUBLIC_PROBE_BATCH] == [4]
    assert len(at.dataframe[0].value) == 72  # the whole table, as with batches of 16


def test_the_link_copied_after_a_run_runs_it_again_where_it_is_opened():
    """After "Run" with the page's default probe, the address bar's link names the run (ran=heads; the probe is the
    default, so it is not spelled out): opened in a new session it shows the same table, with no Run pressed."""
    at = _run_probe("positional", 5)
    table = at.dataframe[0].value
    link = {k: v for k, v in at.query_params.items()}
    assert link.get("ran") in ("heads", ["heads"]) and "probe" not in link
    shared = open_app(**{k: v[-1] if isinstance(v, list) else v for k, v in link.items()})
    assert shared.dataframe and shared.dataframe[0].value.equals(table)
    assert shared.number_input(key="w_items").value == 5


def test_cancel_stops_the_probe_run_and_run_it_again_runs_it(monkeypatch):
    """Issue 61: a probe run cancelled at its first items draws no table and says so; Run it again runs the probe
    (as Run does, every item on the bar) and draws its table, not only clears the message."""
    from apptest import cancel_at_first_update

    shown = cancel_at_first_update(monkeypatch, "heads")
    at = _run_probe("positional", 6)  # a count no other test's table is kept for
    assert "The positional run was cancelled: nothing of it is shown or kept." in texts(at.info)
    assert not [d for d in at.dataframe if "score" in d.value.columns] and 0 < shown[-1] < 1
    at.button(key="again_heads").click()
    _rerun(at)
    assert "was cancelled" not in texts(at.info)
    table = next(d.value for d in at.dataframe if "score" in d.value.columns)
    assert len(table) == 72 and shown[-1] == 1.0
    assert "Held-out: items kept aside while a head is chosen, then used only to judge it" in texts(at.caption)
