"""The Parity page, driven headless by AppTest: the per-head grid and the verdict, following the
sidebar's source and backend, on the offline encoder and on smollm2."""

from __future__ import annotations

import pytest
from apptest import (
    open_app as _app,
    rerun as _rerun,
    rows as _rows,
    texts as _texts,
    titles as _titles,
    upload as _upload,
)
from numeric import F64

from dashboard.core.state import DEFAULT_TEXT as DEFAULT  # the app's opening text
from probes import parity
from probes.parity import TOLERANCES


def test_parity_page_shows_the_per_head_grid_and_a_pass():
    at = _app(page="parity")
    assert "PASS" in _texts(at.success)
    cells = [r for r in _rows(at, "per head") if "max_abs_diff" in r]
    assert len(cells) == 72 and all(r["within"] for r in cells)
    assert "python -m probes parity --model minilm" in at.code[0].value


@pytest.mark.numeric
def test_parity_page_follows_the_backend_and_heads_grid_follows_the_label():
    at = _app(page="parity", source="scratch", backend="sdpa")
    verdict = _texts(at.success)
    assert "Hugging Face vs ours (sdpa)" in verdict and "identical to the last bit" not in verdict
    diffs = [r["max_abs_diff"] for r in _rows(at, "per head")]
    assert 0 < max(diffs) <= TOLERANCES["attention"]  # fp32 rounding of a row of under 128 keys: eps × 128
    at = _upload(_app(page="heads"), "mine.csv",
                 b"probe,label,layer,head,score\nsyntactic,nsubj,1,2,0.9\nsyntactic,obj,0,3,0.4\n")
    at.selectbox(key="w_label").set_value("obj")
    _rerun(at)
    assert "obj: score by head, no baseline (click a cell to open it)" in _titles(at)
    assert [(r["layer"], r["head"], r["score"]) for r in _rows(at, "obj: score")] == [(0, 3, 0.4)]


def test_parity_says_what_it_compared_in_words_and_a_difference_of_zero_as_identical():
    """minilm's eager pass equals Hugging Face's to the last bit: the verdict names the two passes in words (not
    "hf vs scratch/eager"), every figure of 0 reads "0 (identical)" (not "0.0e+00"), in the sidebar's badge too."""
    at = _app(page="parity")
    verdict = _texts(at.success)
    assert "Hugging Face vs ours (eager)" in verdict and "hf vs" not in verdict and "scratch/" not in verdict
    assert [m.value for m in at.metric] == ["0 (identical)", "0 (identical)", "n/a", "0 (identical)"]
    assert "0 (identical)" in _texts(at.sidebar.markdown) and "e+00" not in _texts(at.sidebar.markdown)
    assert "e+00" not in "\n".join([verdict, _texts(at.caption), *(m.help or "" for m in at.metric)])
    assert {r["difference"] for r in _rows(at, "per head")} == {"0 (identical)"}  # the grid's tooltip


def test_parity_page_and_badge_on_smollm2():
    at = _app(model="smollm2", text="小明把苹果给了小红，因为她很饿", page="parity", source="scratch", backend="sdpa")
    assert "PASS" in _texts(at.success) and "Parity PASS" in _texts(at.sidebar.markdown)
    cells = [r for r in _rows(at, "per head") if "max_abs_diff" in r]
    assert len(cells) == 30 * 9 and all(r["within"] for r in cells)
    assert "--backend sdpa" in at.code[0].value


def _prove(at):
    """Click "Prove in float64" (there is one such button, or none)."""
    buttons = [b for b in at.button if b.label == "Prove in float64"]
    assert len(buttons) == 1, [b.label for b in at.button]
    buttons[0].click()
    return _rerun(at)


