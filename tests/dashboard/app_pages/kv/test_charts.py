"""dashboard/app_pages/kv/charts.py: the KV page's charts as specs (validated by to_dict). Perplexity against the budget
with the full cache's rule (a log scale only when the values span a wide range), the kept-token picture on one hue (kept
against evicted, never a diverging scale), and the heads most hurt as bars whose click selects layer and first query
head."""

from __future__ import annotations

import altair as alt
import pandas as pd

from dashboard.app_pages.kv import charts
from probes.kv import parse
from probes.kv.stream import static_evictions
from probes.kv.sweep import kept_picture


def _sweep(perplexities: dict[tuple[str, int], float]) -> pd.DataFrame:
    return pd.DataFrame([dict(kind=kind, policy={"window": "window", "sinks": "sinks + window"}[kind],
                              name=f"{kind}:{budget}", budget=budget, perplexity=p, kv_bytes=budget * 1000,
                              full_kv_bytes=256_000, saved=1 - budget / 256, seen_fraction=budget / 256)
                         for (kind, budget), p in perplexities.items()])


def _layers(spec: dict) -> list[dict]:
    return spec["layer"]


def test_perplexity_against_the_budget_with_the_full_caches_rule():
    frame = _sweep({("window", 16): 80.0, ("window", 64): 70.0, ("sinks", 16): 66.0, ("sinks", 64): 64.0})
    spec = charts.budget_chart(frame, full=63.0, tokens=256).to_dict()
    lines, rule, label = _layers(spec)
    assert lines["encoding"]["y"]["scale"]["zero"] is False  # 63 to 80: a linear scale
    assert "type" not in lines["encoding"]["y"]["scale"]
    assert lines["encoding"]["x"]["scale"]["type"] == "log" and lines["encoding"]["x"]["axis"]["values"] == [16, 64]
    assert lines["encoding"]["color"]["scale"]["domain"] == ["window", "sinks + window"]
    assert rule["mark"]["type"] == "rule" and rule["mark"]["strokeDash"] == [5, 4]
    assert "full cache: 63.00" in str(spec["datasets"])
    tips = [t.get("title", t["field"]) for t in lines["encoding"]["tooltip"]]
    assert "KV cache held" in tips and "memory saved" in tips


def test_a_wide_range_of_perplexities_is_read_on_a_log_scale():
    frame = _sweep({("window", 16): 900.0, ("window", 64): 120.0, ("sinks", 16): 70.0})
    spec = charts.budget_chart(frame, full=63.0, tokens=256).to_dict()
    y = _layers(spec)[0]["encoding"]["y"]
    assert y["scale"]["type"] == "log" and y["scale"]["nice"] is False and "log scale" in y["title"]


def test_the_kept_picture_is_one_hue_from_evicted_to_kept():
    policy = parse("sinks:2+window:4")
    frame = kept_picture(policy, static_evictions(policy, 12))
    tokens = [f"t{i}" for i in range(12)]
    spec = charts.kept_map(frame, tokens, "kept").to_dict()
    colour = spec["encoding"]["color"]  # one token a cell: kept or evicted, two swatches of one hue
    assert colour["field"] == "state" and colour["scale"] == {"domain": ["kept", "evicted"],
                                                             "range": [charts.KEPT, charts.EVICTED]}
    assert spec["encoding"]["y"]["scale"]["reverse"] is True  # steps down
    assert spec["encoding"]["x2"]["field"] == "key_end" and spec["mark"]["type"] == "rect"
    assert any(t.get("title") == "key token" for t in spec["encoding"]["tooltip"])  # one token a cell: named


def test_the_heads_most_hurt_are_bars_whose_click_selects_layer_and_head():
    frame = pd.DataFrame([dict(policy="window:8", layer=layer, kv_head=k, query_heads=f"{3 * k}–{3 * k + 2}",
                               head=3 * k, loss_change=0.1 * (layer + k), mass=0.9, seen_fraction=0.5)
                          for layer in range(20) for k in range(2)]).sort_values("loss_change", ascending=False)
    spec = charts.hurt_bars(frame, "most hurt").to_dict()
    assert spec["params"][0]["name"] == "head" and spec["params"][0]["select"]["fields"] == ["layer", "head"]
    assert len(spec["encoding"]["y"]["sort"]) == charts.TOP
    assert spec["encoding"]["y"]["sort"][0] == "layer 19, kv head 1"


def test_a_binned_picture_shades_each_cell_by_the_share_kept():
    policy = parse("window:40")
    frame = kept_picture(policy, static_evictions(policy, 300), bins=100)
    with alt.data_transformers.disable_max_rows():  # (the app ships it as Arrow: no row limit there)
        spec = charts.kept_map(frame, [f"t{i}" for i in range(300)], "kept").to_dict()
    colour = spec["encoding"]["color"]
    assert colour["field"] == "kept" and colour["scale"]["domain"] == [0, 1]
    assert colour["scale"]["range"] == [charts.EVICTED, charts.KEPT] and "scheme" not in colour["scale"]
    assert not any(t.get("title") == "key token" for t in spec["encoding"]["tooltip"])


def test_a_perplexity_past_a_float_is_left_out_of_the_chart():
    frame = _sweep({("window", 4): float("inf"), ("window", 16): 900.0, ("window", 64): 120.0})
    spec = charts.budget_chart(frame, full=63.0, tokens=256).to_dict()
    drawn = next(v for k, v in spec["datasets"].items() if any("name" in r for r in v))
    assert sorted(r["name"] for r in drawn) == ["window:16", "window:64"]
    assert spec["layer"][0]["encoding"]["y"]["axis"]["values"] == [50.0, 100.0, 200.0, 500.0, 1000.0]
