"""``python -m probes profile --corpus FILE``: label-free statistics of every head over a corpus, and each
head's top examples, in checkpointed chunks, on this process or on Ray.

A chunk (:class:`~probes.corpus.reader.Chunk`) is the unit of everything: a :class:`CorpusJob` reads its texts,
cuts them into windows, runs them through the model (:mod:`probes.runner`, the from-scratch pass where the
family has one) and reads the Traces twice over, in one pass: the positional statistics
(:func:`probes.heads.positional.positional_scores`: entropy, distance, sink share, previous, self,
special, punctuation, Voita's fixed offset, each with the uniform baseline) and the top examples
(:mod:`probes.corpus.examples`). Jobs run where an *executor* says: :func:`in_process`, or
:func:`probes.corpus.ray_pool.executor` (a pool of Ray actors). Either way this module writes each finished
chunk to the checkpoint (examples first, then the statistics, which mark it done), so a rerun skips the
chunks already there, whoever computed them, and the combined result is the same: statistics by
``n``-weighted means and summed offset histograms, examples by one fixed ranking.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from .. import runner
from ..attention_math import probability_bytes
from ..errors import NothingToScore
from ..heads.combine import mean
from ..heads.engine import token_attention
from ..heads.positional import merge_histograms, positional_scores
from ..heads.profile import code_version
from ..jobs import checkpoint, report_bad, with_model, write_file, write_table
from . import examples as ex
from .reader import Chunk, Corpus, Window, check_window, cut

if TYPE_CHECKING:
    from ..seam import ModelLike

PROBE = "corpus"
ATTENTION_BUDGET = 2**28  # bytes of attention probabilities a batch may hold (256 MiB); over it a Trace is lazy
combine_stats = mean(extra=merge_histograms)


def score_windows(model: ModelLike, windows: list[Window], k: int = 10, batch_size: int = 16, backend: str = "eager",
                  budget: int = ATTENTION_BUDGET) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The statistics table and the top ``k`` examples per head of some windows. Windows run shortest
    first, in batches of at most ``batch_size`` whose attention fits ``budget`` bytes (one long window alone
    may exceed it: its Trace is then lazy)."""
    order = sorted(range(len(windows)), key=lambda i: len(windows[i].piece.ids))
    batches: list[list[int]] = []
    for i in order:
        grown = batches[-1] + [i] if batches else [i]
        width = len(windows[i].piece.ids)
        if batches and len(grown) <= batch_size and probability_bytes(model, len(grown), width) <= budget:
            batches[-1] = grown
        else:
            batches.append([i])

    def traces():
        for batch in batches:
            enc = model.batch([windows[i].piece for i in batch], [windows[i].text for i in batch])
            yield runner.forward(model, enc, source="auto", backend=backend, logits=False, attention_budget=budget)

    found = ex.Collector(k)
    flat = [i for batch in batches for i in batch]

    def observed():
        for i, (tokens, attn) in zip(flat, token_attention(traces()), strict=True):
            found.add(windows[i], tokens, attn)
            yield tokens, attn

    stats = positional_scores(observed(), causal=model.is_causal, probe=PROBE)
    return stats, found.result()


@dataclass(frozen=True)
class CorpusJob:
    """One chunk's work, picklable: what a Ray worker receives (the corpus path and where the chunk starts, or,
    from a :class:`~probes.corpus.ray_data.DatasetCorpus`, the chunk's texts)."""

    corpus: Corpus
    chunk: Chunk
    window: int
    k: int
    batch_size: int = 16
    backend: str = "eager"

    @property
    def index(self) -> int:
        return self.chunk.index

    def __call__(self, model: ModelLike) -> tuple[pd.DataFrame, pd.DataFrame]:
        windows = cut(model, self.corpus.read(self.chunk), self.window)
        return score_windows(model, windows, self.k, self.batch_size, self.backend)


# (model, jobs) -> (index, result) of each job once, in any order (a retried Ray task is the executor's to drop)
Executor = Callable[["ModelLike", list[CorpusJob]], Iterator[tuple[int, tuple[pd.DataFrame, pd.DataFrame]]]]


def in_process(model: ModelLike, jobs: list[CorpusJob]) -> Iterator[tuple[int, tuple[pd.DataFrame, pd.DataFrame]]]:
    """Run the jobs here, one after another."""
    for job in jobs:
        yield job.index, job(model)


