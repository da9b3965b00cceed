"""A corpus file, read as a stream, and cut into model-sized windows.

Three formats, by extension:

* ``.txt``: one text a line (blank lines are skipped); a text's id is its line number (from 1);
* ``.jsonl``: one JSON object a line with the text in a string field (``text``, or ``field=``); id: the line
  number. A line that is not JSON, not an object, lacks the field or holds no text is a bad row, reported
  with its line number and reason;
* ``.parquet``: a string column (``text``, or ``field=``), read in record batches, never whole; id: the row
  number (from 0). An empty or null cell is a bad row.

A .txt or .jsonl file is UTF-8 (:mod:`probes.datasets.utf8`, as for ``--data``): a UTF-8 byte-order mark is
dropped, a file that starts with a UTF-16 or UTF-32 one is refused as a whole, and a line that is not UTF-8 (or
holds a NUL) is a bad row naming its byte.

The file is never read into memory whole. One streaming pass (:meth:`Corpus.scan`) counts the usable texts,
collects the bad rows and notes where every ``size`` usable texts start (a byte offset, or a Parquet row group
and row): those are the :class:`Chunk` s, the unit of work, checkpointing and of the Ray pipeline. A worker
reads just its chunk (:meth:`Corpus.read`), so only the corpus path travels, not the texts. A
:class:`DatasetCorpus` (``--ray``) is read once by the driver instead (a URI by Ray Data): its chunks carry their
texts, so no worker opens the corpus.

Windows (:func:`cut`), the stated rule: each text is tokenised without special tokens and its tokens are cut
into consecutive, non-overlapping pieces of ``window − s`` tokens, where ``s`` is the number of special
tokens the model's tokenizer wraps a text in ([CLS] … [SEP] for BERT: 2; SmolLM2 and GPT-2: 0); each piece
is wrapped in those special tokens. So every window holds at most ``window`` tokens, a text shorter than
that is one window, nothing is dropped, and no token is seen twice.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..datasets.cache import sha256_of
from ..datasets.utf8 import check_start, decode_line
from ..errors import BadData, BadOption
from ..models import Piece

FORMATS = (".txt", ".jsonl", ".parquet")
READ_ROWS = 1024  # Parquet rows read at a time


@dataclass(frozen=True)
class Chunk:
    """``count`` usable texts of the corpus starting at text id ``first``: at byte ``offset`` of a text or
    JSONL file, or at row ``row`` of row group ``group`` of a Parquet file."""

    index: int
    first: int
    count: int
    offset: int = 0
    group: int = 0
    row: int = 0
    texts: tuple[tuple[int, str], ...] = ()  # a DatasetCorpus's chunk carries its (text id, text) pairs


@dataclass
class Scan:
    """What one pass over the corpus found: its chunks, the number of usable texts, the bad rows (each a
    line naming its place and reason) and the blank lines skipped."""

    chunks: list[Chunk]
    texts: int
    bad: list[str] = field(default_factory=list)
    blank: int = 0
    digest: str = ""  # the corpus's digest (Corpus.digest), read once for every model of a run


@dataclass(frozen=True)
class Corpus:
    path: str
    field: str = "text"

    def __post_init__(self):
        path = Path(self.path)
        if not path.is_file():
            what = "a folder, not a file" if path.is_dir() else "no such file"
            raise BadData(f"{self.path}: {what}: give a .txt (one text a line), .jsonl or .parquet corpus")
        if self.suffix not in FORMATS:
            raise BadData(f"{self.path}: unknown corpus format {path.suffix!r}: give a .txt (one text a line), "
                          ".jsonl (a {\"text\": …} object a line) or .parquet file (a text column)")
        if self.suffix != ".parquet":
            with open(path, "rb") as f:
                check_start(self.path, f.read(4))  # UTF-16 or UTF-32 (a byte-order mark): refused as a whole

    @property
    def suffix(self) -> str:
        return Path(self.path).suffix.lower()

    @property
    def name(self) -> str:
        return Path(self.path).name

    def digest(self) -> str:
        """sha256 of the file's bytes (streamed) and of the field read: a checkpoint is valid only for it."""
        return hashlib.sha256(f"{self.field}\0{sha256_of(Path(self.path))}".encode()).hexdigest()[:16]

    # -- one text at a time ------------------------------------------------------------------------------
    def _line(self, number: int, raw: bytes) -> str | None:
        """The text of one line, None for a blank line; a bad line raises BadData naming it."""
        line = decode_line(self.name, number, raw)  # not UTF-8, or a NUL: BadData naming the byte
        if not line.strip():
            return None
        if self.suffix == ".txt":
            return line.rstrip("\r\n")
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadData(f"{self.name} line {number}: not JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise BadData(f"{self.name} line {number}: a JSON {type(obj).__name__}, not an object with a "
                          f"{self.field!r} field")
        if self.field not in obj:
            raise BadData(f"{self.name} line {number}: no {self.field!r} field (it has {', '.join(map(repr, obj))})")
        text = obj[self.field]
        if not isinstance(text, str):
            raise BadData(f"{self.name} line {number}: {self.field!r} is a {type(text).__name__}, not text")
        if not text.strip():
            raise BadData(f"{self.name} line {number}: {self.field!r} is empty")
        return text

    def _lines(self, offset: int = 0, first: int = 1) -> Iterator[tuple[int, int, str | None, str | None]]:
        """(line number, byte offset, text or None, bad-row reason or None) from ``offset`` on."""
        with open(self.path, "rb") as f:
            f.seek(offset)
            yield from self._lines_of(f, offset, first)

    def _lines_of(self, f, offset: int = 0, first: int = 1) -> Iterator[tuple[int, int, str | None, str | None]]:
        """:meth:`_lines` of an open binary stream ``f``, positioned at ``offset``."""
        number, position = first, offset
        for raw in f:
            text = raw.removeprefix(codecs.BOM_UTF8) if position == 0 else raw  # a UTF-8 byte-order mark
            try:
                yield number, position, self._line(number, text), None
            except BadData as exc:
                yield number, position, None, str(exc)
            number += 1
            position += len(raw)

    def _parquet(self, group: int = 0) -> Iterator[tuple[int, int, int, str | None, str | None]]:
        """(row id, row group, row within it, text or None, bad-row reason or None) from ``group`` on."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as exc:
            raise BadData(f"{self.name}: not a readable Parquet file ({exc})") from None
        schema = pf.schema_arrow
        if self.field not in schema.names:
            raise BadData(f"{self.name}: no column {self.field!r} (it has {', '.join(schema.names)}): name the text "
                          "column with --field")
        kind = schema.field(self.field).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise BadData(f"{self.name}: column {self.field!r} holds {kind}, not text")
        row_id = sum(pf.metadata.row_group(g).num_rows for g in range(group))
        for g in range(group, pf.metadata.num_row_groups):
            row = 0
            for batch in pf.iter_batches(batch_size=READ_ROWS, row_groups=[g], columns=[self.field]):
                for text in batch.column(0).to_pylist():
                    if text is None or not text.strip():
                        yield row_id, g, row, None, f"{self.name} row {row_id}: {self.field!r} is " + (
                            "null" if text is None else "empty")
                    else:
                        yield row_id, g, row, text, None
                    row_id += 1
                    row += 1

    # -- the whole file, then one chunk -------------------------------------------------------------------
    def scan(self, size: int) -> Scan:
        """One streaming pass: the chunks of ``size`` usable texts, the bad rows, the blank lines."""
        chunks: list[Chunk] = []
        bad: list[str] = []
        blank, n = 0, 0
        if self.suffix == ".parquet":
            for row_id, group, row, _text, problem in self._parquet():
                if problem:
                    bad.append(problem)
                    continue
                if n % size == 0:
                    chunks.append(Chunk(len(chunks), row_id, 0, group=group, row=row))
                n += 1
        else:
            for number, offset, text, problem in self._lines():
                if problem:
                    bad.append(problem)
                    continue
                if text is None:
                    blank += 1
                    continue
                if n % size == 0:
                    chunks.append(Chunk(len(chunks), number, 0, offset=offset))
                n += 1
        sized = [Chunk(c.index, c.first, min(size, n - c.index * size), c.offset, c.group, c.row) for c in chunks]
        return Scan(sized, n, bad, blank, self.digest())

    def read(self, chunk: Chunk) -> list[tuple[int, str]]:
        """The (text id, text) pairs of one chunk, read from where it starts (bad rows skipped as in scan)."""
        out: list[tuple[int, str]] = []
        if self.suffix == ".parquet":
            rows = self._parquet(chunk.group)
            for row_id, group, row, text, _problem in rows:
                if group == chunk.group and row < chunk.row:
                    continue
                if text is not None:
                    out.append((row_id, text))
                if len(out) == chunk.count:
                    break
        else:
            for number, _, text, _ in self._lines(chunk.offset, chunk.first):
                if text is not None:
                    out.append((number, text))
                if len(out) == chunk.count:
                    break
        if len(out) != chunk.count or (out and out[0][0] != chunk.first):
            raise BadData(f"{self.name} changed while it was read (chunk {chunk.index} starts at text {chunk.first} "
                          f"with {chunk.count} texts): rerun on a file that stays put")
        return out


# -- a corpus that Ray Data reads -------------------------------------------------------------------------------

def is_uri(text: str) -> bool:
    """``SCHEME://…`` (``s3://``, ``gs://``, ``file:///abs``, …): a corpus that :class:`DatasetCorpus` reads."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


