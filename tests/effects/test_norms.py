"""Value-weighted norms equal a hand computation from Hugging Face's own weights (GPT-2, and Llama with grouped
key/value heads)."""

import pytest
import torch

from probes import runner
from probes.effects import norms


def test_gpt2_norms_by_hand(gpt2_model):
    text = "Xiaoming gave the apple to Xiaohong"
    trace = runner.run(gpt2_model, text, source="hf")
    enc = gpt2_model.encode(text)
    layer, head = 1, 2
    block = gpt2_model.hf.transformer.h[layer]
    with torch.inference_mode():
        out = gpt2_model.hf(input_ids=enc.input_ids, output_hidden_states=True, output_attentions=True)
        h = block.ln_1(out.hidden_states[layer][0])
        v = (h @ block.attn.c_attn.weight + block.attn.c_attn.bias)[:, 64:96].view(-1, 4, 8)[:, head]  # [n, d]
        w_o = block.attn.c_proj.weight[head * 8:(head + 1) * 8]  # [d, D]
        alpha = out.attentions[layer][0, head]
        by_hand = alpha * torch.linalg.vector_norm(v @ w_o, dim=-1)[None, :]
    got = norms.value_norms(trace, gpt2_model, layer, head)
    assert torch.allclose(got, by_hand, atol=1e-5)
    assert torch.allclose(norms.value_norms(trace, gpt2_model, layer)[head], got)


def test_llama_grouped_query_norms_by_hand(llama_dir):
    import probes

    model = probes.load(str(llama_dir))
    text = "Researchers probe every layer"
    trace = runner.run(model, text, source="scratch")
    layer, head = 1, 5  # head 5 of 6 reads key/value head 1 of 2
    attn = model.hf.model.layers[layer].self_attn
    enc = model.encode(text)
    with torch.inference_mode():
        out = model.hf(input_ids=enc.input_ids, output_hidden_states=True, output_attentions=True)
        h = model.hf.model.layers[layer].input_layernorm(out.hidden_states[layer][0])
        v = attn.v_proj(h).view(-1, 2, 8)[:, 1]
        w_o = attn.o_proj.weight[:, head * 8:(head + 1) * 8].t()
        by_hand = out.attentions[layer][0, head] * torch.linalg.vector_norm(v @ w_o, dim=-1)[None, :]
    assert torch.allclose(norms.value_norms(trace, model, layer, head), by_hand, atol=1e-5)


def test_a_query_on_one_key_token_equals_the_heads_norm(minilm):
    text = "Xiaoming gave the apple to Xiaohong because she was hungry"
    trace = runner.run(minilm, text, source="scratch")
    got = norms.query_norms(trace, minilm, 10, [7])
    for layer, head in [(1, 2), (5, 5)]:
        assert got[layer, head] == pytest.approx(float(norms.value_norms(trace, minilm, layer, head)[10, 7]), rel=1e-5)
    pieces = norms.query_norms(trace, minilm, 10, [7, 8])  # "xiao ##hong": the two vectors add before the length
    assert (pieces <= got + norms.query_norms(trace, minilm, 10, [8]) + 1e-6).all()
