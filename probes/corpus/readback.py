"""Reading a corpus run back, for the app: the top examples of ``python -m probes profile --corpus`` (Parquet,
:data:`~probes.corpus.examples.COLUMNS`) checked for the model they are shown on, the rows of one model of a
run's tables, and where an example's query lands when its context is opened as a text."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import BadData
from ..jobs import check_heads
from .examples import COLUMNS

if TYPE_CHECKING:
    from ..seam import ModelLike

WRITTEN_BY = "`python -m probes profile --corpus FILE --out FILE.csv` (its FILE.examples.parquet)"
SPANS = (("query", "query_start", "query_end"), ("key", "key_start", "key_end"))
TEXTS = ("query_token", "key_token", "snippet", "context", "model")  # read as Parquet keeps them: dictionaries

# an upload is checked from Parquet's footer (its schema, row count and the size of each column once decompressed)
# before any data is read, and its text is measured while still dictionary-encoded: a file of a few hundred kB of
# zstd can be 30 M zero rows, which read whole take the server gigabytes, and one context repeated in 10⁶ rows is a
# few bytes in a file. profile --corpus writes k rows per head (10 by default: 10,240 for a 1,024-head model, ~23 MB
# of text); what reading an upload within these bounds costs: benchmarks/upload_bombs.py (docs/app.md, "Uploads")
MAX_EXAMPLES = 100_000  # rows
MAX_FOOTER = 1 << 20  # bytes of the footer (schema and row groups): a run's is a few kB
MAX_UNPACKED = 64_000_000  # bytes of the columns read, decompressed, as the footer states them
MAX_TEXT = 64_000_000  # bytes of the text columns once each row has its own copy (as pandas holds them)


def for_model(frame: pd.DataFrame, name: str, model: str, n_layers: int, n_heads: int) -> pd.DataFrame:
    """The rows of ``model`` in a table of ``profile --corpus`` (its statistics or its top examples), whose
    layers and heads must all exist in that model. A table without a ``model`` column is taken as the
    model's own. No rows of ``model`` is :class:`BadData` naming the models the table holds."""
    if "model" in frame.columns:
        models = frame["model"].astype(str)
        if not (models == model).any():
            held = sorted(models.unique())
            which = "it" if len(held) == 1 else "one of them"
            raise BadData(f"{name}: no rows for {model}; it holds {', '.join(held)}: select {which} in the sidebar, "
                          f"or upload a file written for {model}")
        frame = frame[models == model]
    check_heads(frame, name, n_layers, n_heads)
    return frame.reset_index(drop=True)


def read_examples(raw: bytes, name: str, model: str, n_layers: int, n_heads: int) -> pd.DataFrame:
    """Top examples as ``profile --corpus`` writes them, read back and checked for ``model`` (its name, layers
    and heads): the rows of that model, ordered by layer, head and rank. Anything else is :class:`BadData`
    naming the file, what is wrong and what to do: not Parquet, missing columns, no rows, more rows or bytes than
    an upload may hold (:data:`MAX_EXAMPLES`, :data:`MAX_UNPACKED`, :data:`MAX_TEXT`: known from its footer and its
    dictionaries before the rows are unpacked), no rows of
    ``model``, a layer or head the model does not have, a query or key span outside its context (the first
    such row named by its place in the file)."""
    frame = _read_bounded(raw, name)
    spans = [c for _, *cols in SPANS for c in cols]
    for col in ["layer", "head", "rank", "weight", *spans]:
        if not pd.api.types.is_numeric_dtype(frame[col]) or frame[col].isna().any():
            raise BadData(f"{name}: column {col!r} must hold a number in every row: write the top examples again "
                          f"with {WRITTEN_BY}")
    frame = frame.assign(line=np.arange(1, len(frame) + 1))  # each row's place in the file, for messages
    frame = for_model(frame, name, model, n_layers, n_heads)
    length = frame["context"].map(lambda c: len(c) if isinstance(c, str) else -1)
    for what, start, end in SPANS:
        bad = (frame[start] < 0) | (frame[start] > frame[end]) | (frame[end] > length)
        if bad.any():
            row, size = frame[bad].iloc[0], int(length[bad].iloc[0])
            more = f" (and {int(bad.sum()) - 1} more)" if bad.sum() > 1 else ""
            context = "no context" if size < 0 else f"a context of {size} characters"
            raise BadData(f"{name}: row {int(row['line'])}{more}: the {what} span {int(row[start])}–{int(row[end])} "
                          f"lies outside its context ({context}): the file is damaged; write it again with "
                          f"{WRITTEN_BY}")
    frame = frame.drop(columns="line").sort_values(["layer", "head", "rank"], kind="stable")
    ints = ["layer", "head", "rank", *spans]
    frame[ints] = frame[ints].astype(int)
    return frame.reset_index(drop=True)


