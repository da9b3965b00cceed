"""Every probe label's best head, chosen on one half of the data and judged on the other.

A probe scores every layer × head on a data set (:mod:`probes.heads`); the head with the best score is the one a
reader takes for "the det head". Chosen on the same items it is scored on, that best score is biased upwards, and
by how much depends on how many heads there are. So here the items are cut in two by a seeded split
(:func:`probes.evidence.stats.split_half`): each label's head is chosen on the first half (the largest gain over
its baseline), and judged on the second, against the head-free baseline of that half (for a syntactic relation,
the fixed offset that was best on the *first* half; uniform attention; the nearest candidate; a head's own
distance-matched controls), with a 95 % interval: Wilson's for an accuracy, a bootstrap over items for a mean
(the chosen heads' scores on each item alone are kept while the second half runs: ``watch``).

The table a probe writes keeps every row it had (each head's score over all the items: the two halves' chunks
combined exactly, as chunks always are) and gains :data:`COLUMNS`: each head's score on either half, and on the
chosen head's row the held-out verdict (:mod:`probes.evidence.record`). A label with no example in the half heads
are chosen on (a rare relation) has no chosen head, and so no verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..heads.profile import (
    apart,
    counting,
    fingerprint,
    left_out,
    noted,
    prepared,
    profile as profile_tables,
    run_chunk,
    score_chunks,
    scored,
)
from ..heads.registry import Probe, get
from ..jobs import checkpoint, digest, with_model
from ..seam import reader
from .record import Baseline, Evidence
from .stats import Split, bootstrap_ratio, split_half, wilson

if TYPE_CHECKING:
    from ..seam import ModelLike

COLUMNS = ["selection_score", "heldout_score", "chosen", "heldout_n", "heldout_low", "heldout_high",
           "baseline_heldout", "verdict", "said", "split_seed"]
KEYS = ["label", "layer", "head"]


def choose(table: pd.DataFrame, probe: Probe) -> dict[str, tuple[int, int]]:
    """Each judged label's head with the largest gain over its baseline on ``table`` (the score itself where the
    baseline is missing); labels a probe describes rather than claims (:attr:`Probe.judged` None) are left out."""
    out = {}
    for label, rows in table.groupby(table["label"].astype(str), sort=False):
        if probe.judged(label) is None:
            continue
        gain = rows["score"] - rows["baseline"].fillna(0.0) if "baseline" in rows else rows["score"]
        gain = gain.dropna()
        if len(gain):
            best = rows.loc[gain.idxmax()]
            out[label] = (int(best["layer"]), int(best["head"]))
    return out


def watched(probe: Probe, heads: dict[str, tuple[int, int]]) -> frozenset:
    """The (label, layer, head)s whose per-item scores a mean's bootstrap needs."""
    return frozenset((label, *head) for label, head in heads.items() if probe.judged(label) == "mean")


def judge(probe: Probe, chosen: pd.DataFrame, judged: pd.DataFrame, per_item: pd.DataFrame, split: Split,
          baselines: dict[str, float] | None = None) -> list[Evidence]:
    """The evidence for each judged label's head chosen on ``chosen`` (a half's table), judged on ``judged`` (the
    other half's), ``per_item`` holding the chosen heads' scores on each judged item (mean labels)."""
    heads = choose(chosen, probe)
    out = []
    index = judged.assign(label=judged["label"].astype(str)).set_index(KEYS)
    picked_index = chosen.assign(label=chosen["label"].astype(str)).set_index(KEYS)
    for label, head in heads.items():
        measure = probe.judged(label)
        if measure is None:  # (choose leaves out the labels a probe describes)
            continue
        key = (label, *head)
        chosen_score = float(picked_index.loc[key, "score"]) if key in picked_index.index else math.nan
        if key not in index.index:  # the label has no example in the judged half
            out.append(Evidence(label, head, measure, 0, math.nan, math.nan, math.nan, [], split, chosen_score))
            continue
        row = index.loc[key]
        score, n = float(row["score"]), int(row["n"])
        if measure == "accuracy":
            low, high = wilson(round(score * n), n)
            unit = "pairs" if probe.name in ("syntactic", "coreference", "lexical") else "examples"
        else:
            mine = per_item[(per_item["label"].astype(str) == label) & (per_item["layer"] == head[0])
                            & (per_item["head"] == head[1])]
            low, high = bootstrap_ratio(mine["score"] * mine["n"], mine["n"], seed=split.seed)
            n, unit = int(mine["item"].nunique()), "items"
        base = baselines.get(label, math.nan) if baselines is not None else float(row.get("baseline", math.nan))
        name = ("the best fixed offset of the other half" if baselines is not None
                else "the head's own distance-matched controls" if probe.name == "lexical"
                else "the nearest candidate" if probe.name == "coreference" else "uniform attention")
        bases = [Baseline(name, float(base))] if base == base else []
        out.append(Evidence(label, head, measure, n, score, low, high, bases, split, chosen_score, unit))
    return out


