"""Parity on the real offline default, and the comparison itself: it must find a planted difference
and say where it is."""

import json

import pytest

from probes import hf, parity, scratch
from probes.parity import TOLERANCES

SENTENCE = "Xiaoming gave the apple to Xiaohong because she was hungry."


def test_offline_default_passes_on_every_layer_and_head(minilm):
    report = parity.check(minilm, SENTENCE)
    assert report.passed, report.to_text()
    assert len(report.per_layer) == 6 and all(len(lp.per_head) == 12 for lp in report.per_layer)
    assert report.attention_max_abs_diff <= TOLERANCES["attention"]
    assert report.hidden_max_abs_diff <= TOLERANCES["hidden"]
    assert report.logits_max_abs_diff is None
    assert report.tokens[:3] == ["[CLS]", "xiao", "##ming"]


def test_offline_default_pairs_and_long_input(minilm):
    assert parity.check(minilm, SENTENCE, "She ate it.").passed
    assert parity.check(minilm, "word " * 700, truncate=True).passed


def test_planted_difference_is_found_where_it_is(minilm):
    enc = minilm.encode(SENTENCE)
    reference = hf.forward(minilm, enc)
    candidate = scratch.forward(minilm, enc)
    candidate.attn[4] = candidate.attn[4].clone()
    candidate.attn[4][0, 7, 3, 2] += 3e-5
    report = parity.compare(reference, candidate)
    assert not report.passed
    assert report.worst_head()[:2] == (4, 7)
    assert report.per_layer[4].per_head[7] == pytest.approx(3e-5, rel=1e-2)
    assert report.per_layer[3].attention_max_abs_diff <= TOLERANCES["attention"]
    assert "FAIL" in report.to_text()


def test_padding_is_not_compared(minilm):
    enc = minilm.encode([SENTENCE, "short"])
    reference = hf.forward(minilm, enc)
    candidate = scratch.forward(minilm, enc)
    candidate.attn[0] = candidate.attn[0].clone()
    candidate.attn[0][1, :, -1, :] = 0.5  # a padding query row of the short item
    assert parity.compare(reference, candidate).passed


def test_report_json_has_the_documented_fields(minilm):
    data = json.loads(parity.check(minilm, "hello there").to_json())
    for key in ("model", "tokens", "passed", "tolerance", "attention_max_abs_diff", "hidden_max_abs_diff",
                "logits_max_abs_diff", "per_layer"):
        assert key in data
    assert data["per_layer"][0].keys() >= {"layer", "attention_max_abs_diff", "per_head"}


def test_different_inputs_are_not_compared(minilm):
    a = hf.forward(minilm, minilm.encode("one text"))
    b = scratch.forward(minilm, minilm.encode("another text"))
    with pytest.raises(ValueError, match="different inputs"):
        parity.compare(a, b)


def test_hidden_states_are_held_to_their_layer_scale(minilm):
    """A hidden state is compared in units of its layer's largest |value| (when over 1): a few fp32
    steps at a massive activation pass, the same absolute error on a state within ±1 fails."""
    enc = minilm.encode(SENTENCE)
    reference = hf.forward(minilm, enc)
    scaled = [h.clone() for h in reference.hidden_states]
    scaled[3][0, 2, 5] = 27000.0  # a massive activation, as SmolLM2's residual stream carries
    reference.hidden_states = scaled
    candidate = scratch.forward(minilm, enc)
    candidate.hidden_states = [h.clone() for h in scaled]
    candidate.hidden_states[3][0, 2, 5] += 0.004  # two fp32 steps at 27,000
    report = parity.compare(reference, candidate)
    assert report.passed and report.hidden_max_abs_diff == pytest.approx(0.004, rel=0.1)
    assert report.hidden_max_rel_diff == pytest.approx(0.004 / 27000, rel=0.1)
    assert report.per_layer[2].hidden_max_rel_diff == report.hidden_max_rel_diff

    small = [h.clone() for h in reference.hidden_states]
    small[3] = small[3].clamp(-0.9, 0.9)  # a layer whose values all lie within ±1: the plain max |Δ|
    reference.hidden_states = small
    candidate.hidden_states = [h.clone() for h in small]
    candidate.hidden_states[3][0, 2, 5] += 2e-4
    report = parity.compare(reference, candidate)
    assert not report.passed and report.hidden_max_rel_diff == pytest.approx(2e-4, rel=1e-3)
