"""The verdict a claim earns from its numbers alone, and the words that say it."""

from __future__ import annotations

from probes.evidence.record import BASELINE, SUPPORTED, TOO_FEW, Baseline, Evidence
from probes.evidence.stats import split_half, wilson


def _claim(hits: int, n: int, baselines: list[Baseline], head=(1, 2)) -> Evidence:
    low, high = wilson(hits, n)
    return Evidence("finds what 'she' refers to", head, "accuracy", n, hits / n, low, high, baselines,
                    split_half(2 * n, 0))


CHANCE = Baseline("chance", 0.5)


def test_supported_only_when_the_interval_clears_every_baseline():
    recent = Baseline("the most recent candidate", 0.5, 0.5, "follows the nearer candidate", "the nearer candidate")
    ev = _claim(41, 48, [CHANCE, recent])
    assert ev.verdict == SUPPORTED and ev.supported
    assert ev.said.startswith("supported: 85 % (95 % interval 73–93 %, n = 48), above chance (50 %)")
    higher = Baseline("the most recent candidate", 0.80, 0.9, "follows the nearer candidate", "the nearer candidate")
    assert _claim(41, 48, [CHANCE, higher]).verdict == BASELINE  # 73 % (its low end) does not clear 80 %


def test_a_head_that_follows_the_nearer_name_is_named_for_it():
    """The issue's head 1.2: 50 % on 48 controls, agreeing with the most recent candidate on 96 %."""
    recent = Baseline("the most recent candidate", 0.5, 0.96, "follows the nearer candidate", "the nearer candidate")
    first = Baseline("the first-mentioned candidate", 0.5, 0.04, "follows the first-mentioned candidate")
    ev = _claim(24, 48, [CHANCE, recent, first])
    assert ev.verdict == BASELINE and ev.tracked is recent
    assert ev.said == ("no better than the most recent candidate: 50 % (95 % interval 36–64 %, n = 48); it agrees "
                       "with the most recent candidate on 96 % (follows the nearer candidate)")


def test_a_head_at_chance_that_tracks_nothing_is_no_better_than_the_best_baseline():
    recent = Baseline("the most recent candidate", 0.5, 0.52, "follows the nearer candidate")
    ev = _claim(26, 48, [CHANCE, recent])
    assert ev.tracked is None  # 52 % agreement is chance agreement, not tracking
    assert ev.said.startswith("no better than chance (50 %): 54 %")


def test_fewer_than_thirty_items_decide_nothing():
    ev = _claim(20, 20, [CHANCE])
    assert ev.verdict == TOO_FEW and ev.said == "too few items (n = 20 < 30): nothing can be concluded"
    none = Evidence("x", None, "accuracy", 0, float("nan"), float("nan"), float("nan"), [], None)
    assert none.verdict == TOO_FEW


def test_the_record_as_plain_values():
    recent = Baseline("the most recent candidate", 0.5, 0.96, "follows the nearer candidate")
    out = _claim(24, 48, [CHANCE, recent]).to_dict()
    assert out["head"] == "1.2" and out["n"] == 48 and out["seed"] == 0
    assert out["chosen_on"] == 48 and out["judged_on"] == 48
    assert out["baselines"] == {"chance": 0.5, "the most recent candidate": 0.5}
    assert out["agreement"] == {"the most recent candidate": 0.96} and out["verdict"] == BASELINE


def test_a_claim_with_no_baseline_is_never_supported():
    ev = _claim(48, 48, [])
    assert ev.verdict == BASELINE and ev.said.startswith("nothing to judge it against (no baseline)")
