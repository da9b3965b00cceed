"""``python -m probes profile``: score every layer × head of a model with one probe (or all) over a
dataset, in checkpointed chunks. What each probe is (data, inputs, scoring, how chunks combine) is its
record (:mod:`probes.heads.registry`); this module runs the records and writes what they return.

The model runs here and nowhere else in the probes: :func:`traces` turns a chunk of a probe's items
into Traces through :mod:`probes.runner` (texts in batches, or the Encodings a probe builds itself),
and the probe's ``score`` reads them. The data is cut into chunks of ``checkpoint_every`` items; each
finished chunk's scores are written (atomically) to ``OUT.partial/``. A rerun with the same arguments
skips the chunks already there, so an interrupted run resumes without recomputing, but only chunks
computed from the same inputs: each probe's checkpoint folder is named by, and holds a manifest of, a
fingerprint of the items (their content, not the file name), the model's weights and tokenizer, the options that
change scores and the probes' code; a checkpoint from other inputs is removed, saying which of them
changed, and the run starts afresh (checkpoints, digests and writes: :mod:`probes.jobs`). With an executor
(``profile --probe ... --ray``: :func:`probes.corpus.ray_pool.executor`) the chunks not written yet run as
:class:`ProbeJob` s on Ray workers, each with the model it loaded, into the same checkpoints. The chunks are
then combined exactly by the probe's ``combine`` (:mod:`probes.heads.combine`). The final file (CSV,
JSON or Parquet, by extension) is written through a temporary file and a rename, so an interrupted run
never leaves a truncated output.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from .. import runner
from ..errors import NothingToScore
from ..jobs import bad_items, check_format, checkpoint, checkpointed, digest, with_model, write_table
from ..trace import Trace
from .engine import unattendable
from .registry import Probe, get

if TYPE_CHECKING:
    from ..seam import ModelLike


def traces(probe: Probe, model: ModelLike, items: list, batch_size: int = 16, backend: str = "eager",
           progress: Callable[[int], None] | None = None) -> Iterator[Trace]:
    """The Traces of a probe's ``items``, in order: its texts in batches of ``batch_size`` (each cut to
    the context window), or the Encodings it builds itself, one forward pass each; the from-scratch
    pass with ``backend`` where the model's family has one, Hugging Face's otherwise. ``progress(n)``
    is called with the number of items done after each Trace has been read."""
    if probe.encodings is None:
        yield from runner.batches(model, probe.texts(items), batch_size, source="auto", backend=backend,
                                  progress=progress)
        return
    for enc in probe.encodings(model, items):
        yield runner.forward(model, enc, source="auto", backend=backend, logits=False)
        if progress is not None:
            progress(enc.input_ids.shape[0])


def shortest_first(model: ModelLike, items: list, texts: list[str]) -> list:
    """``items`` ordered by the token count of their ``texts``, shortest first (a stable order): batched in
    this order, texts of like length share a batch and little of it is padding. The first 500 UD English-EWT
    dev sentences in their own order, 16 a batch, run 2.4× their real tokens through the model; shortest
    first, 1.06× (1.45× when sorted within chunks of 64, the CLI's checkpoints; by characters, 1.5×)."""
    if not texts:
        return list(items)
    ids = model.tokenizer(texts, truncation=True, max_length=model.max_tokens)["input_ids"]
    return [items[i] for i in sorted(range(len(items)), key=lambda i: len(ids[i]))]


def run_chunk(probe: Probe, model: ModelLike, items: list, batch_size: int = 16, backend: str = "eager",
              progress: Callable[[int], None] | None = None, watch: frozenset = frozenset()) -> pd.DataFrame:
    """One chunk: the probe's scores read from the Traces of its items. Items that run as texts go
    :func:`shortest_first`: a probe's scores sum over its items, in whatever order it is handed them
    (with their Traces in the same order). ``watch``: (label, layer, head)s whose score on each item alone is
    wanted too (a bootstrap over items needs them): their rows follow the chunk's, one per item, with the
    item's number in column ``item`` (−1 on the chunk's own rows; :func:`apart` separates them again)."""
    if probe.encodings is None:
        items = shortest_first(model, items, probe.texts(items))
    found: list[pd.DataFrame] = []
    read = traces(probe, model, items, batch_size, backend, progress)
    frame = probe.score(items, _watching(probe, items, read, watch, found) if watch else read)
    if not watch:
        return frame
    per_item = pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=[*WATCHED, "item"])
    return pd.concat([frame.assign(item=-1), per_item], ignore_index=True)


WATCHED = ["label", "layer", "head", "score", "n"]  # what an item's own row of a watched head keeps


