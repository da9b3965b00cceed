"""Qwen3 from scratch (Qwen2's body with QK-norm) against Hugging Face, option by option, on tiny random
checkpoints: bit-identical in eager, the lazy backends within their tolerance, the float64 proof; the Hugging Face
view's q and k are the normed and rotated ones; QK-norm left out is caught; what is not implemented is refused by
name."""

import pytest
import torch
from numeric import F64
from checkpoints import make_llama

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES
from probes.scratch import llama, qwen3

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["the cat sat on the mat because it was warm and the dog was not", "小明把苹果给了小红"]  # a padded batch
ENGLISH = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE = "小明把苹果给了小红，因为她很饿"

OPTIONS = {  # every tiny Qwen3 has head_dim 12 (not hidden / heads = 8) and QK-norm
    "group-3": dict(),  # 6 query heads reading 2 key/value heads
    "group-1": dict(num_key_value_heads=6),
    "group-6": dict(num_key_value_heads=1),  # multi-query
    "biases": dict(attention_bias=True),  # q, k, v and o biases (QK-norm comes after the q and k biases)
    "window": dict(use_sliding_window=True, sliding_window=3, max_window_layers=1),  # layer 1 only
    "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}),  # Qwen3's own θ
    "rope-linear": dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
    "tied": dict(tie_word_embeddings=True),  # Qwen3-0.6B ties its embeddings
}


def _load(tmp_path, **options):
    return probes.load(str(make_llama(tmp_path / "m", family="qwen3", **options)))


def _compare(model, backend="eager", texts=TEXTS):
    enc = model.encode(texts)
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_bit_identical_to_hugging_face(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option])
    assert model.family_name == "qwen3" and model.scratch_supported and model.d_head == 12
    for texts in (TEXTS, [ENGLISH], [CHINESE]):
        report = _compare(model, texts=texts)
        assert report.passed, report.to_text()
        assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
        assert report.logits_max_abs_diff == 0 and report.qkv_max_abs_diff == 0


@pytest.mark.parametrize("option", ["group-3", "window"])
@pytest.mark.parametrize("backend", ["sdpa", "flash"])
def test_the_lazy_backends_recover_the_same_attention(tmp_path, option, backend):
    report = _compare(_load(tmp_path, **OPTIONS[option]), backend)
    assert report.passed, report.to_text()
    assert report.candidate == f"scratch/{backend}" and 0 < report.attention_max_abs_diff <= report.tolerance["attention"]


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_proven_in_float64_on_both_backends(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option]).cast(torch.float64)
    for backend in ("eager", "sdpa"):
        report = _compare(model, backend)
        assert report.proven and report.attention_max_abs_diff <= F64, (backend, report.to_text())
        assert report.hidden_max_rel_diff <= F64 and report.logits_max_rel_diff <= FLOAT64_TOLERANCES["logits"]


def test_the_window_is_on_the_layers_layer_types_say(tmp_path):
    model = _load(tmp_path, **OPTIONS["window"])
    assert [model.family.window(model.config, layer) for layer in range(2)] == [None, 3]
    trace = scratch.forward(model.cast(torch.float64), model.encode(ENGLISH), backend="sdpa")
    a = trace.attention(1, 4)
    n = a.shape[-1]
    far = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3
    assert (a[far] == 0).all() and (trace.attention(0, 4)[far] > 0).any()


def test_hf_view_q_and_k_are_normed_then_rotated(tmp_path):
    """The Hugging Face view's q and k are what the scores are made of: softmax(q·kᵀ·scale) is its attention; turned
    back and divided by QK-norm's gain, each head's q and k has an rms of 1 (up to ε), as QK-norm makes it."""
    model = _load(tmp_path).cast(torch.float64)
    trace = hf.forward(model, model.encode(ENGLISH))
    n = len(trace.token_strings())
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    eps = model.config.rms_norm_eps
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
    model = _load(tmp_path)
    monkeypatch.setattr(qwen3.Layer, "project", llama.Layer.project)  # the projections without QK-norm
    model._scratch = qwen3.Qwen3(model.hf.state_dict(), model.config, model.name, window=llama.qwen2_window)
    report = _compare(model)
    assert not report.passed and report.attention_max_abs_diff > 0.01


def test_a_llama_network_refuses_the_qk_norm_weights(tmp_path):
    """Llama's code does not read q_norm and k_norm: over a Qwen3 checkpoint it refuses them by name, never drops
    them silently."""
    model = _load(tmp_path)
    with pytest.raises(UnsupportedModel, match=r"q_norm"):
        llama.Llama(model.hf.state_dict(), model.config, model.name)


@pytest.mark.parametrize("options, says", [
    (dict(rope_parameters={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32,
                           "rope_theta": 10000.0}), "rope_type='yarn'"),
    (dict(rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.5, "rope_theta": 10000.0}),
     "partial_rotary_factor=0.5"),
    (dict(hidden_act="relu6"), "hidden_act='relu6'"),
])
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, options, says):
    model = _load(tmp_path, **options)
    assert not model.scratch_supported and says in model.scratch_problem and "Qwen3" in model.scratch_problem
    with pytest.raises(UnsupportedModel, match=says.replace("(", r"\(")):
        parity.check(model, ENGLISH)
    trace = hf.forward(model, model.encode(ENGLISH))
    assert trace.q is not None and trace.n_heads == 6 and trace.q[0].shape[-1] == 12