@pytest.mark.numeric
def test_prove_in_float64_shows_the_proof_and_the_badge_says_so_for_that_input(minilm):
    at = _app(page="parity", source="scratch", backend="sdpa")
    assert "Parity PASS · max |Δ|" in _texts(at.sidebar.markdown)
    at = _prove(at)
    proof = next(s for s in _texts(at.success).splitlines() if s.startswith("Proven in float64"))
    assert "our pass (sdpa) and Hugging Face's compute the same function" in proof and "(tolerance 1e-10)" in proof
    want = parity.check(minilm, DEFAULT, backend="sdpa", dtype="float64")  # the figures the page shows
    assert want.proven and want.attention_max_abs_diff <= F64
    assert f"attention max |Δ| {want.attention_max_abs_diff:.0e}" in proof
    assert "Parity PASS · proven in float64" in _texts(at.sidebar.markdown)
    assert "--dtype float64" in at.code[0].value and not [b for b in at.button if b.label == "Prove in float64"]
    at.session_state["goto"] = "explore"  # the badge follows the input to every page
    _rerun(at)
    assert "Parity PASS · proven in float64" in _texts(at.sidebar.markdown)
    at.radio(key="w_backend").set_value("eager")  # another input: not proven until asked
    _rerun(at)
    assert "Parity PASS · max |Δ|" in _texts(at.sidebar.markdown) and "proven" not in _texts(at.sidebar.markdown)


def test_cancel_stops_the_float64_proof_and_keeps_no_proof(monkeypatch):
    """Issue 44: the float64 proof has a progress bar with a Cancel button. Cancelled at its first step, the page is
    back where it was (the button again), with no proof kept and no badge; pressed again, it runs every step."""
    from apptest import cancel_at_first_update

    shown = cancel_at_first_update(monkeypatch, "proof")
    at = _app(page="parity", source="scratch", backend="eager", text="The proof was stopped by a click.")
    at = _prove(at)
    assert not at.exception, at.exception
    assert "Proven in float64" not in _texts(at.success) and "proven" not in _texts(at.sidebar.markdown)
    assert shown == [0.0, 1 / 9]  # the bar, then the float64 copy made (1 of 3 + 6 steps on minilm): cancelled
    at = _prove(at)  # the button is back; pressed again, the proof runs to its end
    assert "Proven in float64" in _texts(at.success) and "proven in float64" in _texts(at.sidebar.markdown)
    assert shown[2:] == [done / 9 for done in range(10)]


def test_flash_cannot_be_proven_in_float64_and_the_page_says_what_to_do():
    at = _app(page="parity", source="scratch", backend="flash")
    assert "cannot be proven in float64: pick the eager or sdpa backend in the sidebar" in _texts(at.caption)
    assert not [b for b in at.button if b.label == "Prove in float64"]


def test_a_public_deployment_does_not_make_a_float64_copy_of_smollm2(monkeypatch):
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    at = _prove(_app(page="parity", model="smollm2", source="scratch", backend="eager"))
    assert ("The float64 proof could not run: a float64 copy of smollm2 would take 1.0 GiB, over the 0.5 GiB "
            "allowed here") in _texts(at.warning)
    assert "proven" not in _texts(at.sidebar.markdown) and not at.exception


def test_parity_page_lists_smollm2s_massive_activations_and_says_when_there_are_none():
    at = _app(model="smollm2", page="parity")  # the story sentence
    assert "Massive activations" in [s.value for s in at.subheader]
    table = next(d.value for d in at.dataframe if "dimension" in d.value.columns)
    assert list(table.columns) == ["layer", "dimension", "value", "× median"]  # token and position: the same in
    assert "In every row: token: X; position: 0." in _texts(at.caption)     # every row, said once above it
    first = table.iloc[0]
    assert (first["layer"], first["dimension"]) == (11, 507) and table["value"].abs().max() > 20_000
    assert "over 100 and over 1,000 × the median size" in _texts(at.caption)
    plain = _app(page="parity")  # the offline encoder has none
    assert "No massive activations in minilm on this text" in _texts(plain.info)
    assert not [d for d in plain.dataframe if "dimension" in d.value.columns]


def test_a_public_deployment_says_the_logits_were_not_compared(monkeypatch):
    """A public app keeps no logits in its traces (half a long SmolLM2 trace): the page says the logits were not
    compared, rather than a bare n/a that reads as 'the model has none'."""
    monkeypatch.setenv("PROBES_PUBLIC", "1")
    at = _app(page="parity", model="smollm2", text="A sentence whose logits a public app does not keep.")
    logits = next(m for m in at.metric if m.label == "logits max |Δ| ÷ scale")
    assert logits.value == "not compared"
    assert "run the app yourself (make app) to compare them" in logits.proto.help
    assert "PASS" in _texts(at.success)
