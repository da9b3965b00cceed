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
import io
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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
        chunks, bad, blank, n = [], [], 0, 0
        if self.suffix == ".parquet":
            for row_id, group, row, text, problem in self._parquet():
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
            for row_id, group, row, text, problem in rows:
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

URI_TIMEOUT_S = 15.0  # a store that does not answer (no network, no credentials) is given up after this long
_ADVICE = "give this machine the store's network and credentials, or copy the file here and give its path"


def is_uri(text: str) -> bool:
    """``SCHEME://…`` (``s3://``, ``gs://``, ``file:///abs``, …): a corpus that :class:`DatasetCorpus` reads."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


@contextmanager
def _in_order():
    """Ray Data's blocks in the order of the file while this lasts (the global setting restored after)."""
    import ray.data

    options = ray.data.DataContext.get_current().execution_options
    before, options.preserve_order = options.preserve_order, True
    try:
        yield
    finally:
        options.preserve_order = before


@dataclass(frozen=True)
class DatasetCorpus(Corpus):
    """A corpus whose chunks carry their texts (:attr:`Chunk.texts`), for Ray: ``path`` as the user gave it, a
    URI that Ray Data reads with pyarrow's file systems (``s3://``, ``gs://``, ``file:///abs``…; ``ray.init``
    first) or a path on the driver's machine, which the local reader reads here (Ray deprecates ``local://``).

    The driver reads it once (:meth:`scan`) and the texts travel with the chunks, so the workers never open the
    corpus: no node needs a shared file system or the store's credentials. Rows, bad rows and their messages are
    :class:`Corpus`'s: a .txt or .jsonl file is read as bytes (``read_binary_files``)
    and cut at each ``\\n`` as the local reader does (``read_text`` would also cut at every Unicode line break and
    fail the whole read on one non-UTF-8 byte, ``read_json`` on one bad line); Parquet with ``read_parquet``, its
    text column only, in order. The digest is of the content (of a .txt or .jsonl, the local file's digest)."""

    def __post_init__(self):
        if not is_uri(self.path):
            return super().__post_init__()  # a local file: the local reader's checks
        if self.suffix not in FORMATS:
            raise BadData(f"{self.path}: unknown corpus format {Path(self.path).suffix!r}: give a .txt (one text a "
                          "line), .jsonl (a {\"text\": …} object a line) or .parquet file (a text column)")

    def check(self):
        """(path, file system) for Ray Data: the URI resolved here by pyarrow and found to be a file, within
        :data:`URI_TIMEOUT_S`, else BadData saying what to do (pyarrow alone may wait for long); None, None for a
        local path."""
        if not is_uri(self.path):
            return None, None
        import pyarrow.fs as pafs

        found: dict = {}

        def look():
            try:
                fs, path = pafs.FileSystem.from_uri(self.path)
                found["ok"] = fs, path, fs.get_file_info(path).type
            except Exception as exc:  # noqa: BLE001 - pyarrow's errors, said in one line below
                found["error"] = exc

        looking = threading.Thread(target=look, daemon=True)
        looking.start()
        looking.join(URI_TIMEOUT_S)
        if looking.is_alive():
            raise BadData(f"{self.path}: no answer within {URI_TIMEOUT_S:g} s: {_ADVICE}")
        if "error" in found:
            why = (str(found["error"]).strip().splitlines() or [type(found["error"]).__name__])[0]
            if why.startswith("Unrecognized filesystem type"):
                raise BadData(f"{self.path}: this machine cannot read {self.path.split('://')[0]}:// URIs: give an "
                              "s3://, gs://, file:/// URI (what pyarrow reads) or a local path")
            raise BadData(f"{self.path}: cannot be read here ({why.split('; Details')[0]}): {_ADVICE}")
        fs, path, kind = found["ok"]
        if kind != pafs.FileType.File:
            what = "a folder, not a file" if kind == pafs.FileType.Directory else "no such file"
            raise BadData(f"{self.path}: {what}: give a .txt (one text a line), .jsonl or .parquet corpus")
        return path, fs

    def digest(self) -> str:
        return self.scan(1).digest  # a whole read: scan's digest is the one to use

    def scan(self, size: int) -> Scan:
        """One read of the corpus by Ray Data: the chunks of ``size`` usable texts (each with its texts), the bad
        rows, the blank lines and the digest."""
        if not is_uri(self.path):  # here, by the local reader; each chunk then carries its texts
            plain = Corpus(self.path, self.field)
            found = plain.scan(size)
            found.chunks = [replace(c, texts=tuple(plain.read(c))) for c in found.chunks]
            return found
        import ray.data

        path, fs = self.check()
        import ray.util

        # read on this machine, which check() found could (its network and credentials), whatever the cluster:
        # a sliver of the resource every node has by its address (ray_remote_args' scheduling strategy is deprecated)
        here = {f"node:{ray.util.get_node_ip_address()}": 0.001}
        items: list[tuple[int, str]] = []
        bad, blank = [], 0
        if self.suffix == ".parquet":
            h = hashlib.sha256(f"{self.field}\0parquet\0".encode())
            try:
                ds = ray.data.read_parquet(path, filesystem=fs, resources=here)
                names, types = ds.schema().names, ds.schema().types
            except Exception as exc:  # noqa: BLE001 - Ray's or pyarrow's, in one line
                raise BadData(f"{self.path}: not a readable Parquet file ({_first_line(exc)})") from None
            if self.field not in names:
                raise BadData(f"{self.name}: no column {self.field!r} (it has {', '.join(names)}): name the text "
                              "column with --field")
            import pyarrow as pa

            kind = types[names.index(self.field)]
            if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
                raise BadData(f"{self.name}: column {self.field!r} holds {kind}, not text")
            row_id = 0
            with _in_order():
                for batch in ds.select_columns([self.field]).iter_batches(batch_size=READ_ROWS,
                                                                          batch_format="pyarrow"):
                    for text in batch.column(0).to_pylist():
                        h.update(b"\1" if text is None else text.encode() + b"\0")
                        if text is None or not text.strip():
                            bad.append(f"{self.name} row {row_id}: {self.field!r} is "
                                       + ("null" if text is None else "empty"))
                        else:
                            items.append((row_id, text))
                        row_id += 1
            digest = h.hexdigest()[:16]
        else:
            try:
                with _in_order():
                    data = ray.data.read_binary_files(path, filesystem=fs, resources=here).take(1)[0]["bytes"]
            except Exception as exc:  # noqa: BLE001 - Ray's or pyarrow's, in one line
                raise BadData(f"{self.path}: Ray Data could not read it ({_first_line(exc)}): {_ADVICE}") from None
            check_start(self.path, data[:4])  # UTF-16 or UTF-32: refused as a whole, as a local file is
            for number, _, text, problem in self._lines_of(io.BytesIO(data)):
                if problem:
                    bad.append(problem)
                elif text is None:
                    blank += 1
                else:
                    items.append((number, text))
            # as Corpus.digest: the same file read here or by its path checkpoints the same
            digest = hashlib.sha256(f"{self.field}\0{hashlib.sha256(data).hexdigest()}".encode()).hexdigest()[:16]
        chunks = [Chunk(i // size, items[i][0], len(items[i:i + size]), texts=tuple(items[i:i + size]))
                  for i in range(0, len(items), size)]
        return Scan(chunks, len(items), bad, blank, digest)

    def read(self, chunk: Chunk) -> list[tuple[int, str]]:
        """The chunk's texts, which it carries (the workers never open the corpus)."""
        return list(chunk.texts)


def _first_line(exc: BaseException) -> str:
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
    for (text_id, text), ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"]):
        for index, lo in enumerate(range(0, len(ids), room)):
            part, spans = ids[lo:lo + room], [tuple(o) for o in offsets[lo:lo + room]]
            piece = Piece(before + part + after, [(0, 0)] * len(before) + spans + [(0, 0)] * len(after),
                          [None] * len(before) + [0] * len(part) + [None] * len(after),
                          [0] * (len(before) + len(part) + len(after)))
            out.append(Window(text_id, index, text, piece, spans[0][0], spans[-1][1]))
    return out
