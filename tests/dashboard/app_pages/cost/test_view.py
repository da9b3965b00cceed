"""The Cost page's KV-cache section, driven headless by AppTest: the formula against context length, the
bytes measured on the cache's own tensors, time per new token cached against recompute, and the note an
encoder gets."""

from __future__ import annotations

import json

from apptest import open_app as _app, rerun as _rerun, specs as _specs, titles as _titles

from dashboard.core import words
from probes.cost import CACHED, RECOMPUTE


def test_a_decoder_measures_its_cache_against_the_formula(smollm2):
    at = _app(model="smollm2", page="cost")
    assert "KV cache of smollm2 (fp32)" in _titles(at) and "Time per new token (s), CPU" in _titles(at)
    at.button(key="decode_measure").click()
    at.run()
    assert not at.exception
    measured = at.dataframe[-1].value  # the table as people read it: sizes in KiB/MiB, not byte counts
    cached = measured[measured.path == CACHED]
    assert list(cached.tokens) == [32, 64, 128, 256]
    assert list(cached["cache"]) == [words.size(2 * 30 * 3 * 64 * n * 4) for n in cached.tokens]
    assert list(cached["cache"]) == list(cached["cache by the formula"]) and "bytes" not in " ".join(cached["cache"])
    assert set(measured.path) == {CACHED, RECOMPUTE} and (measured["seconds per token"] > 0).all()
    assert any("equal the formula" in c.value for c in at.caption)


def test_an_encoder_gets_a_note_instead_of_a_cache():
    at = _app(page="cost")
    assert any("does not write text" in i.value for i in at.info) and not at.error
    assert "Time per new token (s), CPU" in _titles(at)  # the saved benchmark is still drawn


def test_cost_page_draws_the_saved_benchmark_and_measures_live():
    at = _app(page="cost")
    specs = _specs(at)
    assert any("c·L² (quadratic)" in json.dumps(s, ensure_ascii=False) for s in specs)
    at.multiselect(key="cost_lengths").set_value([16, 32])
    at.button[0].click()
    _rerun(at)
    live = at.dataframe[0].value
    assert sorted(live["tokens"].unique()) == [16, 32] and (live["seconds"] > 0).all()
