"""The Parity page, driven headless by AppTest: the per-head grid and the verdict, following the
sidebar's source and backend, on the offline encoder and on smollm2."""

from __future__ import annotations

from apptest import open_app as _app
from apptest import rerun as _rerun
from apptest import rows as _rows
from apptest import texts as _texts
from apptest import titles as _titles
from apptest import upload as _upload


def test_parity_page_shows_the_per_head_grid_and_a_pass():
    at = _app(page="parity")
    assert "PASS" in _texts(at.success)
    cells = [r for r in _rows(at, "per head") if "max_abs_diff" in r]
    assert len(cells) == 72 and all(r["within"] for r in cells)
    assert "python -m probes parity --model minilm" in at.code[0].value


def test_parity_page_follows_the_backend_and_heads_grid_follows_the_label():
    at = _app(page="parity", source="scratch", backend="sdpa")
    verdict = _texts(at.success)
    assert "hf vs scratch/sdpa" in verdict and "identical to the last bit" not in verdict
    diffs = [r["max_abs_diff"] for r in _rows(at, "per head")]
    assert 0 < max(diffs) <= 1e-5
    at = _upload(_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score\nsyntactic,nsubj,1,2,0.9\nsyntactic,obj,0,3,0.4\n")
    at.selectbox(key="w_label").set_value("obj")
    _rerun(at)
    assert "obj: score by head, no baseline (click a cell to open it)" in _titles(at)
    assert [(r["layer"], r["head"], r["score"]) for r in _rows(at, "obj: score")] == [(0, 3, 0.4)]


def test_parity_page_and_badge_on_smollm2():
    at = _app(model="smollm2", text="小明把苹果给了小红，因为她很饿", page="parity", source="scratch", backend="sdpa")
    assert "PASS" in _texts(at.success) and "Parity PASS" in _texts(at.sidebar.markdown)
    cells = [r for r in _rows(at, "per head") if "max_abs_diff" in r]
    assert len(cells) == 30 * 9 and all(r["within"] for r in cells)
    assert "--backend sdpa" in at.code[0].value
