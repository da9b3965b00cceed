"""Parity on the real offline default, and the comparison itself: it must find a planted difference
and say where it is."""

import json

import pytest
import torch
from numeric import F64, fp32

from probes import hf, parity, scratch
from probes.errors import BadOption
from probes.parity import EPS32, FLOAT64_TOLERANCES, TOLERANCES

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

SENTENCE = "Xiaoming gave the apple to Xiaohong because she was hungry."


def test_offline_default_passes_on_every_layer_and_head(minilm):
    report = parity.check(minilm, SENTENCE)
    assert report.passed, report.to_text()
    assert len(report.per_layer) == 6 and all(len(lp.per_head) == 12 for lp in report.per_layer)
    assert report.attention_max_abs_diff <= report.tolerance["attention"]
    assert report.hidden_max_rel_diff <= TOLERANCES["hidden"]
    assert report.logits_max_abs_diff is None
    assert report.tokens[:3] == ["[CLS]", "xiao", "##ming"]


def test_offline_default_pairs_and_long_input(minilm):
    assert parity.check(minilm, SENTENCE, "She ate it.").passed
    assert parity.check(minilm, "word " * 700, truncate=True).passed


def test_planted_difference_is_found_where_it_is(minilm):
    enc = minilm.encode(SENTENCE)
    reference = hf.forward(minilm, enc)
    candidate = scratch.forward(minilm, enc)
    assert candidate.attn is not None  # the eager pass keeps every probability
    candidate.attn[4] = candidate.attn[4].clone()
    candidate.attn[4][0, 7, 3, 2] += 3e-5
    report = parity.compare(reference, candidate)
    assert not report.passed
    assert report.worst_head()[:2] == (4, 7)
    # 3e-5 added to a probability ≤ 1 and taken off again: two fp32 roundings of a number ≤ 1
    assert report.per_layer[4].per_head[7] == pytest.approx(3e-5, abs=fp32(2), rel=0)
    assert report.per_layer[3].attention_max_abs_diff <= report.tolerance["attention"]
    assert "FAIL" in report.to_text()


def test_padding_is_not_compared(minilm):
    enc = minilm.encode([SENTENCE, "short"])
    reference = hf.forward(minilm, enc)
    candidate = scratch.forward(minilm, enc)
    assert candidate.attn is not None  # the eager pass keeps every probability
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
    # 27000 + 0.004 is rounded to fp32's grid at 27,000 (a step of eps × 27,000 = 0.002)
    assert report.passed and report.hidden_max_abs_diff == pytest.approx(0.004, abs=fp32(1, 27000), rel=0)
    assert report.hidden_max_rel_diff == pytest.approx(0.004 / 27000, abs=fp32(1), rel=0)
    assert report.per_layer[2].hidden_max_rel_diff == report.hidden_max_rel_diff

    small = [h.clone() for h in reference.hidden_states]
    small[3] = small[3].clamp(-0.9, 0.9)  # a layer whose values all lie within ±1: the plain max |Δ|
    reference.hidden_states = small
    candidate.hidden_states = [h.clone() for h in small]
    candidate.hidden_states[3][0, 2, 5] += 2e-4
    report = parity.compare(reference, candidate)
    assert not report.passed and report.hidden_max_rel_diff == pytest.approx(2e-4, abs=fp32(2), rel=0)  # as above


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_float64_proves_the_offline_default_the_same_function(minilm, backend):
    report = parity.check(minilm, SENTENCE, "She ate it.", backend=backend, dtype="float64")
    assert report.passed and report.proven and report.dtype == "float64", report.to_text()
    assert report.tolerance == FLOAT64_TOLERANCES
    assert report.attention_max_abs_diff <= F64 and report.hidden_max_rel_diff <= F64
    assert "float64: proven the same function" in report.to_text()
    assert minilm.dtype == torch.float32  # the proof ran on a copy: the model the app shows is untouched


def test_the_check_reports_each_step_and_stops_where_its_caller_stops_it(minilm, monkeypatch):
    """``progress(done, total)`` after the copy, each pass and each layer compared (3 + 6 steps on minilm), in order:
    the app's bar and its Cancel. An exception raised from a step (what a Cancel's rerun is) ends the check there:
    stopped after Hugging Face's pass, our pass never runs."""
    from probes import runner

    steps: list[tuple[int, int]] = []
    parity.check(minilm, SENTENCE, dtype="float64", progress=lambda done, total: steps.append((done, total)))
    assert steps == [(done, 9) for done in range(1, 10)]

    class Stop(Exception):
        pass

    ran: list[str] = []  # the source of each pass
    forward = runner.forward

    def counted(model, enc, source, *a, **k):
        ran.append(source)
        return forward(model, enc, source, *a, **k)

    monkeypatch.setattr(runner, "forward", counted)

    def stop_after_the_reference(done: int, total: int) -> None:
        if done == 2:
            raise Stop

    with pytest.raises(Stop):
        parity.check(minilm, SENTENCE, dtype="float64", progress=stop_after_the_reference)
    assert ran == ["hf"]


def test_a_float64_copy_holds_exactly_the_models_weights(minilm):
    copy = minilm.cast(torch.float64)
    assert copy is not minilm and copy.dtype == torch.float64 and minilm.cast(torch.float32) is minilm
    for (name, a), (_, b) in zip(minilm.hf.state_dict().items(), copy.hf.state_dict().items(), strict=True):
        assert torch.equal(a.double(), b), name  # every fp32 value is exactly a float64 value
    assert copy.weight_bytes() == 2 * minilm.weight_bytes() == minilm.weight_bytes(torch.float64)


