"""Generate's charts (dashboard/app_pages/generate/charts.py): one head through a generation, the cache's growth."""

import numpy as np
import pandas as pd
import pytest
import specs

from dashboard.app_pages.generate import charts


def test_generation_band_blanks_what_a_step_could_not_see_and_outlines_the_step():
    band = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])  # step 0 saw 2 tokens, step 1 saw 3
    spec = charts.generation_band(["was", " the"], ["she", " was", " the"], band, step=1).to_dict()
    rows = specs.rows(spec)
    assert len(rows) == 5  # the 6th cell (step 0 over " the") is the future of that step: left blank
    assert {(r["step"], r["key_pos"]): r["weight"] for r in rows}[(1, 2)] == 0.5
    assert spec["encoding"]["stroke"]["condition"]["test"] == "(datum.step === 1)"
    windowed = charts.generation_band(["a", "b"], ["x", "y"], np.array([[1.0, 0.0], [0.4, 0.6]]), 0, start=7)
    assert {r["key"] for r in specs.rows(windowed.to_dict())} == {"7: x", "8: y"}
    with pytest.raises(ValueError, match="2×3 weights for 1 steps"):
        charts.generation_band(["a"], ["x", "y", "z"], band, 0)


def test_cache_growth_draws_both_caches_and_marks_the_step():
    frame = pd.DataFrame({"step": [0, 1, 0, 1], "tokens cached": [5, 6, 5, 6], "bytes": [10, 12, 30, 36],
                          "cache": ["3 kv heads", "3 kv heads", "9 kv heads", "9 kv heads"]})
    spec = charts.cache_growth(frame, 1).to_dict()
    lines, rule = spec["layer"]
    assert lines["encoding"]["color"]["scale"]["domain"] == ["3 kv heads", "9 kv heads"]
    marked = spec["datasets"][rule["data"]["name"]]
    assert marked == [{"step": 1, "tokens cached": 6, "bytes": 12, "cache": "3 kv heads", "KiB": 12 / 1024,
                       "size": "12 bytes"}]  # drawn in KiB, the size in words in the tooltip
    assert lines["encoding"]["y"]["title"] == "KiB (fp32)"
