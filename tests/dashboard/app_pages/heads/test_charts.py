"""Heads' readings of a probe table (dashboard/app_pages/heads/charts.py): the label shown first."""

import pandas as pd
import specs

from dashboard.app_pages.heads import charts
from dashboard.core import grid_charts


def test_the_default_label_is_the_one_whose_best_head_gains_most():
    frame = pd.DataFrame({"label": ["acl", "acl", "nsubj", "nsubj", "block"], "score": [0.9, 0.2, 0.8, 0.7, 0.0],
                          "baseline": [0.85, 0.85, 0.3, 0.3, 0.0]})
    assert charts.best_label(frame) == "nsubj"  # 0.5 above its baseline, against acl's 0.05
    assert charts.best_label(frame.drop(columns="baseline")) == "acl"  # no baselines: the best raw score
    corpus = pd.DataFrame({"label": ["distance", "distance", "previous", "first"], "score": [26.6, 12.0, 0.99, 0.8],
                           "baseline": [19.1, 19.1, 0.02, 0.02]})
    assert charts.best_label(corpus) == "previous"  # not distance's 7.5 tokens: shares are compared with shares


def test_the_default_label_has_enough_examples_behind_it():
    """A gain over one example is chance: the grid opens on the best-gaining label with n ≥ ``least`` (syntactic on
    minilm opened on parataxis, 1 example, over nsubj's 38), on the best of all only when none has that many."""
    frame = pd.DataFrame({"label": ["parataxis", "parataxis", "nsubj", "nsubj", "det"],
                          "score": [0.9, 0.1, 0.6, 0.5, 0.4],
                          "baseline": [0.2, 0.2, 0.3, 0.3, 0.3], "n": [1, 1, 38, 38, 31]})
    assert charts.best_label(frame) == "parataxis"  # 0.7 above its baseline, over one example
    assert charts.best_label(frame, least=30) == "nsubj"  # 0.3 above, over 38
    assert charts.best_label(frame.assign(n=12), least=30) == "parataxis"  # none has 30: the best of all
    assert charts.best_label(frame.drop(columns="n"), least=30) == "parataxis"  # a table without counts


def test_the_sink_share_grid_reads_on_a_fixed_share_scale_and_is_never_the_default_label():
    frame = pd.DataFrame({"label": ["sink", "sink", "previous", "previous"], "layer": [0, 1, 0, 1], "head": [0] * 4,
                          "score": [0.95, 0.4, 0.5, 0.3], "baseline": [0.1, 0.1, 0.1, 0.1], "n": [40] * 4})
    spec = grid_charts.head_grid(frame, "sink", 2, 1, share=True).to_dict()
    color = spec["layer"][0]["encoding"]["color"]
    assert color["field"] == "score" and color["scale"]["domain"] == [0, 1]  # a share, not a gain over a baseline
    assert "share of attention from 0 to 1; uniform attention gives 0.1" in specs.said(spec)
    assert {t["field"] for t in spec["layer"][0]["encoding"]["tooltip"]} >= {"score", "baseline"}
    assert charts.best_label(frame) == "sink" and charts.best_label(frame, skip={"sink"}) == "previous"
    assert charts.best_label(frame[frame.label == "sink"], skip={"sink"}) == "sink"  # nothing else to show