def test_one_fp32_rounding_fails_the_float64_proof(minilm):
    """The proof has teeth: attention that went through float32 once (what an fp32 step hidden in a float64
    pass does) is 1e-8 off, 100× over the float64 tolerance, while fp32 would call it a pass."""
    m = minilm.cast(torch.float64)
    enc = m.encode(SENTENCE)
    reference, candidate = hf.forward(m, enc), scratch.forward(m, enc)
    assert candidate.attn is not None  # the eager pass keeps every probability
    candidate.attn = [a.float().double() for a in candidate.attn]
    report = parity.compare(reference, candidate)
    assert not report.passed and F64 < report.attention_max_abs_diff <= fp32(1)  # one rounding of a number ≤ 1
    assert "FAIL" in report.to_text()


def test_flash_and_an_oversized_copy_are_refused_with_what_to_do(minilm):
    with pytest.raises(BadOption, match="fp32, fp16 and bf16 only.*prove eager or sdpa in float64"):
        parity.check(minilm, SENTENCE, backend="flash", dtype="float64")
    with pytest.raises(BadOption, match="float64 copy of minilm would take 0.2 GiB.*check it in float32"):
        parity.check(minilm, SENTENCE, dtype="float64", float64_limit=2**20)
    with pytest.raises(BadOption, match="unknown dtype 'float16'"):
        parity.check(minilm, SENTENCE, dtype="float16")
    a, b = hf.forward(minilm, minilm.encode(SENTENCE)), scratch.forward(minilm.cast(torch.float64),
                                                                        minilm.encode(SENTENCE))
    with pytest.raises(ValueError, match="different precisions"):
        parity.compare(a, b)


def test_logits_are_held_to_their_scale(minilm):
    """Logits in the tens (SmolLM2's) differ by 1e-4 between correct fp32 kernels: judged in units of their
    largest |value|, that passes; the same absolute difference on logits within ±1 fails."""
    enc = minilm.encode(SENTENCE)
    reference, candidate = hf.forward(minilm, enc), scratch.forward(minilm, enc)
    logits = torch.linspace(-30, 30, 7 * enc.input_ids.shape[1]).view(1, -1, 7)
    reference.logits, candidate.logits = logits, logits.clone()
    candidate.logits[0, 3, 2] += 1.06e-4  # what one machine's kernels gave on SmolLM2 (the failure)
    report = parity.compare(reference, candidate)
    # 1.06e-4 added to a logit within ±30: rounded to fp32's grid there (eps × 30)
    assert report.passed and report.logits_max_abs_diff == pytest.approx(1.06e-4, abs=fp32(1, 30), rel=0)
    assert report.logits_max_rel_diff == pytest.approx(1.06e-4 / 30, abs=fp32(1), rel=0)
    reference.logits, candidate.logits = logits / 60, logits / 60
    candidate.logits[0, 3, 2] += 1.06e-4
    assert not parity.compare(reference, candidate).passed


def test_the_fp32_attention_tolerance_grows_with_the_row_length():
    """A probability is exp(s − lse) and lse sums the row's keys: fp32 rounding grows with the length."""
    assert parity.tolerances(torch.float32, 40)["attention"] == EPS32 * 128
    assert parity.tolerances(torch.float32, 1000)["attention"] == EPS32 * 1000
    assert parity.tolerances(torch.float64, 1000) == FLOAT64_TOLERANCES


def test_massive_activations_find_a_planted_value_and_none_in_an_ordinary_model(llama_dir):
    import dataclasses

    import probes
    from probes.trace import Trace

    model = probes.load(str(llama_dir))
    trace = probes.run(model, "the cat sat on the mat")
    assert isinstance(trace, Trace)  # a model loaded here: its own Trace, which dataclasses.replace copies
    assert parity.massive_activations(trace).empty  # a tiny random model: nothing massive
    assert list(parity.massive_activations(trace).columns) == parity.MASSIVE_COLUMNS
    hidden = [h.clone() for h in trace.hidden_states]
    hidden[2][0, 3, 17] = -5000.0  # the residual stream after block 1, token 3, dimension 17
    hidden[1][0, 0, 5] = 100.0  # not over 100: not massive, however far above the median
    assert float(hidden[1][0].abs().median()) > 0.2  # so 1,000 × the median is over 200
    hidden[1][0, 1, 6] = 150.0  # over 100 but not over 1,000 × the median
    planted = dataclasses.replace(trace, hidden_states=hidden)
    found = parity.massive_activations(planted)
    assert found[["layer", "dimension", "value", "token", "position"]].to_dict("records") == [
        dict(layer=1, dimension=17, value=-5000.0, token=trace.token_strings()[3], position=3)]
    assert found["times_median"].iloc[0] > 1000
    hidden[2][0, 0, 2] = 7000.0
    found = parity.massive_activations(planted, top=1)  # the largest only
    assert found[["layer", "dimension", "position"]].values.tolist() == [[1, 2, 0]]


def test_smollm2_carries_massive_activations_on_its_first_token(smollm2):
    import probes

    trace = probes.run(smollm2, "Xiaoming gave the apple to Xiaohong because she was hungry.")
    found = parity.massive_activations(trace)
    # measured: dimension 507 of the first token "X" holds ~27,000 (14,900 × the layer's median) after blocks
    # 11-28, and dimension 247 ~2,000 after blocks 11-13; nothing before block 11 nor after the final norm
    assert set(found["position"]) == {0} and set(found["token"]) == {"X"}
    assert set(found.loc[found["dimension"] == 507, "layer"]) == set(range(11, 29))
    assert set(found["dimension"]) == {507, 247} and found["value"].abs().max() > 20_000