def corpus_code() -> str:
    """A digest of the code the corpus results come from (the probes' and this package's)."""
    root = Path(__file__).resolve().parent
    files = sorted(root.glob("*.py")) + [root.parent / "models.py"]
    return hashlib.sha256(code_version().encode() + b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def fingerprint(model: ModelLike, scan, field: str, window: int, chunk_size: int, k: int, backend: str) -> dict:
    """What a model's checkpoint was computed from: the corpus (its digest, read once by ``scan``), the model
    (its config and weights, and its tokenizer, which cuts the corpus into the windows scored), the code and the
    options."""
    options = repr([field, window, chunk_size, k, backend, ex.KEYS_PER_QUERY, ex.MIN_WEIGHT])
    return {"data": scan.digest, "model": model.fingerprint(), "tokenizer": model.tokenizer_fingerprint(),
            "code": corpus_code(), "options": hashlib.sha256(options.encode()).hexdigest()[:16]}


def examples_path(out: Path) -> Path:
    """Where the top examples go by default: beside the table, ``NAME.examples.parquet``."""
    return out.with_name(out.stem + ".examples.parquet")


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return buf.getvalue()


def _one_model(model: ModelLike, corpus: Corpus, scan, out: Path, window: int, chunk_size: int, k: int, batch_size: int,
               backend: str, executor: Executor, progress_factory, notify) -> tuple[pd.DataFrame, pd.DataFrame]:
    partial = out.with_name(out.name + ".partial")
    name = f"{PROBE}-{re.sub(r'[^A-Za-z0-9._-]+', '_', model.name)[-60:]}"
    folder = checkpoint(partial, name, fingerprint(model, scan, corpus.field, window, chunk_size, k, backend), notify)
    done = lambda c: folder / f"chunk-{c:05d}.csv"  # noqa: E731  (written last: the chunk is done)
    found = lambda c: folder / f"chunk-{c:05d}.examples.parquet"  # noqa: E731
    jobs = [CorpusJob(corpus, c, window, k, batch_size, backend) for c in scan.chunks if not done(c.index).is_file()]
    if notify and len(jobs) < len(scan.chunks):
        notify(f"{model.name}: resuming from {folder}: {len(scan.chunks) - len(jobs)} of {len(scan.chunks)} chunks "
               "done already")
    bar = progress_factory(len(scan.chunks), model.name) if progress_factory else None
    try:
        if bar:
            bar.update(len(scan.chunks) - len(jobs))
        for index, (stats, examples) in executor(model, jobs):
            write_file(found(index), _parquet(examples))
            write_file(done(index), stats.to_csv(index=False).encode())
            if bar:
                bar.update(1)
    finally:
        if bar:
            bar.close()
    chunks = [c.index for c in scan.chunks]
    stats = combine_stats([pd.read_csv(done(c)) for c in chunks], [])
    examples = ex.strongest([pd.read_parquet(found(c)) for c in chunks], k)[ex.COLUMNS]
    if stats.empty:
        raise NothingToScore(f"{corpus.name}: no text of it gave {model.name} a token to score")
    return with_model(stats, model), with_model(examples, model)


def profile_corpus(models: Sequence[ModelLike], corpus: Corpus, out: Path, examples_out: Path | None = None,
                   window: int = 128, chunk_size: int = 64, k: int = 10, batch_size: int = 16, backend: str = "eager",
                   executor: Executor = in_process, progress_factory=None,
                   notify: Callable[[str], None] | None = None,
                   strict: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Profile every head of each model (loaded :class:`~probes.models.LocalModel` s) over ``corpus``: one table of
    statistics for all of them (written to ``out``: CSV, JSON or Parquet) and the top ``k`` examples per head
    (``examples_out``, Parquet; default :func:`examples_path`). Chunks of ``chunk_size`` texts are checkpointed
    under ``OUT.partial/``; ``executor`` runs them (here, or on Ray). Bad rows are reported like ``profile``'s
    bad items (``notify`` and ``OUT.bad.txt``; ``strict``: an error listing them all)."""
    examples_out = examples_out or examples_path(out)
    for model in models:  # a window that cannot be, refused before any work
        check_window(model, window)
    scan = corpus.scan(chunk_size)
    report_bad("corpus", corpus.path, scan.bad, scan.texts, out, strict, notify)
    tables, found = [], []
    for model in models:
        stats, examples = _one_model(model, corpus, scan, out, window, chunk_size, k, batch_size, backend, executor,
                                     progress_factory, notify)
        tables.append(stats)
        found.append(examples)
    table = pd.concat(tables, ignore_index=True)
    examples = pd.concat(found, ignore_index=True)
    write_file(examples_out, _parquet(examples), "--examples")
    write_table(table, out)
    shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
    return table, examples

