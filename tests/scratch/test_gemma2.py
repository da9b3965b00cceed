"""What is Gemma 2's own (its parity against Hugging Face, option by option, bit-identical in eager, the lazy backends
whose fused kernels cannot soft-cap, the float64 proof refused by name and made against Hugging Face's own code with
its norm in the input's dtype, and the refusals are the conformance suite's: ``test_conformance.py``): the layers
alternate local and global, soft-capping and the sandwich norms left out are caught, soft-capping bounds the scores,
QK attribution splits the pre-cap score, the KV lab refuses soft-capped scores."""

import pytest
import torch
from numeric import F64
from scratch.conformance import ENGLISH, load, parity_of

from probes import scratch
from probes.errors import UnsupportedModel
from probes.scratch import build, gemma

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_the_layers_alternate_local_and_global(family_model):
    """What the record says of the tiny checkpoint's layers (the conformance suite's lazy check sees each local layer
    give nothing past its window, the global one reach past it)."""
    model = family_model("gemma2", "default")
    assert [model.family.window(model.config, layer) for layer in range(3)] == [3, None, 3]
    assert [model.family.softcap(model.config, layer) for layer in range(3)] == [5.0] * 3
    assert model.family.scale(model.config, 0) == 10 ** -0.5


@pytest.mark.parametrize("leave_out", ["attention softcap", "final softcap", "post-attention norm", "embed scale"])
def test_each_new_part_left_out_is_caught(tmp_path, leave_out):
    """Parity fails far beyond rounding when the scratch pass forgets one of Gemma 2's parts: not vacuous."""
    model = load("gemma2", tmp_path)
    net = gemma.Gemma2(model.hf.state_dict(), model.config, model.name)
    if leave_out == "attention softcap":
        for layer in net.layers:
            layer.spec = type(layer.spec)(layer.spec.scale, True, layer.spec.window, None)
    elif leave_out == "final softcap":
        net.logit_softcap = None
    elif leave_out == "post-attention norm":
        for layer in net.layers:
            layer.post_attn = torch.zeros_like(layer.post_attn)  # the attention's write gone
    else:
        net.embed_scale = torch.tensor(1.0)
    model._scratch = net
    report = parity_of(model)
    assert not report.passed


def test_soft_capping_bounds_the_scores(tmp_path):
    """With a cap of 1 every eager score before the mask lies in [−1, 1] (tanh reaches 1 in fp32): the attn.scores
    point sees them capped, although the uncapped ones reach far past 1."""
    model = load("gemma2", tmp_path, attn_logit_softcapping=1.0)
    seen = []
    scratch.run_with_hooks(model, model.encode(ENGLISH),
                           {"blocks.0.attn.scores": lambda s, name: seen.append(s.clone())})
    s = seen[0]
    allowed = s > torch.finfo(s.dtype).min / 2
    assert s[allowed].abs().max() <= 1.0
    q, k, _ = build(model).qkv(0, model.hf.model.embed_tokens(model.encode(ENGLISH).input_ids))
    assert (q @ k.repeat_interleave(2, dim=1).transpose(-2, -1) * 10 ** -0.5).abs().max() > 2.0


def test_qk_attribution_splits_the_pre_cap_score_and_weighs_the_capped_row(family_model):
    """The parts sum to scale·q·k before the cap; the weight shown is the model's own (the softmax of the capped row),
    and the record says the cap."""
    from probes.effects.why import qk_attribution

    model = family_model("gemma2", "default").cast(torch.float64)
    why = qk_attribution(model, ENGLISH, 1, 2, 6, 2)  # layer 1 is global: any earlier key
    assert why.softcap == 5.0 and why.delta <= 1e-9 * why.bound
    trace = scratch.forward(model, model.encode(ENGLISH))
    assert why.weight == pytest.approx(float(trace.attention(1, 2)[6, 2]), abs=F64, rel=0)
    assert abs(why.score) > 5.0 or abs(5.0 * torch.tanh(torch.tensor(why.score / 5.0)) - why.score) > 1e-3


def test_the_kv_lab_refuses_soft_capped_scores_by_name(family_model, tmp_path):
    from probes.kv.stream import decoder_network

    with pytest.raises(UnsupportedModel, match="attn_logit_softcapping"):
        decoder_network(family_model("gemma2", "default"))
    assert decoder_network(load("gemma2", tmp_path, attn_logit_softcapping=None)) is not None  # the logit cap stays
