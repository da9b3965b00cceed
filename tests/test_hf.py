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


def test_an_encoder_decoder_is_seen_through_its_encoder_and_the_probes_run(ckpt_dir, tmp_path):
    import probes
    from checkpoints import make_t5
    from probes.heads import profile as prof

    model = probes.load(str(make_t5(ckpt_dir / "t5")))
    assert model.family is None and not model.scratch_supported and not model.is_causal
    trace = probes.run(model, "the cat sat on the mat")
    n = len(trace.token_strings())
    assert trace.n_layers == 2 and trace.attention(1, 3).shape == (n, n)
    assert torch.allclose(trace.attention(0, None).sum(-1), torch.ones(4, n))
    for probe in ("positional", "patterns", "induction"):  # the label-free probes, on the Hugging Face view
        frame = prof.profile(model, [probe], None, 4, tmp_path / f"{probe}.csv")
        assert len(frame) and set(frame.layer) == {0, 1} and set(frame["head"]) == {0, 1, 2, 3}
