"""Reading a corpus run back for the app (probes/corpus/readback.py): a real run's top examples read back for
their model, every way a file can be wrong told with what to do, one model's rows of a several-model table,
and where an example's query lands when its context is opened as a text."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS_TEXTS as TEXTS

from probes.corpus import readback as rb
from probes.corpus.examples import COLUMNS
from probes.errors import BadData


@pytest.fixture()
def run(corpus_run):
    """The shared real run (conftest): its statistics as a table, its top examples as Parquet bytes."""
    stats, examples = corpus_run
    return pd.read_csv(io.BytesIO(stats)), examples


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return buf.getvalue()


def _refused(raw: bytes, model: str = "minilm", n_layers: int = 6, n_heads: int = 12) -> str:
    with pytest.raises(BadData) as err:
        rb.read_examples(raw, "top.parquet", model, n_layers, n_heads)
    return str(err.value)


def test_a_runs_top_examples_read_back_for_their_model(run, minilm):
    _, raw = run
    found = rb.read_examples(raw, "top.parquet", "minilm", minilm.n_layers, minilm.n_heads)
    written = pd.read_parquet(io.BytesIO(raw))
    assert len(found) == len(written) == 6 * 12 * 3  # every head keeps its 3 strongest
    assert found[["layer", "head", "rank"]].values.tolist() == \
        written.sort_values(["layer", "head", "rank"])[["layer", "head", "rank"]].values.tolist()
    head = found[(found["layer"] == 1) & (found["head"] == 2)]
    assert head["rank"].tolist() == [1, 2, 3] and head["weight"].is_monotonic_decreasing
    assert set(found["context"]) <= set(TEXTS)


def test_not_parquet_is_refused_with_what_to_upload():
    message = _refused(b"label,layer,head,score\nx,0,0,1\n")
    assert message.startswith("top.parquet: not a Parquet file (")
    assert "python -m probes profile --corpus FILE" in message and "FILE.examples.parquet" in message


def test_missing_columns_are_named(run):
    _, raw = run
    frame = pd.read_parquet(io.BytesIO(raw)).drop(columns=["context", "query_start"])
    message = _refused(_parquet(frame))
    assert "missing column(s) context, query_start" in message
    assert "must be written by `python -m probes profile --corpus FILE" in message


def test_no_rows_is_refused(run):
    _, raw = run
    message = _refused(_parquet(pd.read_parquet(io.BytesIO(raw)).iloc[:0]))
    assert message.startswith("top.parquet: no rows:") and "python -m probes profile --corpus FILE" in message


def test_examples_of_another_model_name_the_models_the_file_holds(run):
    _, raw = run
    frame = pd.read_parquet(io.BytesIO(raw))
    refused = _refused(_parquet(frame.assign(model="gpt2")))
    assert "no rows for minilm; it holds gpt2: select it in the sidebar" in refused
    two = pd.concat([frame.assign(model="gpt2"), frame.assign(model="smollm2")])
    assert "it holds gpt2, smollm2: select one of them in the sidebar" in _refused(_parquet(two))


def test_only_the_rows_of_the_model_are_returned(run):
    _, raw = run
    frame = pd.read_parquet(io.BytesIO(raw))
    other = frame.assign(model="tiny", layer=frame["layer"] + 20)  # a model with more layers than minilm
    found = rb.read_examples(_parquet(pd.concat([other, frame])), "top.parquet", "minilm", 6, 12)
    assert len(found) == len(frame) and set(found["model"]) == {"minilm"} and found["layer"].max() == 5


@pytest.mark.parametrize("col, value, expected", [
    ("layer", 6, "layer 6 is outside this model's layers (0–5)"),
    ("head", 12, "head 12 is outside this model's heads (0–11)"),
    ("head", -1, "head must be whole numbers from 0"),
])
def test_a_layer_or_head_outside_the_model_is_refused(run, col, value, expected):
    _, raw = run
    frame = pd.read_parquet(io.BytesIO(raw))
    frame.loc[7, col] = value
    assert expected in _refused(_parquet(frame))


@pytest.mark.parametrize("what, start, end", [("query", "query_start", "query_end"), ("key", "key_start", "key_end")])
def test_a_span_outside_its_context_names_the_row(run, what, start, end):
    _, raw = run
    frame = pd.read_parquet(io.BytesIO(raw))
    n = len(frame.loc[4, "context"])
    frame.loc[4, [start, end]] = [n - 1, n + 3]
    frame.loc[9, start] = -2
    message = _refused(_parquet(frame))
    assert message.startswith(f"top.parquet: row 5 (and 1 more): the {what} span {n - 1}–{n + 3} lies outside its "
                              f"context (a context of {n} characters): the file is damaged")


def test_a_missing_number_is_refused(run):
    _, raw = run
    frame = pd.read_parquet(io.BytesIO(raw)).astype({"weight": float})
    frame.loc[3, "weight"] = None
    assert "column 'weight' must hold a number in every row" in _refused(_parquet(frame))


def test_a_statistics_table_of_several_models_gives_the_selected_models_rows(run):
    stats, _ = run
    both = pd.concat([stats.assign(model="gpt2", layer=stats["layer"] + 6), stats])
    mine = rb.for_model(both, "stats.csv", "minilm", 6, 12)
    assert len(mine) == len(stats) and set(mine["model"]) == {"minilm"}
    with pytest.raises(BadData, match="no rows for smollm2; it holds gpt2, minilm: select one of them in the sidebar"):
        rb.for_model(both, "stats.csv", "smollm2", 30, 9)
    plain = stats.drop(columns="model")  # a table without a model column is the model's own, bounded by it
    assert len(rb.for_model(plain, "stats.csv", "minilm", 6, 12)) == len(stats)
    with pytest.raises(BadData, match="layer 5 is outside this model's layers"):
        rb.for_model(plain, "stats.csv", "minilm", 5, 12)


def test_query_index_finds_she_in_the_default_sentence(minilm):
    text = TEXTS[0]
    assert rb.query_index(minilm, text, text.index("she")) == 10  # the app's default query: "she"
    assert minilm.encode(text).tokens[0][10].text == "she"


def test_query_index_in_a_word_of_several_pieces(minilm):
    text = TEXTS[1]  # [CLS] un ##bel ##ie ##va ##bly , the token ##ization worked . [SEP]
    tokens = minilm.encode(text).tokens[0]
    assert rb.query_index(minilm, text, 0) == 1 and tokens[1].text == "un"
    assert rb.query_index(minilm, text, text.index("ization")) == 9 and tokens[9].text == "##ization"
    assert rb.query_index(minilm, text, text.index("ization") + 3) == 9  # inside the piece
    assert rb.query_index(minilm, text, text.index(" worked")) == 10  # a space: the token starting nearest
    assert rb.query_index(minilm, text, len(text) + 5) == 11  # past the end: the last token, not [SEP]


def test_every_example_of_a_run_opens_on_its_own_query_token(run, minilm):
    _, raw = run
    found = rb.read_examples(raw, "top.parquet", "minilm", 6, 12)
    for row in found.drop_duplicates(["context", "query_start", "query_token"]).itertuples():
        tokens = minilm.encode(row.context).tokens[0]
        token = tokens[rb.query_index(minilm, row.context, row.query_start, row.query_token)]
        assert (token.start, token.end, token.text) == (row.query_start, row.query_end, row.query_token)


def test_a_special_query_is_found_by_its_token(minilm):
    text = TEXTS[2]  # [CLS] the cat sat on the mat . [SEP]
    assert rb.query_index(minilm, text, 0, "[SEP]") == 8 and rb.query_index(minilm, text, 0, "[CLS]") == 0
    assert rb.query_index(minilm, text, 0, "the") == 1  # a word is found by its place, not its text


TEXT_COLUMNS = ("query_token", "key_token", "snippet", "context")


def _zeros(rows: int, context: str = "", dictionary: bool = True) -> pa.Table:
    """Every column of the top examples, ``rows`` rows of zeros, empty texts and one ``context`` for all, built
    without spending the memory they take once read: int8 zeros and one-entry dictionaries."""
    zeros = pa.array(np.zeros(rows, dtype=np.int8))
    indices = pa.array(np.zeros(rows, dtype=np.int32))
    columns = {c: pa.DictionaryArray.from_arrays(indices, pa.array([context if c == "context" else ""]))
               if c in TEXT_COLUMNS else zeros for c in COLUMNS}
    return pa.table({c: a.cast(pa.string()) if c in TEXT_COLUMNS and not dictionary else a for c, a in columns.items()})


def _written(table: pa.Table, **options) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", **options)
    return buf.getvalue()


def _unread(monkeypatch):
    """Reading Parquet's data made to fail the test: a bomb is refused from the footer, before any row is read."""
    def read(*args, **kwargs):
        raise AssertionError("the upload's rows were read")
    monkeypatch.setattr(pq, "read_table", read)
    monkeypatch.setattr(pd, "read_parquet", read)


