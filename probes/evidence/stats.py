"""The statistics behind a verdict: which items a claim is chosen on and which it is judged on (a seeded
split), and 95 % intervals, from SciPy rather than written here: Wilson's interval for an accuracy (a count of
hits among n), a bootstrap interval for a mean (or a ratio of sums, when items hold several examples each)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95  # every interval the project reports is a 95 % interval
RESAMPLES = 2000  # bootstrap resamples: the interval's ends move by about 0.01 of its width between seeds


@dataclass(frozen=True)
class Split:
    """Items 0..n−1 cut in two by a seeded shuffle: a claim is made (its head chosen) on ``chosen_on`` and judged on
    ``judged_on``, never on an item it was chosen on. The same ``seed`` and ``n`` give the same split, on any
    machine (NumPy's PCG64 stream)."""

    seed: int
    chosen_on: tuple[int, ...]
    judged_on: tuple[int, ...]

    @property
    def n(self) -> int:
        return len(self.chosen_on) + len(self.judged_on)


def split_half(n: int, seed: int = 0) -> Split:
    """The split-half of ``n`` items: ⌊n/2⌋ chosen on, the rest (the larger half when n is odd) judged on."""
    if n < 0:
        raise ValueError(f"n={n}: a count of items")
    order = np.random.default_rng(seed).permutation(n)
    half = n // 2
    return Split(int(seed), tuple(sorted(int(i) for i in order[:half])), tuple(sorted(int(i) for i in order[half:])))


def wilson(hits: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval of an accuracy of ``hits`` out of ``n`` (SciPy's ``binomtest``); (nan, nan) for
    n = 0. Unlike mean ± 1.96·sd it stays inside 0..1 and is honest at 0 and at n hits."""
    if n <= 0:
        return math.nan, math.nan
    from scipy.stats import binomtest

    hits = int(min(max(round(hits), 0), n))
    ci = binomtest(hits, int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def bootstrap_mean(values: Sequence[float] | np.ndarray, level: float = LEVEL, seed: int = 0,
                   resamples: int = RESAMPLES) -> tuple[float, float]:
    """A bootstrap interval (SciPy's ``bootstrap``, BCa) of the mean of ``values``, one per item; (nan, nan) for no
    value, the value itself for values that are all equal (no spread to resample)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan
    if np.ptp(x) == 0 or len(x) < 2:
        return float(x[0]), float(x[0])
    from scipy.stats import bootstrap

    res = bootstrap((x,), np.mean, confidence_level=level, n_resamples=resamples, method="BCa",
                    rng=np.random.default_rng(seed))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):  # BCa undefined (e.g. one odd value): percentile instead
        res = bootstrap((x,), np.mean, confidence_level=level, n_resamples=resamples, method="percentile",
                        rng=np.random.default_rng(seed))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return low, high


def bootstrap_ratio(sums: Sequence[float], counts: Sequence[float], level: float = LEVEL, seed: int = 0,
                    resamples: int = RESAMPLES) -> tuple[float, float]:
    """A bootstrap interval of Σ sums / Σ counts, resampling items (SciPy's ``bootstrap``, paired, percentile):
    the interval of a mean over examples (tokens, pairs) when the examples come in items (sentences) that are
    not independent inside, so the item, not the example, is what is drawn again."""
    s, c = (np.asarray(v, dtype=np.float64) for v in (sums, counts))
    keep = np.isfinite(s) & np.isfinite(c) & (c > 0)
    s, c = s[keep], c[keep]
    if len(s) == 0:
        return math.nan, math.nan
    ratio = s / c
    if np.ptp(ratio) == 0 or len(s) < 2:
        value = float(s.sum() / c.sum())
        return value, value
    from scipy.stats import bootstrap

    res = bootstrap((s, c), lambda a, b, axis=-1: a.sum(axis) / b.sum(axis), paired=True, vectorized=True,
                    confidence_level=level, n_resamples=resamples, method="percentile",
                    rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
