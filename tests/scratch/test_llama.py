"""What is the Llama family's own (Mistral and Qwen2 as records on its network; their parity against Hugging Face,
option by option, the lazy backends, the float64 proof and the refusals are the conformance suite's:
``test_conformance.py``): grouped-query heads share their key and value, the Hugging Face view's q and k are the
rotated ones, the rotary variants stretch the frequencies, the windows of Mistral and Qwen2, the real offline SmolLM2,
and the float32 steps of Hugging Face's code that the float64 proof keeps in float64."""

import contextlib
import json

import pytest
import torch
from numeric import F64, fp32
from scratch.conformance import CHINESE, ENGLISH, LLAMA3, load, parity_of

import probes
from probes import hf, parity, scratch
from probes.cli import main
from probes.parity import FLOAT64_TOLERANCES, TOLERANCES
from probes.scratch import llama

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_grouped_query_heads_share_their_key_and_value(family_model):
    model = family_model("llama", "group-3")
    assert (model.n_heads, model.n_kv_heads, model.d_head) == (9, 3, 8)
    enc = model.encode(ENGLISH)
    for trace in (hf.forward(model, enc), scratch.forward(model, enc), scratch.forward(model, enc, backend="sdpa")):
        q, k, v = trace.layer_qkv(1)
        assert q.shape[1] == 9 and k.shape[1] == v.shape[1] == 3
        assert [trace.kv_head(1, h) for h in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        _, k7, v7 = trace.qkv(1, 7)
        assert torch.equal(k7, k[0, 2]) and torch.equal(v7, v[0, 2])  # query head 7 reads key/value head 2


def test_hf_view_q_and_k_are_the_rotated_ones(family_model):
    """The scores are made of rotated q and k: softmax(q·kᵀ·scale) from the Hugging Face trace's own q, k
    is its attention; with the unrotated projections it is not."""
    model = family_model("llama", "default").cast(torch.float64)  # float64: softmax(its q, k) is its row to 1e-10
    trace = hf.forward(model, model.encode(ENGLISH))
    n = len(trace.token_strings())
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    assert trace.scales is not None and isinstance(trace.rotary, tuple)  # each layer's scale; one table for all
    for layer in range(2):
        q, k, _ = trace.layer_qkv(layer)
        k = k.repeat_interleave(3, dim=1)
        scores = (q[0] @ k[0].transpose(-2, -1)) * trace.scales[layer]
        assert torch.allclose(torch.softmax(scores.masked_fill(~causal, float("-inf")), -1), trace.attention(layer),
                              atol=F64, rtol=0)
        cos, sin = trace.rotary
        raw = llama.unrotate(q, cos, sin)
        wrong = (raw[0] @ llama.unrotate(k[None], cos, sin)[0].transpose(-2, -1)) * trace.scales[layer]
        off = (torch.softmax(wrong.masked_fill(~causal, float("-inf")), -1) - trace.attention(layer)).abs().max()
        assert off > 1e-3


def test_rope_variants_stretch_the_frequencies():
    """Each variant really changes ω (so its bit-identical parity, the conformance suite's, is not vacuous)."""
    from transformers import LlamaConfig

    def omega(**rope):
        cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64,
                          rope_parameters={"rope_theta": 10000.0, **rope})
        return llama.inverse_frequencies(cfg, 16)

    base = omega(rope_type="default")
    assert torch.equal(omega(rope_type="linear", factor=2.0), base / 2)  # a division by 2 is exact
    assert torch.equal(omega(rope_type="dynamic", factor=2.0), base)  # within the trained context
    assert (omega(rope_type="dynamic", factor=2.0) != llama.inverse_frequencies(
        LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=8,
                    rope_parameters={"rope_theta": 10000.0, "rope_type": "dynamic", "factor": 2.0}), 16)).any()
    stretched = omega(**{k: v for k, v in LLAMA3.items() if k != "rope_theta"})
    assert torch.equal(stretched[-1], base[-1] / 8)  # long wavelengths slowed by the factor (exactly: ÷ 8)
    assert base[0] / 8 < stretched[0] < base[0]  # a wavelength between the two bounds: on the ramp
    # the ramp's blend is a handful of fp32 operations: within eps × 4 of its bounds
    assert ((base / 8 <= stretched * (1 + fp32(4))) & (stretched <= base)).all()