def first_line(exc: BaseException) -> str:
    """The last non-empty line of an error's message (where Ray and pyarrow say what went wrong), or its type."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


# -- windows -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """One window of a text: its tokens (special ones included), each token's character span in the text,
    and the character span ``start:end`` of the text it covers."""

    text_id: int
    index: int  # which window of its text, from 0
    text: str  # the whole text (the spans point into it)
    piece: Piece
    start: int
    end: int

    @property
    def context(self) -> str:
        return self.text[self.start:self.end]


def wrapping(model) -> tuple[list[int], list[int]]:
    """The special tokens the model's tokenizer puts before and after one text, e.g. ([CLS], [SEP])."""
    enc = model.tokenizer("a", add_special_tokens=True)
    ids, seq = enc["input_ids"], enc.sequence_ids()
    inside = [i for i, s in enumerate(seq) if s is not None]
    return ids[:inside[0]], ids[inside[-1] + 1:]


def check_window(model, window: int) -> tuple[list[int], list[int], int]:
    """The model's special tokens before and after a text, and the room a window of ``window`` tokens leaves
    for text; BadOption when it leaves none or exceeds the model's context window."""
    before, after = wrapping(model)
    room = window - len(before) - len(after)
    if room < 1:
        raise BadOption(f"--window {window} leaves no room for text besides {model.name}'s "
                        f"{len(before) + len(after)} special tokens: give a larger window")
    if window > model.max_tokens:
        raise BadOption(f"--window {window} is longer than {model.name}'s context window of {model.max_tokens} "
                        f"tokens: give at most {model.max_tokens}")
    return before, after, room


def cut(model, texts: list[tuple[int, str]], window: int) -> list[Window]:
    """The windows of the texts, in order (see the module's rule)."""
    before, after, room = check_window(model, window)
    if not texts:
        return []
    enc = model.tokenizer([t for _, t in texts], add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for (text_id, text), ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"], strict=True):
        for index, lo in enumerate(range(0, len(ids), room)):
            part, spans = ids[lo:lo + room], [tuple(o) for o in offsets[lo:lo + room]]
            piece = Piece(before + part + after, [(0, 0)] * len(before) + spans + [(0, 0)] * len(after),
                          [None] * len(before) + [0] * len(part) + [None] * len(after),
                          [0] * (len(before) + len(part) + len(after)))
            out.append(Window(text_id, index, text, piece, spans[0][0], spans[-1][1]))
    return out
