"""What is GPT-2's own (its parity against Hugging Face, option by option, is the conformance suite's:
``test_conformance.py``): an option Hugging Face computes in float32 is not proven in float64, every option really
changes the model, a wrong GELU is caught, causal attention over padding."""

import pytest
import torch
from checkpoints import make_gpt2
from numeric import fp32
from scratch.conformance import ENGLISH, built

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.scratch.gpt2 import GPT2

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_an_option_hugging_face_computes_in_float32_is_not_proven_in_float64(family_model):
    model = family_model("gpt2", "reorder-and-upcast")
    with pytest.raises(UnsupportedModel, match="reorder_and_upcast_attn=True: Hugging Face's GPT-2 then computes its "
                                               "scores in float32 by design.*check it in float32"):
        parity.check(model, ENGLISH, dtype="float64")
    assert parity.check(model, ENGLISH).passed


def test_options_really_change_the_model(family_model, tmp_path):
    """Each option must change what the model computes, or its parity test (the conformance suite's) proves
    nothing."""
    base = family_model("gpt2", "3-layers")
    enc = base.encode(ENGLISH)
    reference = hf.forward(base, enc)
    others = [family_model("gpt2", option) for option in ("unscaled", "inverse-layer-scale", "relu")]
    for other in [*others, probes.load(str(make_gpt2(tmp_path / "eps", n_layer=3, layer_norm_epsilon=1e-1)))]:
        assert not parity.compare(reference, scratch.forward(other, enc)).passed, other.config


def test_wrong_gelu_is_caught(gpt2_model, monkeypatch):
    """Parity notices a subtly wrong reimplementation: exact GELU where GPT-2 uses the tanh one."""
    from probes.scratch import activations

    enc = gpt2_model.encode(ENGLISH)
    reference = hf.forward(gpt2_model, enc)
    net = built(gpt2_model, GPT2)
    monkeypatch.setattr(net.blocks[0], "act", activations.gelu)
    report = parity.compare(reference, scratch.forward(gpt2_model, enc))
    assert not report.passed
    assert report.per_layer[0].attention_max_abs_diff == 0.0  # layer 0's attention comes before the MLP
    assert report.per_layer[1].attention_max_abs_diff > 1e-5


def test_causal_and_padding(gpt2_model):
    enc = gpt2_model.encode(["a longer sentence about the cat", "cat"])
    trace = scratch.forward(gpt2_model, enc)
    assert trace.attn is not None  # eager keeps the weights
    full = trace.attn[0][1]  # the short, padded item: [H, L, L]
    short = trace.attention(0, item=1)
    n = int(enc.attention_mask[1].sum())
    assert short.shape == (gpt2_model.n_heads, n, n)
    assert torch.allclose(short.sum(-1), torch.ones(gpt2_model.n_heads, n), atol=fp32(n), rtol=0)  # n keys summed
    assert torch.all(full[:, :, n:] == 0)  # padding keys get no attention
    assert torch.all(torch.triu(short, diagonal=1) == 0)  # no query sees the future
