"""The Hugging Face producer: the reference Trace, with q, k, v caught where the family record says."""

import pytest
import torch
from checkpoints import make_llama

import probes
from probes import hf


def test_reference_is_eager_only(gpt2_model):
    with pytest.raises(ValueError, match="eager attention only"):
        hf.forward(gpt2_model, gpt2_model.encode("hi"), backend="sdpa")


@pytest.mark.parametrize("fixture", ["gpt2_model", "minilm"])
def test_each_family_catches_q_k_v_of_every_layer(request, fixture):
    model = request.getfixturevalue(fixture)
    enc = model.encode("the cat sat on the mat")
    trace = hf.forward(model, enc)
    n = enc.input_ids.shape[1]
    assert len(trace.q) == model.n_layers and trace.rotary is None
    assert trace.q[0].shape == trace.k[0].shape == (1, model.n_heads, n, model.d_head)
    assert trace.scales == pytest.approx([model.d_head ** -0.5] * model.n_layers)


def test_grouped_rotary_model_keeps_its_fewer_key_value_heads(tmp_path):
    model = probes.load(str(make_llama(tmp_path / "m")))
    enc = model.encode("the cat sat on the mat")
    trace = hf.forward(model, enc, logits=False)
    n = enc.input_ids.shape[1]
    assert trace.q[1].shape == (1, 6, n, 8) and trace.k[1].shape == trace.v[1].shape == (1, 2, n, 8)
    cos, sin = trace.rotary
    assert cos.shape[-2:] == (n, 8) and torch.allclose(cos ** 2 + sin ** 2, torch.ones_like(cos), atol=1e-6)
    assert trace.logits is None and trace.group == 3