def test_a_compression_bomb_of_a_million_zero_rows_is_refused_from_its_footer(monkeypatch):
    """The issue's bomb, smaller: a few kB of zstd that are a million rows once read (30 M grew the server by
    gigabytes)."""
    raw = _written(_zeros(1_000_000))
    assert len(raw) < 100_000
    _unread(monkeypatch)
    assert _refused(raw).startswith(f"top.parquet: 1,000,000 rows, more than the {rb.MAX_EXAMPLES:,} this app reads")


def test_more_bytes_once_decompressed_than_the_bound_are_refused_from_the_footer(monkeypatch):
    """Within the row bound, a file whose columns decompress past :data:`MAX_UNPACKED` (what the footer says of
    each column) is refused before a page is decompressed."""
    raw = _written(_zeros(40_000, "a" * 2000, dictionary=False), use_dictionary=False)  # 80 MB of "a"s
    assert len(raw) < 1_000_000
    _unread(monkeypatch)
    assert "top.parquet: 83 MB once decompressed, more than the 64 MB of top examples" in _refused(raw)


def test_one_context_repeated_in_every_row_is_measured_before_it_is_unpacked():
    """A dictionary holds a context once however many rows name it, so the footer's sizes are small; pandas would
    hold a copy a row (80 MB): the text is measured on the dictionary and refused."""
    raw = _written(_zeros(40_000, "a" * 2000), store_schema=False)  # its text read back as text, not categories
    assert "top.parquet: 80 MB of text in its rows, more than the 64 MB of top examples" in _refused(raw)
