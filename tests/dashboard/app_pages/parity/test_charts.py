"""Parity's chart (dashboard/app_pages/parity/charts.py): max |Δ| of every head on one fixed scale."""

import numpy as np
import specs

from dashboard.app_pages.parity import charts


def test_parity_heatmap_outlines_heads_over_tolerance():
    diffs = np.array([[0.0, 2e-6], [3e-5, 1e-7]])
    spec = charts.parity_heatmap(diffs, 1e-5).to_dict()
    rows = specs.rows(spec)
    assert [r["within"] for r in rows] == [True, True, False, True]
    assert spec["layer"][1]["transform"] == [{"filter": "!datum.within"}]
    assert spec["layer"][0]["encoding"]["color"]["scale"]["type"] == "log"


def test_parity_heatmap_has_one_fixed_scale_and_says_bit_identical_in_words():
    spec = charts.parity_heatmap(np.zeros((2, 3)), 1e-5).to_dict()
    color = spec["layer"][0]["encoding"]["color"]
    assert color["scale"]["domain"] == [1e-9, 1e-3]  # never fitted to the data: zeros do not look like a signal
    assert 1e-5 in color["legend"]["values"] and "tolerance 1e-05" in color["legend"]["title"]
    assert "tolerance 1.5e-05" in specs.said(charts.parity_heatmap(np.zeros((1, 1)), 1.5e-5).to_dict())  # not 2e-05
    assert {r["difference"] for r in specs.rows(spec)} == {"0 (identical)"}
    assert all(r["shown"] == 1e-9 for r in specs.rows(spec))
    big = specs.rows(charts.parity_heatmap(np.array([[3e-2, 2e-6]]), 1e-5).to_dict())
    assert [r["difference"] for r in big] == ["3.0e-02", "2.0e-06"] and big[0]["shown"] == 1e-3
    assert color["scale"]["scheme"] == "orangered" and not color["scale"].get("reverse")  # zeros are pale
