"""``python -m probes profile``: score every layer × head of a model with one probe (or all) over a
dataset, in checkpointed chunks. What each probe is (data, inputs, scoring, how chunks combine) is its
record (:mod:`probes.heads.registry`); this module runs the records and writes what they return.

The model runs here and nowhere else in the probes: :func:`traces` turns a chunk of a probe's items
into Traces through :mod:`probes.runner` (texts in batches, or the Encodings a probe builds itself),
and the probe's ``score`` reads them. The data is cut into chunks of ``checkpoint_every`` items; each
finished chunk's scores are written (atomically) to ``OUT.partial/``. A rerun with the same arguments
skips the chunks already there, so an interrupted run resumes without recomputing, but only chunks
computed from the same inputs: each probe's checkpoint folder is named by, and holds a manifest of, a
fingerprint of the items (their content, not the file name), the model's weights, the options that
change scores and the probes' code; a checkpoint from other inputs is removed, saying which of them
changed, and the run starts afresh. The chunks are
then combined exactly by the probe's ``combine`` (:mod:`probes.heads.combine`). The final file (CSV,
JSON or Parquet, by extension) is written through a temporary file and a rename, so an interrupted run
never leaves a truncated output.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from .. import runner
from ..datasets.cache import write_atomic
from ..errors import BadData, CannotWrite, NothingToScore
from ..trace import Trace
from .registry import Probe, get


def traces(probe: Probe, model, items: list, batch_size: int = 16, backend: str = "eager",
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


def shortest_first(model, items: list, texts: list[str]) -> list:
    """``items`` ordered by the token count of their ``texts``, shortest first (a stable order): batched in
    this order, texts of like length share a batch and little of it is padding. The first 500 UD English-EWT
    dev sentences in their own order, 16 a batch, run 2.4× their real tokens through the model; shortest
    first, 1.06× (1.45× when sorted within chunks of 64, the CLI's checkpoints; by characters, 1.5×)."""
    if not texts:
        return list(items)
    ids = model.tokenizer(texts, truncation=True, max_length=model.max_tokens)["input_ids"]
    return [items[i] for i in sorted(range(len(items)), key=lambda i: len(ids[i]))]


def run_chunk(probe: Probe, model, items: list, batch_size: int = 16, backend: str = "eager",
              progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """One chunk: the probe's scores read from the Traces of its items. Items that run as texts go
    :func:`shortest_first`: a probe's scores sum over its items, in whatever order it is handed them
    (with their Traces in the same order)."""
    if probe.encodings is None:
        items = shortest_first(model, items, probe.texts(items))
    return probe.score(items, traces(probe, model, items, batch_size, backend, progress))


def run_probe(model, probe: str, limit: int | None = None, data: str | None = None, batch_size: int = 16,
              backend: str = "eager", progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One probe over its data (built-in by default), in memory: the same table ``profile`` writes,
    without files. ``progress(done, total)`` is called as items finish (the app's progress bar)."""
    record = get(probe)
    items = record.items(data, limit)
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, len(items))

    return with_model(record.combine([run_chunk(record, model, items, batch_size, backend, step)], items), model)


def with_model(frame: pd.DataFrame, model) -> pd.DataFrame:
    """A probe table that knows its model: its name and its layer and head counts, in every row (so a table
    shown beside another model is refused, not drawn in the wrong frame)."""
    return frame.assign(model=model.name, n_layers=model.n_layers, n_heads=model.n_heads)


MAX_SCORE = 1e6  # probe scores are fractions, counts or entropies: anything bigger is not a probe table


def read_table(raw: bytes, name: str, n_layers: int | None = None, n_heads: int | None = None) -> pd.DataFrame:
    """A probe table as ``profile`` writes it (CSV), read back and checked: it needs the columns
    ``label, layer, head, score`` with finite scores; with ``n_layers``/``n_heads`` (the model it is shown
    for), every layer and head must exist in that model. Anything else is ``BadData`` naming the file and
    what is wrong, before anything is built from it."""
    try:
        frame = pd.read_csv(io.BytesIO(raw))
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise BadData(f"{name}: not a CSV table ({str(exc).splitlines()[0]})") from None
    missing = [c for c in ("label", "layer", "head", "score") if c not in frame.columns]
    if missing:
        raise BadData(f"{name}: missing column(s) {', '.join(missing)}: upload a table written by "
                      "`python -m probes profile --out FILE.csv`")
    if frame.empty:
        raise BadData(f"{name}: no rows")
    for col in ("layer", "head", "score"):
        if not pd.api.types.is_numeric_dtype(frame[col]):
            raise BadData(f"{name}: column {col!r} holds non-numbers")
    frame = frame.dropna(subset=["layer", "head"])
    check_heads(frame, name, n_layers, n_heads)
    scores = frame["score"].dropna()
    if scores.empty:
        raise BadData(f"{name}: the score column is empty")
    if not np.isfinite(scores).all() or (scores.abs() > MAX_SCORE).any():
        raise BadData(f"{name}: scores must be finite numbers up to {MAX_SCORE:g} in size")
    frame[["layer", "head"]] = frame[["layer", "head"]].astype(int)
    return frame.reset_index(drop=True)


def check_heads(frame: pd.DataFrame, name: str, n_layers: int | None = None, n_heads: int | None = None) -> None:
    """Every ``layer`` and ``head`` of a table is a whole number from 0 and, with ``n_layers``/``n_heads`` (the
    model it is shown for), one that model has; else ``BadData`` naming the file and what to do."""
    for col, n in (("layer", n_layers), ("head", n_heads)):
        values = frame[col]
        if (values < 0).any() or (values % 1).any():
            raise BadData(f"{name}: {col} must be whole numbers from 0")
        if n is not None and (values >= n).any():
            raise BadData(f"{name}: {col} {int(values.max())} does not exist in this model ({col}s 0–{n - 1}): "
                          "upload a table written for the model selected in the sidebar")


FORMATS = (".csv", ".json", ".parquet")  # what a probe table is written as, by the extension of --out


def _check_format(out: Path) -> None:
    if out.suffix.lower() not in FORMATS:
        raise BadData(f"{out}: write .csv, .json or .parquet")


def check_out(out: Path, force: bool = False) -> None:
    """Refuse, before any work, an output path that cannot be the result: a folder, an existing file
    (unless ``force``), an unknown format, a folder that cannot be written."""
    if out.is_dir():
        raise CannotWrite(f"--out {out} is a folder: give a file name ending in .csv, .json or .parquet")
    _check_format(out)
    if out.exists() and not force:
        raise CannotWrite(f"--out {out} exists: pass --force to replace it, or choose another file")
    parent = next((p for p in (out.resolve().parent, *out.resolve().parents) if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise CannotWrite(f"cannot write in {parent or out.parent}: choose another --out")


def _write(path: Path, data: bytes) -> None:
    try:
        write_atomic(path, data)
    except OSError as exc:  # a full disk, a folder made read-only meanwhile…
        raise CannotWrite(f"could not write {path}: {exc.strerror or exc}; free some space or choose another "
                          "--out (a rerun resumes from the chunks already written)") from None


def write_table(frame: pd.DataFrame, out: Path) -> None:
    """CSV, JSON (records) or Parquet by extension, written atomically."""
    _check_format(out)
    suffix = out.suffix.lower()
    if suffix == ".csv":
        data = frame.to_csv(index=False).encode()
    elif suffix == ".json":
        data = frame.to_json(orient="records", indent=1).encode()
    else:  # .parquet
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        data = buf.getvalue()
    _write(out, data)


def _digest(value) -> str:
    return hashlib.sha256(value if isinstance(value, bytes) else repr(value).encode()).hexdigest()[:16]


def code_version() -> str:
    """A digest of the probes' code (every module of ``probes/heads`` and the runner they read Traces from):
    a checkpoint written by other code is not reused."""
    root = Path(__file__).resolve().parent
    files = sorted(root.glob("*.py")) + [root.parent / "runner.py", root.parent / "trace.py"]
    return _digest(b"".join(f.name.encode() + f.read_bytes() for f in files))


def fingerprint(model, probe: Probe, items: list, data: str | None, checkpoint_every: int, backend: str) -> dict:
    """What a probe's checkpoint was computed from, part by part (a change in any one starts afresh)."""
    return {"data": _digest(items), "model": model.fingerprint(), "code": code_version(),
            "options": _digest([probe.name, data, checkpoint_every, backend])}


def _checkpoint(partial: Path, name: str, print_: dict, notify) -> Path:
    """The checkpoint folder of this probe's run; folders of the same probe made from other inputs are
    removed, and ``notify`` is told which inputs differ."""
    folder = partial / f"{name}-{_digest(sorted(print_.items()))}"
    for other in sorted(partial.glob(f"{name}-*")) if partial.is_dir() else []:
        if other == folder:
            continue
        try:
            before = json.loads((other / "manifest.json").read_text())
            changed = [part for part in print_ if before.get(part) != print_[part]] or ["inputs"]
        except (OSError, ValueError):
            changed = ["inputs (no readable manifest)"]
        if notify:
            notify(f"{name}: the checkpoint in {other} was computed from another {', '.join(changed)}: "
                   "starting afresh")
        shutil.rmtree(other, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "manifest.json").is_file():
        _write(folder / "manifest.json", json.dumps(print_, indent=1).encode())
    return folder


SHOWN_BAD = 10  # bad items listed in the summary (all of them go to the side file)


def _bad_items(name: str, data: str, items, out: Path, strict: bool, notify) -> None:
    """Report the bad items a probe's data had (:func:`report_bad`)."""
    report_bad(name, data, list(getattr(items, "bad", [])), len(items), out, strict, notify)


def report_bad(name: str, data: str, bad: list, usable: int, out: Path, strict: bool, notify) -> None:
    """Report the bad items (or rows) of a data file: all of them in an error (``strict``), else a summary of
    the first ones through ``notify`` and every one in ``OUT.bad.txt``. No usable item left: an error."""
    if bad and strict:
        raise BadData(f"{len(bad)} bad item(s) in {data} (--strict):\n" + "\n".join(map(str, bad)))
    if not usable:
        reason = f"all {len(bad)} are bad, e.g. {bad[0]}" if bad else "it has none"
        raise NothingToScore(f"{name}: no usable items in {data}: {reason}")
    if bad:
        side = out.with_name(out.name + ".bad.txt")
        _write(side, ("\n".join(map(str, bad)) + "\n").encode())
        if notify:
            shown = "\n".join(f"  {b}" for b in bad[:SHOWN_BAD])
            more = f"\n  and {len(bad) - SHOWN_BAD} more" if len(bad) > SHOWN_BAD else ""
            notify(f"{name}: skipped {len(bad)} bad item(s) of {data} (all listed in {side}; --strict to stop "
                   f"instead):\n{shown}{more}")


def checkpointed(folder: Path, items: list, every: int, compute: Callable, bar=None) -> list[pd.DataFrame]:
    """Each chunk of ``every`` items through ``compute(chunk, step)`` (``step(n)``: n items done) -> a DataFrame,
    written atomically to ``folder/chunk-NNNNN.csv``; a chunk whose file is there already (a run that was
    interrupted) is read back, not recomputed. ``bar`` (tqdm-like: update, close) counts the items."""
    parts = []
    try:
        for index, start in enumerate(range(0, len(items), every)):
            chunk = items[start:start + every]
            path = folder / f"chunk-{index:05d}.csv"
            if path.is_file():  # done before an interruption: not recomputed
                parts.append(pd.read_csv(path))
                if bar:
                    bar.update(len(chunk))
                continue
            part = compute(chunk, bar.update if bar else None)
            _write(path, part.to_csv(index=False).encode())
            parts.append(part)
    finally:
        if bar:  # closed before any error is printed, so the message starts its own line
            bar.close()
    return parts


def _profile_one(model, name, data, limit, out, partial, batch_size, checkpoint_every, backend, progress_factory,
                 notify, strict) -> pd.DataFrame:
    """One probe's table: its items (bad ones reported), its chunks (resumed from a matching checkpoint),
    combined exactly."""
    probe = get(name)
    items = probe.items(data, limit)
    _bad_items(name, data or probe.default_data, items, out, strict, notify)
    folder = _checkpoint(partial, name, fingerprint(model, probe, items, data, checkpoint_every, backend), notify)
    bar = progress_factory(len(items), name) if progress_factory else None
    parts = checkpointed(folder, items, checkpoint_every,
                         lambda chunk, step: run_chunk(probe, model, chunk, batch_size, backend, step), bar)
    result = probe.combine(parts, items)
    if result.empty:
        raise NothingToScore(f"{name}: nothing to score in the {len(items)} usable item(s) of "
                             f"{data or probe.default_data} (they hold none of what this probe measures): give it "
                             "more, or other, data")
    return result


def profile(model, probes: list[str], data: str | None, limit: int | None, out: Path, batch_size: int = 16,
            checkpoint_every: int = 64, backend: str = "eager", progress_factory=None,
            notify: Callable[[str], None] | None = None, strict: bool = False) -> pd.DataFrame:
    """Run the probes (by name, as the registry knows them) over ``data`` (each probe's default when
    None), checkpointing every ``checkpoint_every`` items under ``out.partial/``. ``notify(message)`` is
    told when a checkpoint from other inputs is dropped, and which bad items of the data were skipped
    (all of them are written to ``OUT.bad.txt``); ``strict`` makes any bad item an error listing them all.
    A probe left with no usable item is an error, never an empty table."""
    _check_format(out)
    partial = out.with_name(out.name + ".partial")
    frames = []
    for name in probes:
        try:
            frames.append(_profile_one(model, name, data, limit, out, partial, batch_size, checkpoint_every, backend,
                                       progress_factory, notify, strict))
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
