"""What is Qwen3's own (Qwen2's body with QK-norm and a head width of 12 ≠ hidden / heads; its parity against Hugging
Face, option by option, the lazy backends, the float64 proof and the refusals are the conformance suite's:
``test_conformance.py``): the window on the layers layer_types say, the Hugging Face view's q and k normed then
rotated, QK-norm left out is caught, Llama's network refuses the QK-norm weights."""

import pytest
import torch
from numeric import F64
from scratch.conformance import ENGLISH, load, parity_of

from probes import hf, scratch
from probes.errors import UnsupportedModel
from probes.scratch import llama, qwen3

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_the_window_is_on_the_layers_layer_types_say(family_model):
    model = family_model("qwen3", "window")
    assert model.d_head == 12 and model.hf.model.layers[0].self_attn.q_norm.weight.shape == (12,)
    assert [model.family.window(model.config, layer) for layer in range(2)] == [None, 3]
    trace = scratch.forward(model.cast(torch.float64), model.encode(ENGLISH), backend="sdpa")
    a = trace.attention(1, 4)
    n = a.shape[-1]
    far = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3
    assert (a[far] == 0).all() and (trace.attention(0, 4)[far] > 0).any()


def test_hf_view_q_and_k_are_normed_then_rotated(family_model):
    """The Hugging Face view's q and k are what the scores are made of: softmax(q·kᵀ·scale) is its attention; turned
    back and divided by QK-norm's gain, each head's q and k has an rms of 1 (up to ε), as QK-norm makes it."""
    model = family_model("qwen3", "group-3").cast(torch.float64)
    trace = hf.forward(model, model.encode(ENGLISH))
    n = len(trace.token_strings())
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    eps = model.config.rms_norm_eps
    assert trace.scales is not None and isinstance(trace.rotary, tuple)  # each layer's scale; one table for all
    for layer in range(2):
        q, k, _ = trace.layer_qkv(layer)
        scores = (q[0] @ k[0].repeat_interleave(3, dim=0).transpose(-2, -1)) * trace.scales[layer]
        assert torch.allclose(torch.softmax(scores.masked_fill(~causal, float("-inf")), -1), trace.attention(layer),
                              atol=F64, rtol=0)
        attn = model.hf.model.layers[layer].self_attn
        for x, gain in ((q, attn.q_norm.weight), (k, attn.k_norm.weight)):
            normed = llama.unrotate(x, *trace.rotary) / gain.detach()
            ms = normed.pow(2).mean(-1)  # x² / (x² + ε) on average: within ε / mean(x²) of 1
            assert ((ms - 1).abs() <= eps / ms.clamp(min=eps) + F64).all() and (ms > 0.5).all()


def test_qk_norm_left_out_is_caught(tmp_path, monkeypatch):
    """Parity fails far beyond rounding when the scratch pass forgets QK-norm: the parity above is not vacuous."""
    model = load("qwen3", tmp_path)
    monkeypatch.setattr(qwen3.Layer, "project", llama.Layer.project)  # the projections without QK-norm
    model._scratch = qwen3.Qwen3(model.hf.state_dict(), model.config, model.name, window=llama.qwen2_window)
    report = parity_of(model)
    assert not report.passed and report.attention_max_abs_diff > 0.01


def test_a_llama_network_refuses_the_qk_norm_weights(family_model):
    """Llama's code does not read q_norm and k_norm: over a Qwen3 checkpoint it refuses them by name, never drops
    them silently."""
    model = family_model("qwen3", "group-3")
    with pytest.raises(UnsupportedModel, match=r"q_norm"):
        llama.Llama(model.hf.state_dict(), model.config, model.name)
