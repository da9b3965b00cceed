"""``python -m probes profile``: score every layer × head of a model with one probe (or all) over a
dataset, in checkpointed chunks.

The data is cut into chunks of ``checkpoint_every`` items; each finished chunk's scores are written
(atomically) to ``OUT.partial/``. A rerun with the same arguments skips the chunks already there,
so an interrupted run resumes without recomputing. The chunks are then combined exactly: scores are
means over examples (weighted by ``n``), baselines depend on the data alone and are recomputed from
it, a positional head's verdict comes from the summed offset histograms. The final file (CSV, JSON
or Parquet, by extension) is written through a temporary file and a rename, so an interrupted run
never leaves a truncated output.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..datasets.cache import write_atomic
from ..errors import BadData
from .engine import COLUMNS, Pair, _baseline

PROBES = ("positional", "syntactic", "coreference", "lexical", "induction", "patterns")
BUILTIN = {"ewt-dev", "ewt-train", "ewt-test", "winobias"}
DEFAULT_DATA = {"positional": "ewt-dev", "syntactic": "ewt-dev", "patterns": "ewt-dev", "coreference": "winobias",
                "lexical": "ewt-dev", "induction": None}


@dataclass
class Job:
    probe: str
    items: list  # the data, already limited
    run: Callable  # (model, items, progress) -> DataFrame
    pairs: Callable | None = None  # items -> list[Pair], to recompute a data-only baseline
    baseline: str | None = None
    finalize: Callable | None = None  # applied once to the combined frame


def load_items(probe: str, data: str | None, limit: int | None) -> list:
    """The probe's data: a built-in name or a path (.conllu, .jsonl, or .txt with one sentence a line)."""
    from ..datasets import coreference, dependencies

    data = data or DEFAULT_DATA[probe]
    if probe == "induction":
        return list(range(limit or 20))  # one random repeated sequence per item
    if data.startswith("ewt-"):
        items = dependencies.ewt(data.removeprefix("ewt-"))
    elif data == "winobias":
        items = coreference.winobias()
    else:
        path = Path(data)
        if not path.is_file():
            raise BadData(f"no data file {data!r}: give a path or one of {', '.join(sorted(BUILTIN))}")
        if path.suffix == ".conllu":
            items = dependencies.read_conllu(path)
        elif path.suffix == ".jsonl":
            items = coreference.read_jsonl(path)
        elif path.suffix == ".txt":
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
            items = [line.split() for line in lines if line]
            if not items:
                raise BadData(f"{path}:1: no sentences (one per line)")
        else:
            raise BadData(f"{path}: unknown data format {path.suffix!r}: use .conllu, .jsonl or .txt")
    if probe == "coreference" and items and not hasattr(items[0], "pronoun"):
        raise BadData(f"{data}: the coreference probe needs pronoun/antecedent items (winobias or a .jsonl)")
    if probe == "syntactic" and items and not hasattr(items[0], "heads"):
        raise BadData(f"{data}: the syntactic probe needs parsed sentences (ewt-* or a .conllu)")
    if probe == "lexical" and items and not getattr(items[0], "upos", None):
        raise BadData(f"{data}: the lexical probe needs part-of-speech tags (ewt-* or a .conllu with UPOS)")
    return items[:limit] if limit else items


def _words(item) -> list[str]:
    return list(getattr(item, "words", item))


def make_job(probe: str, items: list, batch_size: int, backend: str) -> Job:
    from .engine import token_attention
    from .induction import induction_scores
    from .patterns import pattern_classes
    from .positional import positional_scores
    from .engine import score_pairs, sentence_attention
    from .semantic import controls_as_baseline, coreference_scores, lexical_sentence
    from .syntactic import dependency_sentence, syntactic_scores

    def texts(chunk):
        return [" ".join(_words(i)) for i in chunk]

    if probe == "positional":
        return Job(probe, items, lambda m, c, p: positional_scores(
            token_attention(m, texts(c), batch_size, backend, p), causal=m.is_causal))
    if probe == "patterns":
        return Job(probe, items, lambda m, c, p: pattern_classes(token_attention(m, texts(c), batch_size, backend, p)))
    if probe == "syntactic":
        return Job(probe, items, lambda m, c, p: syntactic_scores(m, c, batch_size, backend, p),
                   pairs=lambda c: [q for s in c for q in dependency_sentence(s).pairs], baseline="offset")
    if probe == "coreference":
        return Job(probe, items, lambda m, c, p: coreference_scores(m, c, batch_size, backend, p),
                   pairs=lambda c: [Pair(i.pronoun, i.antecedent, i.label, tuple(i.candidates)) for i in c],
                   baseline="nearest_candidate")
    if probe == "lexical":
        from ..datasets.wordnet import wordnet

        def run_lexical(m, c, p):  # control rows stay separate until the chunks are combined
            sentences = [lexical_sentence(wordnet(), s) for s in c]
            return score_pairs(sentence_attention(m, sentences, batch_size, backend, p), probe="lexical")
        return Job(probe, items, run_lexical, finalize=controls_as_baseline)
    if probe == "induction":
        def run(m, c, p):
            frame = induction_scores(m, n_sequences=len(c), seed=c[0], backend=backend)
            p(len(c))
            return frame
        return Job(probe, items, run)
    raise BadData(f"unknown probe {probe!r}: choose one of {', '.join(PROBES)} or all")