def test_mistral_window_shorter_than_the_input(family_model):
    model = family_model("mistral", "window-3")
    assert [model.family.window(model.config, layer) for layer in range(2)] == [3, 3]
    trace = scratch.forward(model.cast(torch.float64), model.encode(ENGLISH), backend="sdpa")
    a = trace.attention(1, 4)
    n = a.shape[-1]
    far = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3
    assert (a[far] == 0).all()  # recovered within the window, summing to 1 there
    assert torch.allclose(a.sum(-1), torch.ones(n, dtype=a.dtype), atol=F64, rtol=0)


def test_a_window_left_out_is_caught(tmp_path, monkeypatch):
    """Parity fails when the scratch pass forgets the window: the window test above is not vacuous."""
    model = load("mistral", tmp_path, sliding_window=3)
    monkeypatch.setattr(llama, "mistral_window", lambda config, layer: None)
    model._scratch = llama.Llama(model.hf.state_dict(), model.config, model.name)  # built without the window
    report = parity_of(model)
    assert not report.passed and report.attention_max_abs_diff > 0.01


def test_qwen2_biases_and_window_on_some_layers(family_model):
    model = family_model("qwen2", "window-3-on-layer-1")
    assert [model.family.window(model.config, layer) for layer in range(2)] == [None, 3]
    assert model.hf.model.layers[0].self_attn.q_proj.bias is not None


def test_smollm2_parity_on_real_weights(smollm2):
    """The offline SmolLM2 (GGUF, Llama architecture: 30 layers, 9 query heads reading 3 key/value heads)."""
    assert smollm2.family_name == "llama" and smollm2.scratch_supported
    assert (smollm2.n_layers, smollm2.n_heads, smollm2.n_kv_heads, smollm2.d_head) == (30, 9, 3, 64)
    for text in (ENGLISH, CHINESE):
        eager = parity.check(smollm2, text)
        assert eager.passed and eager.attention_max_abs_diff == 0 and eager.logits_max_abs_diff == 0, eager.to_text()
        lazy = parity.check(smollm2, text, backend="sdpa")
        assert lazy.passed, lazy.to_text()  # the verdict reads the scaled figures: logits in the tens
        assert lazy.logits_max_rel_diff is not None  # a decoder's logits
        assert lazy.logits_max_rel_diff <= TOLERANCES["logits"] and lazy.tolerance["logits"] == TOLERANCES["logits"]
    proof = parity.check(smollm2, ENGLISH, backend="sdpa", dtype="float64")
    assert proof.proven and proof.attention_max_abs_diff <= F64, proof.to_text()


def test_smollm2_parity_from_the_cli(smollm2, monkeypatch, capsys):
    monkeypatch.setattr(probes.models, "_load", lambda name, allow_local_paths: smollm2)  # loaded once per session
    assert main(["parity", "--model", "smollm2", "--text", CHINESE, "--backend", "sdpa", "--dtype", "float64",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["model"] == "smollm2" and len(data["per_layer"]) == 30
    assert data["dtype"] == "float64" and data["tolerance"] == FLOAT64_TOLERANCES
    assert data["attention_max_abs_diff"] <= F64 and data["logits_max_rel_diff"] <= FLOAT64_TOLERANCES["logits"]


def test_hugging_faces_float32_steps_would_hide_below_the_float64_proof(family_model, monkeypatch):
    """Hugging Face's Llama computes RMSNorm's variance, the rotary angles and the softmax in float32 whatever
    the model's dtype: cast to float64 as it is, it differs from a float64 pass by fp32 rounding (1e-7), and the
    proof could not tell a correct pass from one rounding error. hf.KeepFloat64 keeps those steps float64."""
    model = family_model("llama", "group-3").cast(torch.float64)
    assert parity_of(model).proven
    monkeypatch.setattr(hf, "KeepFloat64", lambda: contextlib.nullcontext())
    report = parity_of(model)
    assert not report.passed and F64 < report.attention_max_abs_diff <= parity.attention_tolerance(len(report.tokens))
