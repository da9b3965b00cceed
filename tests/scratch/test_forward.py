"""``scratch.forward`` runs without any of transformers' modeling code."""

import pytest
import torch
from numeric import fp32

from probes import hf, parity, scratch
from probes.errors import UnsupportedModel


def test_scratch_never_calls_the_hf_modules(minilm, gpt2_model, monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("a Hugging Face module was called")

    for model in (minilm, gpt2_model):
        enc = model.encode("nothing borrowed from transformers at run time")
        reference = hf.forward(model, enc)
        scratch.build(model)
        with monkeypatch.context() as m:
            for module in model.hf.modules():
                m.setattr(module, "forward", refuse)
            candidate = scratch.forward(model, enc)
        assert parity.compare(reference, candidate).passed


def test_unknown_backend_is_refused(minilm):
    with pytest.raises(ValueError, match="eager"):
        scratch.forward(minilm, minilm.encode("hi"), backend="nope")


@pytest.mark.numeric
def test_trace_holds_every_layer(minilm):
    trace = scratch.forward(minilm, minilm.encode("one two three"))
    assert trace.source == "scratch/eager" and trace.n_layers == 6 and trace.n_heads == 12
    assert len(trace.hidden_states) == 7 and trace.logits is None
    assert trace.q is None and trace.layer_qkv(0)[0].shape == (1, 12, 5, 32)  # recomputed on demand
    assert torch.allclose(trace.attention(5).sum(-1), torch.ones(12, 5), atol=fp32(5), rtol=0)  # 5 keys summed


def test_build_refuses_other_families(opt_dir):
    import probes

    with pytest.raises(UnsupportedModel, match="'opt' model"):
        scratch.forward(probes.load(str(opt_dir)), None)


def test_a_pass_stopped_before_a_layer_keeps_what_came_before_it_bit_for_bit(minilm, gpt2_model):
    # what QK attribution reads: the inputs of layers 0..L and the head outputs of layers 0..L−1, as a whole pass
    for model in (minilm, gpt2_model):
        enc = model.encode("Researchers probe every layer and every head.")
        keep = ["resid_pre", "attn.z"]
        whole = scratch.run_with_hooks(model, enc, keep=keep)
        for upto in range(model.n_layers):
            cut = scratch.run_with_hooks(model, enc, keep=keep, stop_after=scratch.point(upto, "resid_pre"))
            inputs, z = cut.each("resid_pre"), cut.each("attn.z")
            assert len(inputs) == upto + 1 and len(z) == upto and cut.logits is None and cut.final is None
            assert cut.stopped == f"blocks.{upto}.resid_pre"
            # the cut pass's layers: the whole's first ones
            assert all(torch.equal(a, b) for a, b in zip(inputs, whole.each("resid_pre"), strict=False))
            assert all(torch.equal(a, b) for a, b in zip(z, whole.each("attn.z"), strict=False))