def _watching(probe: Probe, items: list, read: Iterator[Trace], watch: frozenset,
              found: list[pd.DataFrame]) -> Iterator[Trace]:
    """``read`` (the chunk's Traces, in the items' order) passed on unchanged, each batch item scored alone on the
    way (the probe's own score, on that one item) and the rows of the ``watch`` ed heads kept in ``found``."""
    k = 0
    for trace in read:
        for i in range(trace.batch_size):
            alone = probe.score([items[k]], [(trace, i)])
            if len(alone):
                keys = pd.Series(list(zip(alone["label"].astype(str), alone["layer"], alone["head"], strict=True)),
                                 index=alone.index)
                kept = alone.loc[keys.isin(watch), WATCHED]
                if len(kept):
                    found.append(kept.assign(item=k))
            k += 1
        yield trace


def apart(frames: list[pd.DataFrame]) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """Chunk frames of a watched run (:func:`run_chunk`) -> the chunks' own frames (as an unwatched run gives them)
    and the watched heads' per-item rows, every chunk's together (``item`` numbered across the chunks)."""
    own, per_item, offset = [], [], 0
    for frame in frames:
        if "item" not in frame:
            own.append(frame)
            continue
        mine = frame["item"] < 0
        own.append(frame[mine].drop(columns="item").reset_index(drop=True))
        rows = frame.loc[~mine, [*WATCHED, "item"]].copy()
        rows["item"] += offset
        if len(rows):
            offset = int(rows["item"].max()) + 1
        per_item.append(rows)
    columns = [*WATCHED, "item"]
    return own, (pd.concat(per_item, ignore_index=True) if per_item else pd.DataFrame(columns=columns))


