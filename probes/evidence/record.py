"""One evidence record for every claim "head L.H does X", and the verdict it earns.

A claim carries the items its head was **chosen on** and the items it is **judged on** (disjoint: a seeded
split-half, :func:`probes.evidence.stats.split_half`), the held-out score with a 95 % interval, and the
**baselines** that would explain the score without the head (the most recent candidate, a fixed offset, chance,
the noise floor of an edge…), each with its score on the same held-out items and, where it predicts item by item,
how often the head agrees with it. The verdict follows from those numbers alone (:func:`verdict`):

* ``supported``: n ≥ :data:`MIN_ITEMS` and the interval's lower end clears every baseline;
* ``baseline``: it does not; the words name what explains it: the baseline the head agrees with most when that
  agreement is beyond chance and beyond its own accuracy ("follows the nearer name: agrees with the most recent
  candidate on 96 %"), else the best-scoring baseline ("no better than chance (50 %)");
* ``too few``: fewer than :data:`MIN_ITEMS` items judged (an interval that wide decides nothing).

A claim with no baseline at all is never supported: there is nothing it was shown to beat.

Nothing here computes a score: the probes, the question scorer and the effects do, and hand their numbers in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .stats import Split, wilson

MIN_ITEMS = 30  # fewer judged items than this: "too few items", whatever the score
SUPPORTED, BASELINE, TOO_FEW = "supported", "baseline", "too few"


@dataclass(frozen=True)
class Baseline:
    """What would explain the score without the head, scored on the judged items."""

    name: str  # "the most recent candidate", "chance", "the best fixed offset (−1)"
    score: float  # its score on the judged items (an accuracy, a mean, a floor)
    agreement: float | None = None  # share of judged items where the head's pick is this baseline's (None: no picks)
    tracks: str = ""  # what a head that agrees with it does, in words: "follows the nearer name"
    picks: str = ""  # what the baseline picks, for "…, <picks> 96 %": "the nearer name"


@dataclass
class Evidence:
    """A claim about one head, judged. ``score``/``low``/``high`` are on the judged items only."""

    claim: str  # "picks the referent of 'she'", "det (head→dep)"
    head: tuple[int, int] | None  # (layer, head); None: no head could be chosen
    measure: str  # "accuracy" (hits / n: Wilson) or "mean" (a bootstrap interval)
    n: int  # judged items (pairs, for an accuracy over pairs)
    score: float
    low: float
    high: float
    baselines: list[Baseline]
    split: Split | None  # None: the head was given, not chosen, and is judged on every item
    chosen_score: float | None = None  # the head's score on the items it was chosen on
    unit: str = "items"  # what n counts: items, pairs, controls
    notes: list[str] = field(default_factory=list)  # how the items were made, what was left out

    @property
    def verdict(self) -> str:
        return verdict(self)[0]

    @property
    def said(self) -> str:
        """The verdict in words (:func:`verdict`)."""
        return verdict(self)[1]

    @property
    def supported(self) -> bool:
        return self.verdict == SUPPORTED

    @property
    def best_baseline(self) -> Baseline | None:
        scored = [b for b in self.baselines if b.score == b.score]
        return max(scored, key=lambda b: b.score) if scored else None

    @property
    def tracked(self) -> Baseline | None:
        """The baseline the head's picks follow: the one it agrees with most, when that agreement's interval is
        above chance and the agreement is above the head's own accuracy (None: none does)."""
        chance = next((b.score for b in self.baselines if b.name == "chance"), 0.5)
        ranked = sorted(((b, b.agreement) for b in self.baselines if b.agreement is not None), key=lambda p: -p[1])
        for b, agreement in ranked[:1]:
            low = wilson(round(agreement * self.n), self.n)[0]
            if low > chance and agreement > self.score:
                return b
        return None

    def to_dict(self) -> dict:
        """Plain values (JSON): the head as "L.H", the split's seed and sizes, each baseline by name."""
        return dict(claim=self.claim, head=None if self.head is None else f"{self.head[0]}.{self.head[1]}",
                    measure=self.measure, n=self.n, unit=self.unit, score=_plain(self.score), low=_plain(self.low),
                    high=_plain(self.high), chosen_score=_plain(self.chosen_score),
                    baselines={b.name: _plain(b.score) for b in self.baselines},
                    agreement={b.name: _plain(b.agreement) for b in self.baselines if b.agreement is not None},
                    verdict=self.verdict, said=self.said,
                    seed=None if self.split is None else self.split.seed,
                    chosen_on=None if self.split is None else len(self.split.chosen_on),
                    judged_on=None if self.split is None else len(self.split.judged_on), notes=list(self.notes))


def _plain(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def percent(x: float) -> str:
    return f"{100 * x:.0f} %"


def span(low: float, high: float, measure: str = "accuracy") -> str:
    """An interval as a reader reads it: "36–64 %", or "0.12–0.31" for a mean."""
    if measure == "accuracy":
        return f"{100 * low:.0f}–{100 * high:.0f} %"
    return f"{low:.3g} to {high:.3g}"


def figure(x: float, measure: str) -> str:
    """A score as a reader reads it: an accuracy as a percentage, a mean as a number."""
    return percent(x) if measure == "accuracy" else f"{x:.3g}"


def verdict(ev: Evidence, min_items: int = MIN_ITEMS) -> tuple[str, str]:
    """(kind, words): ``supported``, ``baseline`` or ``too few``, and the sentence that says it."""
    if ev.head is None or ev.n < min_items or not (ev.low == ev.low):
        return TOO_FEW, f"too few {ev.unit} (n = {ev.n} < {min_items}): nothing can be concluded"
    best = ev.best_baseline
    shown = f"{figure(ev.score, ev.measure)} (95 % interval {span(ev.low, ev.high, ev.measure)}, n = {ev.n})"
    if best is None:
        return BASELINE, f"nothing to judge it against (no baseline): {shown}"
    if ev.low > best.score:
        return SUPPORTED, f"supported: {shown}, above {best.name} ({figure(best.score, ev.measure)})"
    tracked = ev.tracked
    if tracked is not None and tracked.agreement is not None:  # (a tracked baseline has its agreement)
        return BASELINE, (f"no better than {tracked.name}: {shown}; it agrees with {tracked.name} on "
                          f"{percent(tracked.agreement)} ({tracked.tracks})")
    return BASELINE, f"no better than {best.name} ({figure(best.score, ev.measure)}): {shown}"
