import dataclasses

import pytest
import torch
from numeric import fp32

from probes import hf


@pytest.mark.numeric
def test_attention_drops_padding_and_rows_sum_to_one(minilm):
    enc = minilm.encode(["a much longer sentence than the other one", "short"])
    trace = hf.forward(minilm, enc)
    n = int(enc.attention_mask[1].sum())
    a = trace.attention(3, 5, item=1)
    assert a.shape == (n, n)
    assert torch.allclose(a.sum(-1), torch.ones(n), atol=fp32(n), rtol=0)  # a row of n fp32 weights sums to 1
    assert trace.token_strings(1) == ["[CLS]", "short", "[SEP]"]
    assert trace.attention(3, item=1).shape == (minilm.n_heads, n, n)
    q, k, v = trace.qkv(2, 1, item=1)
    assert q.shape == k.shape == v.shape == (n, minilm.d_head)


def test_bad_indices_name_the_range(minilm):
    trace = hf.forward(minilm, minilm.encode("hello"))
    with pytest.raises(IndexError, match="layer 6 is outside the trace: layers 0–5"):
        trace.attention(6, 0)
    with pytest.raises(IndexError, match="head 12 is outside the trace: heads 0–11"):
        trace.attention(0, 12)
    with pytest.raises(IndexError, match="batch of 1"):
        trace.attention(0, 0, item=1)


def test_hidden_states_follow_hf_convention(gpt2_model):
    trace = hf.forward(gpt2_model, gpt2_model.encode("the cat"))
    assert len(trace.hidden_states) == gpt2_model.n_layers + 1
    assert trace.logits is not None and trace.logits.shape[-1] == gpt2_model.config.vocab_size


def test_nbytes_counts_what_a_trace_holds_once_per_buffer(gpt2_model):
    """What a cached trace costs a server: every tensor it keeps, by hand here, and a lazy trace (a logsumexp per
    row instead of the probabilities) holds less."""
    from probes import runner

    enc = gpt2_model.encode("the cat sat on the mat because it was warm")
    full = runner.forward(gpt2_model, enc, "hf", "eager", logits=True)
    # every one asked for or kept by the Hugging Face pass
    assert full.logits is not None and full.attn is not None and full.q is not None and full.k is not None
    assert full.v is not None
    kept = [full.input_ids, full.attention_mask, *full.hidden_states, full.logits, *full.attn, *full.q, *full.k,
            *full.v, *(full.rotary or ())]
    assert full.nbytes == sum(t.nbytes for t in kept)  # nothing left out, and q, k, v (views of one buffer) once
    twice = dataclasses.replace(full, logits=full.hidden_states[-1])  # one buffer under two names counts once
    assert twice.nbytes == full.nbytes - full.logits.nbytes
    lazy = runner.forward(gpt2_model, enc, "hf", "eager", logits=True, attention_budget=1)
    assert lazy.lazy and lazy.nbytes < full.nbytes
    assert lazy.lse is not None  # a lazy trace's logsumexps
    assert full.nbytes - lazy.nbytes >= sum(a.nbytes for a in full.attn) - sum(s.nbytes for s in lazy.lse)
