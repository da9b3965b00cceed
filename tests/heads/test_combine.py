"""Combining chunk results by the probe records: the n-weighted mean and each probe's extras.
(End-to-end, chunked against whole runs through ``profile``: tests/heads/test_profile.py.)"""

import math

import pandas as pd
import pytest
from numeric import EPS64

from probes.heads.combine import carry, mean, pair_baseline, weighted_mean
from probes.heads.engine import COLUMNS, Pair
from probes.heads.profile import run_chunk
from probes.heads.registry import get


def _row(label, score, n, baseline=0.0, mean_attention=float("nan"), **extra):
    return dict(probe="p", label=label, layer=0, head=0, score=score, baseline=baseline, n=n,
                mean_attention=mean_attention, **extra)


def test_weighted_mean_and_nan_stays_nan():
    whole = pd.DataFrame([_row("a", 1.0, 1), _row("a", 0.25, 3), _row("b", 0.5, 2)])
    frame = weighted_mean(whole).set_index("label")
    assert list(frame.columns) == [c for c in COLUMNS if c != "label"]
    assert frame.loc["a", "score"] == (1.0 + 0.75) / 4 and frame.loc["a", "n"] == 4
    assert math.isnan(frame.loc["a", "mean_attention"])  # NaN in every chunk: not 0


def test_extra_only_with_several_chunks_and_finish_always():
    calls: list[str | tuple[str, int]] = []

    def extra(whole, frame):
        calls.append("extra")
        return frame

    def finish(frame, items):
        calls.append(("finish", len(items)))
        return frame

    combine = mean(extra=extra, finish=finish)
    one = pd.DataFrame([_row("a", 1.0, 1)])
    combine([one], [1])
    assert calls == [("finish", 1)]
    calls.clear()
    combine([one, one.iloc[:0], one], [1, 2])  # empty chunks drop out
    assert calls == ["extra", ("finish", 2)]
    assert list(combine([], []).columns) == COLUMNS


def test_pair_baseline_is_recomputed_over_all_items():
    items = [[Pair(0, 1, "x")], [Pair(3, 4, "x")], [Pair(5, 3, "x")]]  # offsets +1, +1, -2
    finish = pair_baseline(lambda chunk: [p for pairs in chunk for p in pairs], "offset")
    frame = finish(pd.DataFrame([_row("x", 0.5, 3, baseline=1.0), _row("y", 0.5, 1, baseline=1.0)]), items)
    assert frame.loc[0, "baseline"] == 2 / 3 and math.isnan(frame.loc[1, "baseline"])  # no pair labelled y


@pytest.mark.numeric
def test_induction_chunks_combine_as_their_weighted_mean_with_direction(minilm):
    probe = get("induction")
    a, b = run_chunk(probe, minilm, [0, 1, 2]), run_chunk(probe, minilm, [3, 4])
    both = probe.combine([a, b], list(range(5)))
    keys = ["probe", "label", "layer", "head"]
    got = a.merge(b, on=keys, suffixes=("_a", "_b")).merge(both, on=keys)
    assert len(got) == len(both) == len(a)
    expected = (got["score_a"] * 3 + got["score_b"] * 2) / 5
    # (3a + 2b) / 5 in float64, of scores ≤ 1, summed in either order: a few roundings of eps64
    assert ((got["score"] - expected).abs() <= 4 * EPS64).all() and (got["n"] == 5).all()
    assert both[keys + ["direction"]].equals(a[keys + ["direction"]])  # the direction column survives
    assert carry("direction")(pd.concat([a, b]), weighted_mean(pd.concat([a, b])))["direction"].notna().all()
