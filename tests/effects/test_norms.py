"""Value-weighted norms equal a hand computation from Hugging Face's own weights (GPT-2, and Llama with grouped
key/value heads)."""

import pytest
import torch
from numeric import F64

from probes import runner
from probes.effects import norms
from probes.hf import KeepFloat64

pytestmark = pytest.mark.numeric  # float64 copies: the hand computations agree to float64 rounding


def test_gpt2_norms_by_hand(gpt2_model64):
    gpt2_model = gpt2_model64
    text = "Xiaoming gave the apple to Xiaohong"
    trace = runner.trace(gpt2_model, text, source="hf")
    enc = gpt2_model.encode(text)
    layer, head = 1, 2
    block = gpt2_model.hf.transformer.h[layer]
    with torch.inference_mode(), KeepFloat64():
        out = gpt2_model.hf(input_ids=enc.input_ids, output_hidden_states=True, output_attentions=True)
        h = block.ln_1(out.hidden_states[layer][0])
        v = (h @ block.attn.c_attn.weight + block.attn.c_attn.bias)[:, 64:96].view(-1, 4, 8)[:, head]  # [n, d]
        w_o = block.attn.c_proj.weight[head * 8:(head + 1) * 8]  # [d, D]
        alpha = out.attentions[layer][0, head]
        by_hand = alpha * torch.linalg.vector_norm(v @ w_o, dim=-1)[None, :]
    got = norms.value_norms(trace, gpt2_model, layer, head)
    assert got.dtype == by_hand.dtype == torch.float64
    assert torch.allclose(got, by_hand, atol=F64 * float(by_hand.abs().max()), rtol=0)
    assert torch.equal(norms.value_norms(trace, gpt2_model, layer)[head], got)  # one head of all: the same numbers


def test_llama_grouped_query_norms_by_hand(llama_dir):
    import probes

    model = probes.models.load(str(llama_dir)).cast(torch.float64)
    text = "Researchers probe every layer"
    trace = runner.trace(model, text, source="scratch")
    layer, head = 1, 5  # head 5 of 6 reads key/value head 1 of 2
    attn = model.hf.model.layers[layer].self_attn
    enc = model.encode(text)
    with torch.inference_mode(), KeepFloat64():
        out = model.hf(input_ids=enc.input_ids, output_hidden_states=True, output_attentions=True)
        h = model.hf.model.layers[layer].input_layernorm(out.hidden_states[layer][0])
        v = attn.v_proj(h).view(-1, 2, 8)[:, 1]
        w_o = attn.o_proj.weight[:, head * 8:(head + 1) * 8].t()
        by_hand = out.attentions[layer][0, head] * torch.linalg.vector_norm(v @ w_o, dim=-1)[None, :]
    got = norms.value_norms(trace, model, layer, head)
    assert got.dtype == by_hand.dtype == torch.float64
    assert torch.allclose(got, by_hand, atol=F64 * float(by_hand.abs().max()), rtol=0)


def test_a_query_on_one_key_token_equals_the_heads_norm(minilm64):
    minilm = minilm64  # ‖(α·v)·W_O‖ and α·‖v·W_O‖ round differently: float64 rounding only
    text = "Xiaoming gave the apple to Xiaohong because she was hungry"
    trace = runner.trace(minilm, text, source="scratch")
    got = norms.query_norms(trace, minilm, 10, [7])
    for layer, head in [(1, 2), (5, 5)]:
        expected = float(norms.value_norms(trace, minilm, layer, head)[10, 7])
        assert got[layer, head] == pytest.approx(expected, abs=F64 * max(1.0, expected), rel=0)
    pieces = norms.query_norms(trace, minilm, 10, [7, 8])  # "xiao ##hong": the two vectors add before the length
    bound = got + norms.query_norms(trace, minilm, 10, [8])  # the triangle inequality, to float64 rounding
    assert (pieces <= bound + F64 * max(1.0, bound.max())).all()
