"""What every long job of the CLI shares (``profile``, ``profile --corpus``, ``importance``): checkpointed chunks
that a rerun resumes from, the digests that say which inputs a checkpoint was computed from, atomic writes, the
tables they write and read back (CSV, JSON or Parquet, by extension), and the report of a data set's bad items.

A job's checkpoint folder (``OUT.partial/NAME-DIGEST``, :func:`checkpoint`) is named by, and holds a manifest of,
a fingerprint of its inputs (each part a :func:`digest`); a folder of the same job made from other inputs is
removed, saying which of them changed. :func:`checkpointed` runs the chunks, skipping those already written.
Every file goes through a temporary file and a rename (:func:`write_file`), so an interrupted run never leaves a
truncated one. Nothing here knows what a job computes.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .datasets.cache import write_atomic
from .errors import BadData, CannotWrite, NothingToScore, OutOfRange
from .head_index import check_index

if TYPE_CHECKING:
    from .seam import ModelLike


def with_model(frame: pd.DataFrame, model: ModelLike) -> pd.DataFrame:
    """A probe table that knows its model: its name and its layer and head counts, in every row (so a table
    shown beside another model is refused, not drawn in the wrong frame)."""
    return frame.assign(model=model.name, n_layers=model.n_layers, n_heads=model.n_heads)


MAX_SCORE = 1e6  # probe scores are fractions, counts or entropies: anything bigger is not a probe table
# a table shown in the app is read whole on the server, which sends the browser only a summary (one label's grid, its
# top rows, a bounded label menu); a table of more rows, or a label longer than this, is refused before anything is
# drawn (a 1 MB label froze a browser tab: tests/dashboard/app_pages/heads/)
MAX_ROWS = 2_000_000  # about 100 MB in memory once read: a 10⁶-row table (14,000 labels of a 72-head model) fits
MAX_LABEL = 200  # characters: the longest built-in label is under 40
# an upload is checked from its first line and a count of its lines before pandas reads it: pandas makes one column
# per name of the header (a 12 MB header of 1.5 M names took the server minutes and gigabytes); what a table of these
# bounds within the app's 20 MB upload limit costs to read: benchmarks/upload_bombs.py (docs/app.md, "Uploads")
MAX_COLUMNS = 64  # columns of a table: profile writes up to ~25 (scores, baselines, evidence, model)
MAX_HEADER = 4096  # bytes of the header line: 64 names of 60 characters


def read_table(raw: bytes, name: str, n_layers: int | None = None, n_heads: int | None = None) -> pd.DataFrame:
    """A probe table as ``profile`` writes it (CSV), read back and checked: it needs the columns
    ``label, layer, head, score`` with finite scores; with ``n_layers``/``n_heads`` (the model it is shown
    for), every layer and head must exist in that model. Anything else is ``BadData`` naming the file and
    what is wrong, before anything is built from it."""
    columns = _header_columns(raw, name)
    rows = raw.count(b"\n") + (not raw.endswith(b"\n")) - 1  # the lines after the header: its rows, counted unread
    if rows > MAX_ROWS:
        raise BadData(f"{name}: {rows:,} rows, more than the {MAX_ROWS:,} a table shown here may have (one row "
                      "per model, label, layer and head): split it, or keep the labels you want to look at")
    try:  # the header's columns only, by place: a row of more fields (a 9 M-field line made pandas build a 9 M-level
        # index for minutes) is cut to them, never read whole
        frame = pd.read_csv(io.BytesIO(raw), usecols=range(columns), index_col=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise BadData(f"{name}: not a CSV table ({str(exc).splitlines()[0]})") from None
    missing = [c for c in ("label", "layer", "head", "score") if c not in frame.columns]
    if missing:
        raise BadData(f"{name}: missing column(s) {', '.join(missing)}: upload a table written by "
                      "`python -m probes profile --out FILE.csv`")
    if frame.empty:
        raise BadData(f"{name}: no rows")
    lengths = frame["label"].astype(str).str.len()
    if (lengths > MAX_LABEL).any():
        row = int(lengths.to_numpy().argmax())
        raise BadData(f"{name} line {row + 2}: a label of {int(lengths.iloc[row]):,} characters; labels are at most "
                      f"{MAX_LABEL} (names such as 'nsubj (dep→head)'): shorten it")
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


def _header_columns(raw: bytes, name: str) -> int:
    """How many columns the header line of a CSV table names, read from at most :data:`MAX_HEADER` bytes; a longer
    header, or one of more than :data:`MAX_COLUMNS` names, is ``BadData`` before pandas sees the file."""
    end = raw.find(b"\n", 0, MAX_HEADER + 1)
    if end < 0 and len(raw) > MAX_HEADER:
        raise BadData(f"{name}: the header line is longer than {MAX_HEADER:,} bytes; a probe table's header names "
                      f"up to {MAX_COLUMNS} columns (label, layer, head, score, …): upload a table written by "
                      "`python -m probes profile --out FILE.csv`")
    try:
        header = raw[:len(raw) if end < 0 else end].decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadData(f"{name}: not a CSV table ({exc})") from None
    names = next(csv.reader([header]), [])
    if len(names) > MAX_COLUMNS:
        raise BadData(f"{name}: the header names {len(names):,} columns; a probe table has up to {MAX_COLUMNS} "
                      "(label, layer, head, score, …): upload a table written by `python -m probes profile --out "
                      "FILE.csv`")
    return max(len(names), 1)


def check_heads(frame: pd.DataFrame, name: str, n_layers: int | None = None, n_heads: int | None = None) -> None:
    """Every ``layer`` and ``head`` of a table is a whole number from 0 and, with ``n_layers``/``n_heads`` (the
    model it is shown for), one that model has; else ``BadData`` naming the file and what to do."""
    for col, n in (("layer", n_layers), ("head", n_heads)):
        values = frame[col]
        if (values < 0).any() or (values % 1).any():
            raise BadData(f"{name}: {col} must be whole numbers from 0")
        if n is not None and len(values):
            try:
                check_index(int(values.max()), n, col, f"this model's {col}s")
            except OutOfRange as exc:
                raise BadData(f"{name}: {exc}: upload a table written for the model selected in the sidebar") from None


FORMATS = (".csv", ".json", ".parquet")  # what a probe table is written as, by the extension of --out


def check_format(out: Path) -> None:
    """``BadData`` unless ``out`` ends in one of the :data:`FORMATS` a table can be written as."""
    if out.suffix.lower() not in FORMATS:
        raise BadData(f"{out}: write .csv, .json or .parquet")


def check_out(out: str | Path, force: bool = False, inputs: dict[str, str | None] | None = None, notify=None,
              also: dict[str, str | Path | None] | None = None,
              formats: dict[str, Callable[[Path], None]] | None = None) -> None:
    """:func:`check_outputs` for a command whose result is a table at ``--out`` (a .csv, .json or .parquet file,
    with its list of bad items ``OUT.bad.txt`` beside it), and its other outputs ``also`` (flag -> path)."""
    check_outputs({"--out": out, **(also or {})}, force, inputs, notify,
                  formats={"--out": check_format, **(formats or {})}, sides={"--out": BAD_SUFFIX})


BAD_SUFFIX = ".bad.txt"  # the list of a data set's bad items, written beside the output: OUT.bad.txt


def bad_path(out: Path) -> Path:
    """Where the bad items of the run writing ``out`` are listed: ``OUT.bad.txt`` beside it."""
    return out.with_name(out.name + BAD_SUFFIX)


def check_outputs(outputs: dict[str, str | Path | None], force: bool = False,
                  inputs: dict[str, str | None] | None = None, notify=None,
                  formats: dict[str, Callable[[Path], None]] | None = None,
                  sides: dict[str, str] | None = None) -> None:
    """Refuse, before any work and all at once, every file a command would write that cannot be its result, so that
    a mistake costs one line, not the computation, and no output destroys another file. ``outputs`` maps each
    output's flag to its path (None: not asked for); ``formats`` a flag to the check of its format (a
    ``ProbesError`` saying which endings it takes); ``sides`` a flag to the suffix of a file written beside it
    (``OUT.bad.txt``), which is the output's own and so replaced without ``force`` (a rerun rewrites it).

    Refused, each in one line that says what to do: an empty name; a folder or a device; a folder that does not
    exist (nothing is made: a typo must not grow a tree), is a file, or cannot be written; one of the command's
    ``inputs`` (flag -> path; even with ``force``); two outputs that are one file; a file another run is writing,
    or whose lock cannot be made (:func:`claim`: ``/proc``); an existing file, unless ``force``. Passed, every
    output is this run's until :func:`release` (the CLI's ``main`` calls it when the command ends)."""
    files: list[tuple[str, Path, str, bool]] = []  # (how a message names it, path, its flag, a side file)
    for flag, given in outputs.items():
        if given is None:
            continue
        if not str(given).strip():
            raise CannotWrite(f"{flag} is empty: give a file name")
        path = Path(given)
        files.append((f"{flag} {path}", path, flag, False))
        suffix = (sides or {}).get(flag)
        if suffix is not None:
            beside = path.with_name(path.name + suffix)
            files.append((f"{beside} (written beside {flag})", beside, flag, True))
    for name, path, flag, side in files:
        try:
            _check_place(name, path, flag, side, None if side else (formats or {}).get(flag), inputs or {})
        except OSError as exc:  # a name too long to look at, a folder that cannot be searched
            raise CannotWrite(f"cannot write {name}: {exc.strerror or exc}: choose another {flag}") from None
    for i, (name, path, _, _) in enumerate(files):
        for other, there, _, _ in files[:i]:
            if same_file(path, there):
                raise CannotWrite(f"{name} is also {other}: one would overwrite the other, so give each output "
                                  f"its own file")
    claimed: list[Path] = []
    try:
        for name, path, flag, side in files:
            if path.resolve() not in _CLAIMS:
                claim(path, notify, flag)
                claimed.append(path)
            # after the claim: a run that finished meanwhile has written it
            if path.exists() and not force and not side:
                raise CannotWrite(f"{name} exists: pass --force to replace it, or choose another file")
    except BaseException:
        for path in claimed:
            release(path)
        raise


# a run writes, beside an output NAME, a temporary file ".NAME.xxxxxxxx" and a lock "NAME.lock": the name's margin
NAME_MARGIN = 10


def _check_place(name: str, path: Path, flag: str, side: bool, format_: Callable[[Path], None] | None,
                 inputs: dict[str, str | None]) -> None:
    """One output of :func:`check_outputs` (``name``: how a message names it; ``side``: a file written beside the
    output ``flag`` names), checked where it would be written."""
    try:  # first: a longer name cannot even be looked at
        longest = os.pathconf(path.parent, "PC_NAME_MAX")
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows), no such folder (refused below)
        longest = 255
    if len(os.fsencode(path.name)) + NAME_MARGIN > longest:
        raise CannotWrite(f"cannot write {name[:60]}…: a file name here is at most {longest - NAME_MARGIN} bytes "
                          f"(with room for its temporary and lock files): choose a shorter {flag}")
    if path.is_dir():
        raise CannotWrite(f"{name} is a folder: " + (f"remove it, or choose another {flag}" if side else
                          "give a file name" + (f" ending in {', '.join(FORMATS[:-1])} or {FORMATS[-1]}"
                                                if flag == "--out" else "")))
    if path.exists() and not path.is_file():
        raise CannotWrite(f"{name} is not a file (a device, a pipe or a socket): choose another {flag}")
    if format_ is not None:
        format_(path)
    parent = path.parent
    if not parent.exists():
        raise CannotWrite(f"cannot write {flag} {path}: the folder {parent} does not exist: create it first or "
                          f"choose another {flag}")
    if not parent.is_dir():
        raise CannotWrite(f"cannot write {flag} {path}: {parent} is a file, not a folder: choose another {flag}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CannotWrite(f"cannot write {flag} {path}: the folder {parent} is not writable: choose another {flag}")
    for source, given in inputs.items():
        if given and same_file(path, Path(given)):
            raise CannotWrite(f"{name} is the input file ({source}): writing there would destroy it, so choose "
                              f"another {flag}")


def same_file(a: Path, b: Path) -> bool:
    """The same file: one resolved path, or (both there) one file under two names (a link)."""
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


_CLAIMS: dict[Path, int] = {}  # the outputs this process is writing: resolved path -> its lock file's descriptor


def claim(out: Path, notify=None, flag: str = "--out") -> None:
    """Make ``out`` this run's: ``OUT.lock`` beside it, locked (``flock``) for as long as the run goes and holding
    its pid, so a second run writing the same file (and the same ``OUT.partial`` checkpoints) is refused at once
    with ``CannotWrite`` naming the first run's pid. The lock dies with its process, so a lock file left by a
    killed run is taken over (``notify`` says so). No folder is made: a lock that cannot be created (a missing or
    read-only folder, ``/proc``) is ``CannotWrite`` naming ``flag``, the option that gave ``out``. Without
    ``fcntl`` (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        return
    key = out.resolve()
    if key in _CLAIMS:
        return
    lock = key.with_name(key.name + ".lock")
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # /proc, a read-only file system, a folder removed meanwhile
            raise CannotWrite(f"cannot write {flag} {out}: its lock file {lock} cannot be made "
                              f"({exc.strerror or exc}): choose another {flag}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            pid = f" (pid {holder})" if holder.isascii() and holder.isdigit() else ""
            raise CannotWrite(f"another run is writing {out}{pid}: wait for it to finish or choose "
                              f"another {flag}") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:  # (else the run before removed this file as this one locked it: lock the new one)
            break
        os.close(fd)
    left = os.read(fd, 32).decode(errors="replace").strip()
    if left and notify:
        notify(f"took over {lock}, left by a run (pid {left}) that is no longer running")
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    _CLAIMS[key] = fd


def release(out: Path | None = None) -> None:
    """Give up this process's claim on ``out`` (every claim, without it): its lock file is removed."""
    for key in [out.resolve()] if out is not None else list(_CLAIMS):
        fd = _CLAIMS.pop(key, None)
        if fd is not None:
            key.with_name(key.name + ".lock").unlink(missing_ok=True)  # removed while still locked: no gap
            os.close(fd)


def write_file(path: Path, data: bytes, flag: str = "--out") -> None:
    """``data`` written to ``path`` atomically, with the permissions the umask gives; a failure (a full disk, a
    folder made read-only meanwhile) is ``CannotWrite`` saying what to do (``flag``: the option that named the
    file; only ``--out`` jobs are checkpointed, and so resumed)."""
    try:
        write_atomic(path, data)
    except OSError as exc:  # a full disk, a folder made read-only meanwhile…
        resume = " (a rerun resumes from the chunks already written)" if flag == "--out" else ""
        raise CannotWrite(f"could not write {path}: {exc.strerror or exc}; free some space or choose another "
                          f"{flag}{resume}") from None


def write_table(frame: pd.DataFrame, out: Path) -> None:
    """CSV, JSON (records) or Parquet by extension, written atomically."""
    check_format(out)
    suffix = out.suffix.lower()
    if suffix == ".csv":
        data = frame.to_csv(index=False).encode()
    elif suffix == ".json":
        data = frame.to_json(orient="records", indent=1).encode()
    else:  # .parquet
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        data = buf.getvalue()
    write_file(out, data)


def digest(value) -> str:
    """A short digest (16 hex digits) of bytes, or of any other value by its ``repr``: one part of a
    checkpoint's fingerprint."""
    return hashlib.sha256(value if isinstance(value, bytes) else repr(value).encode()).hexdigest()[:16]


def checkpoint(partial: Path, name: str, print_: dict, notify) -> Path:
    """The checkpoint folder of this job's run (``partial/NAME-DIGEST``, for the fingerprint ``print_``: its
    parts by name); folders of the same job made from other inputs are removed, and ``notify`` is told which
    inputs differ ("computed from another data, model", "computed with another tokenizer": a result is computed
    *with* a tokenizer, *from* the rest)."""
    folder = partial / f"{name}-{digest(sorted(print_.items()))}"
    for other in sorted(partial.glob(f"{name}-*")) if partial.is_dir() else []:
        if other == folder:
            continue
        try:
            before = json.loads((other / "manifest.json").read_text())
            changed = [part for part in print_ if before.get(part) != print_[part]] or ["inputs"]
        except (OSError, ValueError):
            changed = ["inputs (no readable manifest)"]
        if notify:
            used = [part for part in changed if part == "tokenizer"]
            read = [part for part in changed if part != "tokenizer"]
            said = ([f"from another {', '.join(read)}"] if read else []) + ([f"with another {used[0]}"] if used else [])
            notify(f"{name}: the checkpoint in {other} was computed {', '.join(said)}: starting afresh")
        shutil.rmtree(other, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "manifest.json").is_file():
        write_file(folder / "manifest.json", json.dumps(print_, indent=1).encode())
    return folder


SHOWN_BAD = 10  # bad items listed in the summary (all of them go to the side file)


def bad_items(name: str, data: str | None, items, out: Path, strict: bool, notify) -> None:
    """Report the bad items a job's data had (its ``bad``, if any; :func:`report_bad`) and what its reader noted
    (its ``notes``: items placed only by a looser match)."""
    for note in getattr(items, "notes", []) if notify else []:
        notify(f"{name}: {note}")
    report_bad(name, data, list(getattr(items, "bad", [])), len(items), out, strict, notify)


def report_bad(name: str, data: str | None, bad: list, usable: int, out: Path | None, strict: bool, notify) -> None:
    """Report the bad items (or rows) of a data file: all of them in an error (``strict``), else a summary of
    the first ones through ``notify`` and every one in ``OUT.bad.txt`` (``out`` None, a command that writes no
    file: every one through ``notify``). No usable item left: an error."""
    if bad and strict:
        raise BadData(f"{len(bad)} bad item(s) in {data} (--strict):\n" + "\n".join(map(str, bad)))
    if not usable:
        reason = f"all {len(bad)} are bad, e.g. {bad[0]}" if bad else "it has none"
        raise NothingToScore(f"{name}: no usable items in {data}: {reason}")
    if bad:
        side = None if out is None else bad_path(out)
        if side is not None:
            write_file(side, ("\n".join(map(str, bad)) + "\n").encode())
        if notify:
            listed = bad if side is None else bad[:SHOWN_BAD]
            shown = "\n".join(f"  {b}" for b in listed)
            more = f"\n  and {len(bad) - len(listed)} more" if len(bad) > len(listed) else ""
            where = "" if side is None else f"all listed in {side}; "
            notify(f"{name}: skipped {len(bad)} bad item(s) of {data} ({where}--strict to stop "
                   f"instead; {by_reason(bad)}):\n{shown}{more}")


def by_reason(bad: list) -> str:
    """The bad items counted by reason, the words a reason quotes and its numbers set aside ("3 × the antecedent '…'
    followed by the pronoun '…' is not in the text …", "2 × word N is its own head"), most common first."""
    import re
    from collections import Counter

    counts = Counter(re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'…'", getattr(b, "reason", str(b)))) for b in bad)
    return "; ".join(f"{n} × {reason}" for reason, n in counts.most_common())


def checkpointed(folder: Path, items: list, every: int, compute: Callable, bar=None, run: Callable | None = None,
                 notify: Callable[[str], None] | None = None) -> list[pd.DataFrame]:
    """Each chunk of ``every`` items through ``compute(chunk, step)`` (``step(n)``: n items done) -> a DataFrame,
    written atomically to ``folder/chunk-NNNNN.csv``; a chunk whose file is there already (a run that was
    interrupted) is read back, not recomputed. ``bar`` (tqdm-like: update, close) counts the items. ``run``
    computes the chunks elsewhere instead (Ray: :func:`probes.corpus.ray_pool.executor`): given the indices and
    chunks not written yet, it yields ``(index, part)`` once each, in any order, and each is written as it comes;
    the same files either way, so a run begun one way is finished the other. ``notify``, if given, is told how
    many chunks a resumed run found done."""
    chunks = [items[start:start + every] for start in range(0, len(items), every)]
    path = lambda index: folder / f"chunk-{index:05d}.csv"  # noqa: E731
    parts = {i: pd.read_csv(path(i)) for i in range(len(chunks)) if path(i).is_file()}  # done before: not recomputed
    todo = [i for i in range(len(chunks)) if i not in parts]
    if notify and parts:
        notify(f"resuming from {folder}: {len(parts)} of {len(chunks)} chunks done already")
    try:
        if bar:
            bar.update(sum(len(chunks[i]) for i in parts))
        step = bar.update if bar and run is None else None  # here: items as they finish; elsewhere: whole chunks
        done = run([(i, chunks[i]) for i in todo]) if run else ((i, compute(chunks[i], step)) for i in todo)
        for index, part in done:
            write_file(path(index), part.to_csv(index=False).encode())
            parts[index] = part
            if bar and run is not None:
                bar.update(len(chunks[index]))
    finally:
        if bar:  # closed before any error is printed, so the message starts its own line
            bar.close()
    return [parts[i] for i in range(len(chunks))]