def run_probe(model: ModelLike, probe: str, limit: int | None = None, data: str | None = None, batch_size: int = 16,
              backend: str = "eager", progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One probe over its data (built-in by default), in memory: the same table ``profile`` writes,
    without files. ``progress(done, total)`` is called as items finish (the app's progress bar)."""
    record = get(probe)
    items = record.items(data, limit)
    step = counting(progress, len(items))
    frame = with_model(record.combine([run_chunk(record, model, items, batch_size, backend, step)], items), model)
    return noted(frame, left_out(record, items, model.is_causal))


def counting(progress: Callable[[int, int], None] | None, total: int) -> Callable[[int], None]:
    """A ``step(n)`` for :func:`run_chunk` (n more items done) that calls ``progress(done, total)``."""
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    return step


def code_version() -> str:
    """A digest of the probes' code (every module of ``probes/heads``, the runner they read Traces from and the
    checkpoints' code in :mod:`probes.jobs`): a checkpoint written by other code is not reused."""
    root = Path(__file__).resolve().parent
    files = sorted(root.glob("*.py")) + [root.parent / "jobs.py", root.parent / "runner.py", root.parent / "trace.py"]
    return digest(b"".join(f.name.encode() + f.read_bytes() for f in files))


def fingerprint(model: ModelLike, probe: Probe, items: list, data: str | None, checkpoint_every: int,
                backend: str) -> dict:
    """What a probe's checkpoint was computed from, part by part (a change in any one starts afresh)."""
    return {"data": digest(items), "model": model.fingerprint(), "tokenizer": model.tokenizer_fingerprint(),
            "code": code_version(), "options": digest([probe.name, data, checkpoint_every, backend])}


@dataclass(frozen=True)
class ProbeJob:
    """One chunk of a probe's items, picklable: what a Ray worker (:func:`probes.corpus.ray_pool.executor`) runs
    on the model it loaded, giving the chunk's scores (:func:`run_chunk`)."""

    probe: str
    index: int  # the chunk's number: its checkpoint is chunk-NNNNN.csv
    items: list
    batch_size: int = 16
    backend: str = "eager"
    watch: frozenset = frozenset()  # (label, layer, head)s scored on each item alone too (run_chunk)

    @property
    def label(self) -> str:
        return self.probe

    def __call__(self, model: ModelLike) -> pd.DataFrame:
        return run_chunk(get(self.probe), model, self.items, self.batch_size, self.backend, watch=self.watch)


def score_chunks(model: ModelLike, probe: Probe, items: list, folder: Path, batch_size: int = 16,
                 checkpoint_every: int = 64, backend: str = "eager", bar=None, executor=None,
                 notify: Callable[[str], None] | None = None,
                 watch: frozenset = frozenset()) -> list[pd.DataFrame]:
    """The chunk frames of ``items`` (checkpointed in ``folder``: a rerun reads back the chunks written), run here or
    by ``executor``'s workers; ``watch``: see :func:`run_chunk`."""
    elsewhere = resumed = None
    name = probe.name
    if executor is not None:  # the chunks not written yet, as ProbeJobs on the executor's workers
        elsewhere = lambda todo: executor(model, [ProbeJob(name, i, list(chunk), batch_size, backend,  # noqa: E731
                                                           frozenset(watch)) for i, chunk in todo])
        resumed = notify and (lambda message: notify(f"{name}: {message}"))  # (one process resumes without a note)
    return checkpointed(folder, items, checkpoint_every,
                        lambda chunk, step: run_chunk(probe, model, chunk, batch_size, backend, step, frozenset(watch)),
                        bar, run=elsewhere, notify=resumed)


def prepared(model: ModelLike, name: str, data: str | None, limit: int | None, out: Path, strict: bool,
             notify: Callable[[str], None] | None) -> tuple[Probe, list]:
    """A probe's record and its items, the bad ones reported (``OUT.bad.txt``; ``strict``: an error), the texts the
    context window cuts and the labels a decoder leaves out (:func:`left_out`) noted."""
    probe = get(name)
    items = probe.items(data, limit)
    source = data or probe.default_data  # None: a probe that makes its own inputs
    bad_items(name, source, items, out, strict, notify)
    if probe.encodings is None and source is not None:  # items read as texts (a probe with its own encodings is
        runner.note_cuts(name, model, source, probe.texts(items), notify)  # not cut by batches)
    if notify is not None:
        for note in left_out(probe, items, model.is_causal):
            notify(note)
    return probe, items


def left_out(probe: Probe, items: list, causal: bool) -> list[str]:
    """The note (a list of one, or none) naming the labels of a word-pair probe's ``items`` that a decoder cannot
    attend at all (the target after the query in every pair: ``det (dep→head)``), which a causal run leaves out."""
    labels = unattendable(probe.pairs(items), causal) if probe.pairs is not None and causal else []
    if not labels:
        return []
    shown = ", ".join(labels[:6]) + (f" and {len(labels) - 6} more" if len(labels) > 6 else "")
    return [f"{probe.name}: {len(labels)} label(s) left out: a decoder's query cannot attend to a later word, and in "
            f"every pair of these the target comes after the query ({shown})"]


def noted(frame: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """``frame`` carrying ``notes`` (``frame.attrs["notes"]``: what the app shows beside an in-memory run)."""
    frame.attrs["notes"] = list(notes)
    return frame


def scored(result: pd.DataFrame, probe: Probe, items: list, data: str | None) -> pd.DataFrame:
    """``result``, unless it is empty: then an error that says the data holds nothing this probe measures."""
    if result.empty:
        raise NothingToScore(f"{probe.name}: nothing to score in the {len(items)} usable item(s) of "
                             f"{data or probe.default_data} (they hold none of what this probe measures): give it "
                             "more, or other, data")
    return result


def _profile_one(model: ModelLike, name, data, limit, out, partial, batch_size, checkpoint_every, backend,
                 progress_factory, notify, strict, executor=None) -> pd.DataFrame:
    """One probe's table: its items (bad ones reported), its chunks (resumed from a matching checkpoint; run here,
    or by ``executor``), combined exactly."""
    probe, items = prepared(model, name, data, limit, out, strict, notify)
    folder = checkpoint(partial, name, fingerprint(model, probe, items, data, checkpoint_every, backend), notify)
    bar = progress_factory(len(items), name) if progress_factory else None
    parts = score_chunks(model, probe, items, folder, batch_size, checkpoint_every, backend, bar, executor, notify)
    return scored(probe.combine(parts, items), probe, items, data)


def profile(model: ModelLike, probes: list[str], data: str | None, limit: int | None, out: Path, batch_size: int = 16,
            checkpoint_every: int = 64, backend: str = "eager", progress_factory=None,
            notify: Callable[[str], None] | None = None, strict: bool = False, executor=None,
            one: Callable[..., pd.DataFrame] | None = None) -> pd.DataFrame:
    """Run the probes (by name, as the registry knows them) over ``data`` (each probe's default when
    None), checkpointing every ``checkpoint_every`` items under ``out.partial/``. ``notify(message)`` is
    told when a checkpoint from other inputs is dropped, and which bad items of the data were skipped
    (all of them are written to ``OUT.bad.txt``); ``strict`` makes any bad item an error listing them all.
    A probe left with no usable item is an error, never an empty table. ``executor`` (e.g.
    :func:`probes.corpus.ray_pool.executor`: ``executor(model, jobs)`` yields ``(index, scores)``) runs the chunks
    elsewhere, in the same checkpoints; None: here, one after another. ``one``: what makes one probe's table (the
    arguments of :func:`_profile_one`; :func:`probes.evidence.probes.profile` judges each label held out too)."""
    check_format(out)
    partial = out.with_name(out.name + ".partial")
    frames = []
    for name in probes:
        try:
            frames.append((one or _profile_one)(model, name, data, limit, out, partial, batch_size, checkpoint_every,
                                                backend, progress_factory, notify, strict, executor))
        except NothingToScore as exc:
            if len(probes) == 1:
                raise
            if notify:  # --probe all: the others still run
                notify(f"skipped {exc}")
    if not frames:
        raise NothingToScore(f"none of the probes ({', '.join(probes)}) had anything to score in {data}")
    frame = with_model(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0], model)
    write_table(frame, out)
    shutil.rmtree(partial, ignore_errors=True)
    return frame