def combine(job: Job, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Chunk results -> the result over all the data (exact; see the module docstring)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    if len(frames) == 1:
        frame = frames[0].copy()
    else:
        whole = pd.concat(frames, ignore_index=True)
        keys = ["probe", "label", "layer", "head"]
        for col in ("score", "mean_attention", "baseline"):
            whole[f"_{col}"] = whole[col] * whole["n"]
        total = lambda col: col.sum(min_count=1)  # noqa: E731  (all-NaN stays NaN, not 0)
        agg = whole.groupby(keys, sort=False).agg(
            n=("n", "sum"), _score=("_score", total), _mean_attention=("_mean_attention", total),
            _baseline=("_baseline", total)).reset_index()
        for col in ("score", "mean_attention", "baseline"):
            agg[col] = agg[f"_{col}"] / agg["n"]
        extra = [c for c in whole.columns if c not in COLUMNS and not c.startswith("_")]
        frame = agg[COLUMNS].copy()
        if "offset_counts" in extra:
            from .positional import voita

            hist = whole.dropna(subset=["offset_counts"]).groupby(keys, sort=False)["offset_counts"].agg(
                lambda col: json.dumps(_sum_counts(col)))
            frame = frame.merge(hist.reset_index(), on=keys, how="left")
            pos = frame["offset_counts"].notna()
            verdicts = frame.loc[pos, "offset_counts"].map(lambda s: voita({int(k): v for k, v in json.loads(s).items()}))
            frame.loc[pos, "score"] = [v["score"] for v in verdicts]
            frame["offset"] = pd.NA
            frame["positional"] = pd.NA
            frame.loc[pos, "offset"] = [v["offset"] for v in verdicts]
            frame.loc[pos, "positional"] = [v["positional"] for v in verdicts]
        if "majority" in extra:
            best = frame.groupby(["layer", "head"])["score"].transform("max")
            frame["majority"] = frame["score"] == best
        if "direction" in extra:
            frame = frame.merge(whole[keys + ["direction"]].drop_duplicates(keys), on=keys, how="left")
    if job.pairs is not None:  # the baseline depends on the data alone: recompute it over all of it
        by_label: dict[str, list[Pair]] = {}
        for p in job.pairs(job.items):
            by_label.setdefault(p.label, []).append(p)
        frame = frame.copy()
        frame["baseline"] = frame["label"].map(lambda label: _baseline(by_label.get(label, []), job.baseline))
    if job.finalize is not None:
        frame = job.finalize(frame)
    return frame.reset_index(drop=True)


def run_probe(model, probe: str, limit: int | None = None, data: str | None = None, batch_size: int = 16,
              backend: str = "eager", progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One probe over its data (built-in by default), in memory: the same table ``profile`` writes,
    without files. ``progress(done, total)`` is called as items finish (the app's progress bar)."""
    items = load_items(probe, data if probe != "induction" else None, limit)
    job = make_job(probe, items, batch_size, backend)
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, len(items))

    return combine(job, [job.run(model, items, step)])


def read_table(raw: bytes, name: str) -> pd.DataFrame:
    """A probe table as ``profile`` writes it (CSV), read back and checked: it needs the columns
    ``label, layer, head, score``; anything else is ``BadData`` naming the file and what is wrong."""
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
    if (frame["layer"] < 0).any() or (frame["head"] < 0).any() or (frame["layer"] % 1).any() or (frame["head"] % 1).any():
        raise BadData(f"{name}: layer and head must be whole numbers from 0")
    frame[["layer", "head"]] = frame[["layer", "head"]].astype(int)
    return frame.reset_index(drop=True)


def _sum_counts(column) -> dict[str, int]:
    total: dict[str, int] = {}
    for text in column:
        for k, v in json.loads(text).items():
            total[k] = total.get(k, 0) + v
    return total


def write_table(frame: pd.DataFrame, out: Path) -> None:
    """CSV, JSON (records) or Parquet by extension, written atomically."""
    suffix = out.suffix.lower()
    if suffix == ".csv":
        data = frame.to_csv(index=False).encode()
    elif suffix == ".json":
        data = frame.to_json(orient="records", indent=1).encode()
    elif suffix == ".parquet":
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        data = buf.getvalue()
    else:
        raise BadData(f"{out}: write .csv, .json or .parquet")
    write_atomic(out, data)


def profile(model, probes: list[str], data: str | None, limit: int | None, out: Path, batch_size: int = 16,
            checkpoint_every: int = 64, backend: str = "eager", progress_factory=None) -> pd.DataFrame:
    """Run the probes, checkpointing every ``checkpoint_every`` items under ``out.partial/``."""
    if out.suffix.lower() not in (".csv", ".json", ".parquet"):
        raise BadData(f"{out}: write .csv, .json or .parquet")
    partial = out.with_name(out.name + ".partial")
    frames = []
    for probe in probes:
        items = load_items(probe, data if probe != "induction" else None, limit)
        job = make_job(probe, items, batch_size, backend)
        fingerprint = hashlib.sha256(json.dumps(
            [model.name, model.source, probe, data, limit, checkpoint_every, backend, len(items)]).encode()).hexdigest()[:16]
        folder = partial / f"{probe}-{fingerprint}"
        folder.mkdir(parents=True, exist_ok=True)
        chunks = [items[i:i + checkpoint_every] for i in range(0, len(items), checkpoint_every)]
        bar = progress_factory(len(items), probe) if progress_factory else None
        parts = []
        for index, chunk in enumerate(chunks):
            path = folder / f"chunk-{index:05d}.csv"
            if path.is_file():  # done before an interruption: not recomputed
                parts.append(pd.read_csv(path))
                if bar:
                    bar.update(len(chunk))
                continue
            part = job.run(model, chunk, bar.update if bar else (lambda n: None))
            write_atomic(path, part.to_csv(index=False).encode())
            parts.append(part)
        if bar:
            bar.close()
        frames.append(combine(job, parts))
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    write_table(frame, out)
    shutil.rmtree(partial, ignore_errors=True)
    return frame
