"""eager, sdpa and flash: the same attention, and lazy Traces that recover it from the logsumexp."""

import pytest
import torch
from checkpoints import make_gpt2
from numeric import F64

import probes
from probes import hf, parity, scratch
from probes.parity import TOLERANCES
from probes.scratch import flash

TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry."


@pytest.mark.parametrize("backend", ["sdpa", "flash"])
def test_recovered_probabilities_equal_hf_on_every_head(minilm, backend):
    report = parity.check(minilm, TEXT, "She ate it.", backend=backend)
    assert report.passed, report.to_text()
    assert report.candidate == f"scratch/{backend}"
    assert 0 < report.attention_max_abs_diff <= TOLERANCES["attention"]  # recomputed, so not bit-identical


@pytest.mark.parametrize("backend", ["sdpa", "flash"])
@pytest.mark.parametrize("option", [{}, dict(scale_attn_by_inverse_layer_idx=True), dict(scale_attn_weights=False)])
def test_gpt2_padded_batch_through_the_lazy_path(tmp_path, backend, option):
    model = probes.load(str(make_gpt2(tmp_path / "m", n_layer=3, **option)))
    enc = model.encode(["the cat sat on the mat because it was warm", "小明"])
    report = parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))
    assert report.passed, report.to_text()
    assert report.logits_max_abs_diff is not None  # GPT-2's logits
    assert report.logits_max_abs_diff <= TOLERANCES["logits"]


def test_backends_agree_with_each_other(bert_dir):
    model = probes.load(str(bert_dir))
    enc = model.encode(["first of two", "the second, longer, sentence"], ["a pair", "another pair"])
    eager = scratch.forward(model, enc, backend="eager")
    for backend in ("sdpa", "flash"):
        other = scratch.forward(model, enc, backend=backend)
        report = parity.compare(eager, other)
        assert report.passed, (backend, report.to_text())


@pytest.mark.numeric
def test_lazy_trace_holds_no_square_matrices(minilm64):
    minilm = minilm64  # float64: the recovered rows are the eager ones up to float64 rounding
    enc = minilm.encode(TEXT)
    trace = scratch.forward(minilm, enc, backend="sdpa")
    n = enc.input_ids.shape[1]
    assert trace.lazy and trace.attn is None and trace.q is None
    assert trace.lse is not None  # a lazy trace keeps each row's logsumexp
    assert [tuple(t.shape) for t in trace.lse] == [(1, 12, n)] * 6
    assert trace.backend.startswith("sdpa:") and trace.note == ""
    eager = scratch.forward(minilm, enc)
    rows = slice(3, 9)
    assert torch.allclose(trace.attention(4, 7, rows=rows), eager.attention(4, 7, rows=rows), atol=F64, rtol=0)
    # recomputed from the layer's input (sdpa's own hidden states)
    for a, b in zip(trace.qkv(2, 5), eager.qkv(2, 5), strict=True):
        assert torch.allclose(a, b, atol=F64 * float(b.abs().max()), rtol=0)


def test_flash_falls_back_to_sdpa_without_cuda(minilm, monkeypatch):
    monkeypatch.setattr(flash, "interpreting", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert scratch.resolve_backend("flash") == ("sdpa", scratch.resolve_backend("flash")[1])
    trace = scratch.forward(minilm, minilm.encode(TEXT), backend="flash")
    assert trace.source == "scratch/sdpa" and "flash needs CUDA" in trace.note
    report = parity.check(minilm, TEXT, backend="flash")
    assert report.passed and "ran sdpa" in report.note
    with pytest.raises(ValueError, match="eager, sdpa, flash"):
        scratch.resolve_backend("cudnn")


@pytest.mark.numeric
def test_head_summary_streams_the_same_numbers(minilm64):
    minilm = minilm64  # float64: streamed statistics equal the materialised ones up to float64 rounding
    enc = minilm.encode(TEXT * 3)
    lazy = scratch.forward(minilm, enc, backend="sdpa")
    eager = scratch.forward(minilm, enc)
    summary = lazy.head_summary(3, block=16)  # several row blocks
    p = eager.attention(3)  # [H, n, n]
    n = p.shape[-1]
    assert torch.allclose(summary["received"], p.sum(1), atol=F64, rtol=0)
    assert torch.allclose(summary["entropy"], -(p * p.clamp_min(1e-30).log()).sum(-1), atol=F64, rtol=0)
    prev = torch.zeros(12, n, dtype=p.dtype)
    prev[:, 1:] = p[:, torch.arange(1, n), torch.arange(n - 1)]
    assert torch.allclose(summary["previous"], prev, atol=F64, rtol=0)
    assert (summary["argmax"] == p.argmax(-1)).float().mean() > 0.99  # ties may break either way