def with_verdicts(whole: pd.DataFrame, chosen: pd.DataFrame, judged: pd.DataFrame,
                  evidence: list[Evidence], seed: int) -> pd.DataFrame:
    """``whole`` (every head over all the items) with :data:`COLUMNS`: each head's score on the half heads were
    chosen on and on the half they are judged on, and on each label's chosen head its held-out figures and
    verdict."""
    def scores(table: pd.DataFrame, name: str) -> pd.DataFrame:
        return table.assign(label=table["label"].astype(str))[[*KEYS, "score"]].rename(columns={"score": name})

    out = whole.assign(label=whole["label"].astype(str))
    out = out.merge(scores(chosen, "selection_score"), on=KEYS, how="left")
    out = out.merge(scores(judged, "heldout_score"), on=KEYS, how="left")
    rows = []
    for ev in evidence:
        best = ev.best_baseline
        assert ev.head is not None  # (judge gives each label's evidence its chosen head)
        rows.append(dict(label=ev.claim, layer=ev.head[0], head=ev.head[1], chosen=True, heldout_n=ev.n,
                         heldout_low=ev.low, heldout_high=ev.high,
                         baseline_heldout=best.score if best is not None else math.nan, verdict=ev.verdict,
                         said=ev.said))
    marks = pd.DataFrame(rows, columns=[*KEYS, "chosen", "heldout_n", "heldout_low", "heldout_high",
                                        "baseline_heldout", "verdict", "said"])
    out = out.merge(marks, on=KEYS, how="left")
    out["chosen"] = out["chosen"].eq(True)
    out["verdict"] = out["verdict"].fillna("")
    out["said"] = out["said"].fillna("")
    out["split_seed"] = seed
    return out


def halves(items: list, seed: int) -> tuple[Split, list, list]:
    split = split_half(len(items), seed)
    return split, [items[i] for i in split.chosen_on], [items[i] for i in split.judged_on]


def _held_out(probe: Probe, model: ModelLike, items: list, seed: int,
              half: Callable[[str, list, frozenset], list[pd.DataFrame]]) -> tuple[pd.DataFrame, ...]:
    """The two halves of ``items`` scored by ``half(which, subset, watch)`` (chunk frames: in memory, or checkpointed),
    the second watching the heads the first chose; returns the whole table, both halves' tables and the verdicts."""
    split, first, second = halves(items, seed)
    part_a = half("chosen", first, frozenset()) if first else []
    chosen = probe.combine(part_a, first)
    watch = watched(probe, choose(chosen, probe)) if len(chosen) else frozenset()
    part_b, per_item = apart(half("judged", second, watch) if second else [])
    judged = probe.combine(part_b, second)
    whole = probe.combine([*part_a, *part_b], items)
    baselines = probe.heldout_baseline(first, second, model.is_causal) if probe.heldout_baseline else None
    evidence = judge(probe, chosen, judged, per_item, split, baselines) if len(chosen) and len(judged) else []
    return whole, chosen, judged, evidence


@reader
def run_probe(model: ModelLike, probe: str, limit: int | None = None, data: str | None = None, batch_size: int = 16,
              backend: str = "eager", progress: Callable[[int, int], None] | None = None,
              seed: int = 0) -> pd.DataFrame:
    """One probe over its data, in memory (the app's Heads page), judged held out: the table
    :func:`probes.heads.profile.run_probe` gives, with :data:`COLUMNS`. ``progress(done, total)`` as items finish."""
    record = get(probe)
    items = record.items(data, limit)
    step = counting(progress, len(items))
    whole, chosen, judged, evidence = _held_out(
        record, model, items, seed,
        lambda which, subset, watch: [run_chunk(record, model, subset, batch_size, backend, step, watch)])
    return noted(with_model(with_verdicts(whole, chosen, judged, evidence, seed), model),
                 left_out(record, items, model.is_causal))


def split_code() -> str:
    """A digest of this floor's code that decides the halves (a checkpoint of a half is kept only for the same)."""
    here = Path(__file__).resolve().parent
    return digest(b"".join((here / f).read_bytes() for f in ("probes.py", "stats.py")))


def _judged_one(model: ModelLike, name, data, limit, out, partial_dir, batch_size, checkpoint_every, backend,
                progress_factory, notify, strict, executor=None, seed: int = 0) -> pd.DataFrame:
    """One probe's judged table for ``profile``: each half checkpointed on its own (``NAME-chosen``,
    ``NAME-judged``), the second half watching the heads the first chose."""
    probe, items = prepared(model, name, data, limit, out, strict, notify)
    bar = progress_factory(len(items), name) if progress_factory else None
    base = fingerprint(model, probe, items, data, checkpoint_every, backend)

    def half(which: str, subset: list, watch: frozenset) -> list[pd.DataFrame]:
        folder = checkpoint(partial_dir, f"{name}-{which}", {**base, "split": digest([seed, which, sorted(watch)]),
                                                                "split_code": split_code()}, notify)
        return score_chunks(model, probe, subset, folder, batch_size, checkpoint_every, backend, _Shared(bar),
                            executor, notify, watch)

    try:
        whole, chosen, judged, evidence = _held_out(probe, model, items, seed, half)
    finally:
        if bar is not None:
            bar.close()
    return with_verdicts(scored(whole, probe, items, data), chosen, judged, evidence, seed)


class _Shared:
    """One progress bar over both halves: each half's run closes its bar when it ends; the bar itself is closed
    once, after the second."""

    def __init__(self, bar):
        self.bar = bar

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        pass

    def __bool__(self) -> bool:
        return self.bar is not None


def profile(model: ModelLike, probes: list[str], data: str | None, limit: int | None, out: Path, seed: int = 0,
            **options) -> pd.DataFrame:
    """:func:`probes.heads.profile.profile` (the same checkpoints, resume, Ray executor and bad-item report), each
    probe's table judged held out with the split of ``seed`` (:data:`COLUMNS`)."""
    return profile_tables(model, probes, data, limit, out, one=partial(_judged_one, seed=seed), **options)


def verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """The chosen head of every judged label of a table ``profile`` wrote, with its held-out figures and verdict
    (one row a label; empty for a table without them)."""
    if "chosen" not in table:
        return pd.DataFrame(columns=[*KEYS, *COLUMNS])
    chosen = table[table["chosen"].astype(str).str.lower().isin(["true", "1"])]
    return chosen.reset_index(drop=True)
