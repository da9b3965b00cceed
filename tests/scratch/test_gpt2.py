"""The from-scratch GPT-2 against Hugging Face on tiny random checkpoints: shapes, padding, and every
config option that changes the math (implemented ones pass parity, refused ones name themselves)."""

import pytest
import torch
from numeric import fp32

import probes
from checkpoints import make_gpt2
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "小明把苹果给了小红", "The cat sat."]


def _parity(path, texts=TEXTS):
    """The fp32 report (what the app shows), after proving the same input in float64 (≤ 1e-10) where Hugging
    Face's code can run in float64."""
    model = probes.load(str(path))
    proof = [] if model.family.float64_refused(model.config) else [model.cast(torch.float64)]
    for m in (*proof, model):
        enc = m.encode(texts)
        report = parity.compare(hf.forward(m, enc), scratch.forward(m, enc))
        assert report.passed and (m is model or report.proven), report.to_text()
    return report


@pytest.mark.parametrize("shape", [
    dict(n_layer=1, n_head=1, n_embd=16),
    dict(n_layer=2, n_head=4, n_embd=32),
    dict(n_layer=3, n_head=6, n_embd=48),
    dict(n_layer=2, n_head=2, n_embd=64),
])
def test_shapes_pass_parity_on_a_padded_batch(tmp_path, shape):
    report = _parity(make_gpt2(tmp_path / "m", **shape))
    assert report.passed, report.to_text()
    assert len(report.per_layer) == shape["n_layer"]
    assert all(len(lp.per_head) == shape["n_head"] for lp in report.per_layer)
    assert report.logits_max_rel_diff is not None and report.logits_max_rel_diff <= report.tolerance["logits"]
    assert report.qkv_max_abs_diff == 0  # eager runs Hugging Face's own operations on the same weights


@pytest.mark.parametrize("option", [
    dict(scale_attn_weights=False),
    dict(scale_attn_by_inverse_layer_idx=True),
    dict(reorder_and_upcast_attn=True),
    dict(activation_function="gelu"),
    dict(activation_function="relu"),
    dict(activation_function="gelu_fast"),
    dict(activation_function="gelu_pytorch_tanh"),
    dict(activation_function="quick_gelu"),
    dict(activation_function="silu"),
    dict(n_inner=24),
    dict(layer_norm_epsilon=1e-2),
])
def test_implemented_options_pass_parity(tmp_path, option):
    report = _parity(make_gpt2(tmp_path / "m", n_layer=3, **option))
    assert report.passed, report.to_text()


def test_an_option_hugging_face_computes_in_float32_is_not_proven_in_float64(tmp_path):
    model = probes.load(str(make_gpt2(tmp_path / "m", reorder_and_upcast_attn=True)))
    with pytest.raises(UnsupportedModel, match="reorder_and_upcast_attn=True: Hugging Face's GPT-2 then computes its "
                                               "scores in float32 by design.*check it in float32"):
        parity.check(model, TEXTS[0], dtype="float64")
    assert parity.check(model, TEXTS[0]).passed


def test_options_really_change_the_model(tmp_path):
    """Each option above must change what the model computes, or its parity test proves nothing."""
    base = probes.load(str(make_gpt2(tmp_path / "base", n_layer=3)))
    enc = base.encode(TEXTS[0])
    reference = hf.forward(base, enc)
    for i, option in enumerate([dict(scale_attn_weights=False), dict(scale_attn_by_inverse_layer_idx=True),
                                dict(activation_function="relu"), dict(layer_norm_epsilon=1e-1)]):
        other = probes.load(str(make_gpt2(tmp_path / f"o{i}", n_layer=3, **option)))
        assert not parity.compare(reference, scratch.forward(other, enc)).passed, option


@pytest.mark.parametrize("option, named", [
    (dict(activation_function="gelu_10"), "activation_function='gelu_10'"),
    (dict(activation_function="mish"), "activation_function='mish'"),
    (dict(add_cross_attention=True), "add_cross_attention"),
])
def test_unimplemented_options_are_refused_by_name(tmp_path, option, named):
    model = probes.load(str(make_gpt2(tmp_path / "m", **option)))
    hf.forward(model, model.encode("the Hugging Face view still works"))
    with pytest.raises(UnsupportedModel, match=named.replace("(", r"\(")):
        scratch.build(model)
    with pytest.raises(UnsupportedModel):
        parity.check(model, "hello")


def test_wrong_gelu_is_caught(gpt2_model, monkeypatch):
    """Parity notices a subtly wrong reimplementation: exact GELU where GPT-2 uses the tanh one."""
    from probes.scratch import activations

    enc = gpt2_model.encode(TEXTS[0])
    reference = hf.forward(gpt2_model, enc)
    net = scratch.build(gpt2_model)
    monkeypatch.setattr(net.blocks[0], "act", activations.gelu)
    report = parity.compare(reference, scratch.forward(gpt2_model, enc))
    assert not report.passed
    assert report.per_layer[0].attention_max_abs_diff == 0.0  # layer 0's attention comes before the MLP
    assert report.per_layer[1].attention_max_abs_diff > 1e-5


def test_causal_and_padding(gpt2_model):
    enc = gpt2_model.encode(["a longer sentence about the cat", "cat"])
    trace = scratch.forward(gpt2_model, enc)
    full = trace.attn[0][1]  # the short, padded item: [H, L, L]
    short = trace.attention(0, item=1)
    n = int(enc.attention_mask[1].sum())
    assert short.shape == (gpt2_model.n_heads, n, n)
    assert torch.allclose(short.sum(-1), torch.ones(gpt2_model.n_heads, n), atol=fp32(n), rtol=0)  # n keys summed
    assert torch.all(full[:, :, n:] == 0)  # padding keys get no attention
    assert torch.all(torch.triu(short, diagonal=1) == 0)  # no query sees the future


def test_unused_weights_are_refused(gpt2_model):
    sd = dict(gpt2_model.hf.state_dict())
    sd["transformer.h.0.attn.extra.weight"] = torch.zeros(2)
    from probes.scratch.gpt2 import GPT2

    with pytest.raises(UnsupportedModel, match="h.0.attn.extra.weight"):
        GPT2(sd, gpt2_model.config, "patched")
