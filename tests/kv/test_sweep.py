"""probes.kv.sweep: the KV lab's tables. The policy a kind and a budget name, the runs a sweep needs (a budget that
covers the text is full attention), the sweep's table from real runs on a tiny decoder, the kept-token picture
(exactly seen_by when it is one token a cell, the same counts when binned) and the heads table, most hurt first."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from numeric import F64

from probes.errors import BadOption
from probes.kv import parse
from probes.kv.stream import head_effects, seen_by, static_evictions, stream
from probes.kv.sweep import (
    BINS,
    KINDS,
    heads_frame,
    kept_picture,
    kv_head,
    memory_frame,
    policy_at,
    summary,
    sweep_frame,
    sweep_plan,
)

TEXT = "The cat sat on the mat, and the dog watched it from the door. She said that he would come back."


@pytest.fixture(scope="module")
def llama(llama_dir):
    import probes

    return probes.load(str(llama_dir))


def test_each_kind_at_a_budget_is_the_policy_that_reads_that_many_keys():
    assert policy_at("window", 32) == parse("window:32")
    assert policy_at("sinks", 32) == parse("sinks:4+window:28") and policy_at("sinks", 32).budget == 32
    assert policy_at("sinks", 32, sinks=2) == parse("sinks:2+window:30")
    assert policy_at("h2o", 32) == parse("h2o:32") and policy_at("tova", 1) == parse("tova:1")
    assert policy_at("snapkv", 64) == parse("snapkv:64")
    assert policy_at("strided", 16) == parse("strided:16+window:16")
    assert [policy_at(k, 16).kind for k in KINDS] == ["window", "sinks", "h2o", "tova", "snapkv", "strided"]
    with pytest.raises(BadOption, match="no room for a window after 4 sinks"):
        policy_at("sinks", 4)
    with pytest.raises(BadOption, match="at least 1 key"):
        policy_at("window", 0)
    with pytest.raises(BadOption, match="2 keys or more"):
        policy_at("h2o", 1)
    with pytest.raises(BadOption, match="unknown policy kind"):
        policy_at("lru", 16)


def test_a_sweep_leaves_out_the_budgets_that_cover_the_text_and_says_why_a_kind_cannot_run():
    plan = sweep_plan(["window", "sinks"], [128, 4, 16, 64, 16], tokens=64)
    assert plan.covered == [64, 128]  # at or above the text's length: full attention
    assert [(r.kind, r.budget) for r in plan.runs] == [("window", 4), ("window", 16), ("sinks", 16)]
    assert len(plan.skipped) == 1 and plan.skipped[0].startswith("sinks + window at 4: ")
    everything = sweep_plan(["h2o"], [16, 32], tokens=12)
    assert everything.runs == [] and everything.covered == [16, 32]


@pytest.mark.numeric
def test_the_sweep_table_has_one_row_per_run_with_its_bytes_and_perplexity(llama):
    plan = sweep_plan(["window", "sinks", "strided"], [8, 16], tokens=int(stream(llama, TEXT, parse("full"),
                                                                                    method="masked").tokens))
    runs = [summary(stream(llama, TEXT, p.policy, method="masked")) for p in plan.runs]
    frame = sweep_frame(plan.runs, runs)
    assert list(frame["name"]) == [p.policy.name for p in plan.runs] and len(frame) == len(plan.runs)
    assert list(frame["policy"]) == [KINDS[p.kind] for p in plan.runs]
    for (_, row), run in zip(frame.iterrows(), runs, strict=True):
        # float64 both ways (exp of a mean of float64 losses; one division): a few roundings, within F64
        assert row["perplexity"] == pytest.approx(np.exp(run["losses"].mean()), rel=F64, abs=0)
        assert row["saved"] == pytest.approx(1 - run["kv_bytes"] / run["full_kv_bytes"], rel=F64, abs=F64)
    window = frame.set_index("name").loc["window:8"]
    assert window["kv_bytes"] == 8 / runs[0]["tokens"] * window["full_kv_bytes"]  # 8 keys of every head, at most
    assert (frame.loc[frame["kind"] == "strided", "saved"] == 0).all()  # strided keeps every key
    assert isinstance(runs[0]["evicted_at"], np.ndarray) and runs[0]["evicted_at"].dtype == np.int32
    with pytest.raises(ValueError):
        sweep_frame(plan.runs, runs[:1])


def test_one_token_a_cell_the_picture_is_what_the_head_read():
    policy = parse("sinks:2+window:5")
    n = 30
    picture = kept_picture(policy, static_evictions(policy, n))
    assert (picture["key_end"] - picture["key"] == 1).all() and len(picture) == n * (n + 1) // 2  # no future cells
    grid = np.full((n, n), -1.0)
    grid[picture["step"], picture["key"]] = picture["kept"]
    seen = seen_by(policy, static_evictions(policy, n)).numpy()
    causal = np.tril(np.ones((n, n), dtype=bool))
    assert np.array_equal(grid[causal], seen[causal].astype(float))
    assert (picture.loc[picture["key"] < 2, "kept"] == 1).all()  # the sinks: kept to the end


def test_a_long_text_is_binned_to_at_most_bins_a_side_with_the_same_counts():
    policy = parse("strided:7+window:9")
    n = 250
    evicted = torch.full((n,), n, dtype=torch.int32)
    picture = kept_picture(policy, evicted, bins=BINS)
    size = int(np.ceil(n / BINS))
    assert picture["step"].nunique() <= BINS and set(picture["key_end"] - picture["key"]) <= {size, n % size}
    seen = seen_by(policy, evicted).numpy()
    assert (picture["kept"] * picture["pairs"]).round().sum() == seen.sum()
    assert picture["pairs"].sum() == n * (n + 1) // 2
    assert picture["kept"].between(0, 1).all()


def test_the_heads_table_is_every_key_value_head_most_hurt_first(llama):
    got = head_effects(llama, TEXT, [parse("window:6")])
    frame = heads_frame(got.rows)
    assert len(frame) == llama.n_layers * llama.n_kv_heads
    assert list(frame["loss_change"]) == sorted(frame["loss_change"], reverse=True)
    group = llama.n_heads // llama.n_kv_heads
    assert list(frame["head"]) == [k * group for k in frame["kv_head"]]
    assert list(frame["query_heads"]) == [f"{k * group}–{k * group + group - 1}" for k in frame["kv_head"]]
    assert set(frame.columns) >= {"layer", "kv_head", "loss_change", "mass", "seen_fraction"}
    assert isinstance(frame, pd.DataFrame)


def test_a_query_head_reads_its_groups_key_value_head():
    assert [kv_head(h, 9, 3) for h in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert kv_head(5, 12, 12) == 5
    with pytest.raises(ValueError):
        kv_head(0, 9, 2)


def test_the_memory_table_names_together_the_policies_that_hold_the_same_bytes():
    sweep = pd.DataFrame([dict(kind=k, policy=KINDS[k], name=f"{k}:{b}", budget=b, perplexity=1.0,
                               kv_bytes=(256 if k == "strided" else b) * 10, full_kv_bytes=2560,
                               saved=1 - (256 if k == "strided" else b) / 256,
                               seen_fraction=(b / 200 if k != "strided" else b / 150))
                          for k in ("window", "sinks", "strided") for b in (16, 64)])
    memory = memory_frame(sweep)
    assert list(memory["budget"]) == [16, 16, 64, 64]
    assert list(memory["policies"]) == ["window, sinks + window", "strided", "window, sinks + window", "strided"]
    assert list(memory["saved"]) == [1 - 16 / 256, 0.0, 1 - 64 / 256, 0.0]
    assert list(memory.columns) == ["budget", "policies", "kv_bytes", "full_kv_bytes", "saved", "seen_fraction"]


def test_the_old_module_name_still_imports_the_same_names_with_a_warning():
    import importlib
    import sys

    from probes.kv import sweep

    sys.modules.pop("probes.kv.views", None)  # imported before by another test: its warning is said once an import
    with pytest.warns(DeprecationWarning, match="probes.kv.views is now probes.kv.sweep"):
        views = importlib.import_module("probes.kv.views")
    assert views.__all__ and all(getattr(views, name) is getattr(sweep, name) for name in views.__all__)
    assert {"KINDS", "policy_at", "sweep_plan", "sweep_frame", "kept_picture", "heads_frame"} <= set(views.__all__)
