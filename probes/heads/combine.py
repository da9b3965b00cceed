"""Chunk results -> the result over all the data, exactly.

``profile`` scores its data in checkpointed chunks; a probe's record says how the chunk frames
combine (``Probe.combine``, a function ``(frames, items) -> frame``). Most are :func:`mean`: scores,
mean attention and baselines are means over examples, so the whole is their ``n``-weighted mean; on
top of it a probe may

* rebuild columns the mean cannot (``extra(whole, frame)``, only when there are several chunks:
  positional's verdict from the summed offset histograms, patterns' majority class, induction's
  direction column, see :func:`carry`);
* finish the combined frame from all the items (``finish(frame, items)``, always: the word-pair
  probes' data-only baseline recomputed over all of the data, see :func:`pair_baseline`; lexical's
  controls folded into the baseline).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .engine import COLUMNS, Pair, pair_set_baseline

KEYS = ["probe", "label", "layer", "head"]
MEANS = ("score", "mean_attention", "baseline")
SAME = ("causal",)  # columns a chunk's rows share with every other chunk's (whether the model is a decoder)

Extra = Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]  # (all chunk rows, combined frame) -> frame
Finish = Callable[[pd.DataFrame, list], pd.DataFrame]  # (combined frame, all items) -> frame
Combine = Callable[[list[pd.DataFrame], list], pd.DataFrame]  # (chunk frames, all items) -> frame


def weighted_mean(whole: pd.DataFrame) -> pd.DataFrame:
    """The chunk rows of each (probe, label, layer, head) -> one row: ``n`` summed, the means weighted
    by ``n`` (a mean that is NaN in every chunk stays NaN)."""
    whole = whole.copy()
    for col in MEANS:
        whole[f"_{col}"] = whole[col] * whole["n"]
    total = lambda col: col.sum(min_count=1)  # noqa: E731  (all-NaN stays NaN, not 0)
    agg = whole.groupby(KEYS, sort=False).agg(
        n=("n", "sum"), **{f"_{col}": (f"_{col}", total) for col in MEANS}).reset_index()
    for col in MEANS:
        agg[col] = agg[f"_{col}"] / agg["n"]
    kept = [c for c in SAME if c in whole]  # the same in every chunk: kept as it is
    out = agg[COLUMNS].copy()
    if kept:
        out = out.merge(whole[KEYS + kept].drop_duplicates(KEYS), on=KEYS, how="left")
    return out


def mean(extra: Extra | None = None, finish: Finish | None = None) -> Combine:
    """A ``Probe.combine``: the ``n``-weighted mean of the chunks, then ``extra`` (several chunks only)
    and ``finish`` (always)."""
    def combine(frames: list[pd.DataFrame], items: list) -> pd.DataFrame:
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame(columns=COLUMNS)
        if len(frames) == 1:
            frame = frames[0].copy()
        else:
            whole = pd.concat(frames, ignore_index=True)
            frame = weighted_mean(whole)
            if extra is not None:
                frame = extra(whole, frame)
        if finish is not None:
            frame = finish(frame, items)
        return frame.reset_index(drop=True)
    return combine


def carry(column: str) -> Extra:
    """An ``extra`` keeping a column that is the same in every chunk (e.g. induction's ``direction``)."""
    def extra(whole: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.merge(whole[KEYS + [column]].drop_duplicates(KEYS), on=KEYS, how="left")
    return extra


def causal_of(frame: pd.DataFrame) -> bool:
    """Whether a word-pair probe's frame was scored on a decoder (its ``causal`` column; False without one)."""
    return bool("causal" in frame and len(frame) and frame["causal"].astype(str).str.lower().eq("true").any())


def pair_baseline(pairs: Callable[[list], list[Pair]], kind: str) -> Finish:
    """A ``finish`` for word-pair probes: their baseline depends on the data alone, so it is recomputed
    over all the items' pairs (``pairs(items)``) with the engine's ``kind`` of baseline (on a decoder's frame, the
    pairs it can attend and past offsets only: :func:`probes.heads.engine.pair_set_baseline`)."""
    def finish(frame: pd.DataFrame, items: list) -> pd.DataFrame:
        by_label: dict[str, list[Pair]] = {}
        for p in pairs(items):
            by_label.setdefault(p.label, []).append(p)
        causal = causal_of(frame)
        frame = frame.copy()
        base = {label: pair_set_baseline(by_label.get(label, []), kind, causal) for label in frame["label"].unique()}
        frame["baseline"] = frame["label"].map(base)  # once per label, not per (label, layer, head) row
        return frame
    return finish
