"""A corpus read by Ray Data (``profile --corpus URI --ray``): the texts read once on the driver, from a URI that
pyarrow's file systems open (``s3://``, ``gs://``, ``file:///abs``) or a local path, and carried by each chunk to
the workers (:class:`DatasetCorpus`). One of the modules that import Ray (the corpus's Ray backend, beside
:mod:`probes.corpus.ray_pool`); the rows, bad rows and digests are :class:`~probes.corpus.reader.Corpus`'s.
"""

from __future__ import annotations

import hashlib
import io
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ..datasets.utf8 import check_start
from ..errors import BadData
from .reader import FORMATS, READ_ROWS, Chunk, Corpus, Scan, first_line, is_uri

URI_TIMEOUT_S = 15.0  # a store that does not answer (no network, no credentials) is given up after this long
_ADVICE = "give this machine the store's network and credentials, or copy the file here and give its path"



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
                raise BadData(f"{self.path}: not a readable Parquet file ({first_line(exc)})") from None
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
                    for text in batch.column(0).to_pylist():  # type: ignore[union-attr]  # pyarrow, as asked
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
                raise BadData(f"{self.path}: Ray Data could not read it ({first_line(exc)}): {_ADVICE}") from None
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