def _read_bounded(raw: bytes, name: str) -> pd.DataFrame:
    """The columns of :data:`COLUMNS` (and ``model``) of a Parquet upload, refused as :class:`BadData` from its
    footer alone when it is not Parquet, lacks a column, has no rows or more than :data:`MAX_EXAMPLES`, or would
    take more than :data:`MAX_UNPACKED` bytes decompressed; and, before pandas gives every row its own copy of its
    text, when that text would take more than :data:`MAX_TEXT` bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    again = f"write the top examples again with {WRITTEN_BY}"
    try:
        if len(raw) >= 12 and raw[-4:] == b"PAR1" and int.from_bytes(raw[-8:-4], "little") > MAX_FOOTER:
            raise BadData(f"{name}: its Parquet footer is {int.from_bytes(raw[-8:-4], 'little'):,} bytes, more than "
                          f"the {MAX_FOOTER:,} a file of top examples needs: {again}")
        meta = pq.ParquetFile(io.BytesIO(raw))
        names = meta.schema_arrow.names
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise BadData(f"{name}: missing column(s) {', '.join(missing)}: the top examples must be written by "
                          f"{WRITTEN_BY}")
        wanted = [*COLUMNS, *(["model"] if "model" in names else [])]
        rows = meta.metadata.num_rows
        if rows == 0:
            raise BadData(f"{name}: no rows: {again}")
        if rows > MAX_EXAMPLES:
            raise BadData(f"{name}: {rows:,} rows, more than the {MAX_EXAMPLES:,} this app reads (10 per head of ten "
                          f"large models): keep fewer examples per head (--top-k) or one model per file")
        groups = (meta.metadata.row_group(g) for g in range(meta.metadata.num_row_groups))
        unpacked = sum(col.total_uncompressed_size for rg in groups for col in map(rg.column, range(rg.num_columns))
                       if col.path_in_schema.split(".")[0] in wanted)
        if unpacked > MAX_UNPACKED:
            raise BadData(f"{name}: {-(-unpacked // 1_000_000):,} MB once decompressed, more than the "
                          f"{MAX_UNPACKED / 1e6:.0f} MB of top examples this app reads: {again}")
        table = pq.read_table(io.BytesIO(raw), columns=wanted, read_dictionary=[c for c in TEXTS if c in wanted])
    except (pa.ArrowException, ValueError, OSError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise BadData(f"{name}: not a Parquet file ({first}): upload the top examples written by {WRITTEN_BY}") \
            from None
    text = 0
    for i, field in enumerate(table.schema):  # read_dictionary keeps only text (Parquet's byte arrays) encoded
        if pa.types.is_dictionary(field.type):
            column = table.column(i)
            text += sum(pc.sum(pc.take(pc.binary_length(c.dictionary), c.indices)).as_py() or 0 for c in column.chunks)
            if text <= MAX_TEXT:
                table = table.set_column(i, field.name, column.cast(field.type.value_type))
        if text > MAX_TEXT:
            raise BadData(f"{name}: {-(-text // 1_000_000):,} MB of text in its rows, more than the "
                          f"{MAX_TEXT / 1e6:.0f} MB of top examples this app reads: {again}")
    return table.to_pandas()


def query_index(model: ModelLike, context: str, query_start: int, query_token: str | None = None) -> int:
    """Where an example's query lands when its ``context`` is opened as a text: the index, among the real
    tokens of ``model.encode(context)`` (special tokens included, as the app counts them), of the first
    non-special token whose span holds character ``query_start``; if none does, the non-special token that
    starts nearest to it. A query that is a special token ([CLS], [SEP], BOS: no span, so ``query_start``
    cannot say which) is found by its ``query_token``. A context longer than the model's window (never one
    ``profile --corpus`` wrote) is cut to it."""
    enc = model.encode(context, truncate=True)
    real = [t for t, keep in zip(enc.tokens[0], enc.attention_mask[0].tolist(), strict=True) if keep]
    special = [i for i, t in enumerate(real) if t.special and t.text == query_token]
    if special:
        return special[0]
    words = [(i, t) for i, t in enumerate(real) if not t.special]
    for i, t in words:
        if t.start <= query_start < t.end:
            return i
    return min(words, key=lambda it: (abs(it[1].start - query_start), it[0]))[0] if words else 0
