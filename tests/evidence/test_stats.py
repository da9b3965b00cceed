"""The split and the intervals behind every verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numeric import F64

from probes.evidence.stats import bootstrap_mean, bootstrap_ratio, split_half, wilson


def _wilson_by_hand(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's score interval from its formula (Wilson 1927), the reference the library's must equal."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.numeric
@pytest.mark.parametrize("k, n", [(24, 48), (0, 10), (48, 48), (127, 254), (3, 31)])
def test_wilson_is_the_score_interval_of_the_formula(k, n):
    low, high = wilson(k, n)
    ref = _wilson_by_hand(k, n)
    assert low == pytest.approx(max(ref[0], 0.0), abs=F64, rel=0)
    assert high == pytest.approx(min(ref[1], 1.0), abs=F64, rel=0)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_the_issues_figure_127_of_254_is_chance():
    """The crowned head of the story picks the right antecedent 127 times of 254: its interval holds 0.5."""
    low, high = wilson(127, 254)
    assert low < 0.5 < high and high - low < 0.13


def test_no_items_give_no_interval():
    assert all(math.isnan(x) for x in wilson(0, 0))
    assert all(math.isnan(x) for x in bootstrap_mean([]))
    assert all(math.isnan(x) for x in bootstrap_ratio([], []))


def test_the_split_is_disjoint_covers_every_item_and_is_the_same_for_the_same_seed():
    for n in (0, 1, 2, 7, 96, 1001):
        s = split_half(n, seed=3)
        assert not set(s.chosen_on) & set(s.judged_on)
        assert sorted(s.chosen_on + s.judged_on) == list(range(n))
        assert len(s.chosen_on) == n // 2 and len(s.judged_on) == n - n // 2
        assert split_half(n, seed=3) == s
    assert split_half(96, 0) != split_half(96, 1)


def test_a_bootstrap_interval_of_a_mean_holds_it_and_narrows_with_more_items():
    rng = np.random.default_rng(0)
    few, many = rng.normal(0.3, 1.0, 40), rng.normal(0.3, 1.0, 4000)
    lo_few, hi_few = bootstrap_mean(few)
    lo_many, hi_many = bootstrap_mean(many)
    assert lo_few < few.mean() < hi_few and lo_many < many.mean() < hi_many
    assert hi_many - lo_many < (hi_few - lo_few) / 5
    assert lo_many < 0.3 < hi_many  # the true mean, at 4000 items
    assert bootstrap_mean([0.2] * 30) == (0.2, 0.2)  # no spread: the value itself


def test_a_ratio_interval_resamples_items_not_examples():
    """Ten items of 100 examples each, five all hits and five all misses: 1000 examples but 10 items. Resampling
    items, the interval is as wide as ten coin flips', not as 1000 examples' would be."""
    sums, counts = [100] * 5 + [0] * 5, [100] * 10
    low, high = bootstrap_ratio(sums, counts)
    assert low < 0.5 < high and high - low > 0.4
    assert bootstrap_ratio([2, 4, 6], [4, 8, 12]) == (0.5, 0.5)  # every item's ratio the same
