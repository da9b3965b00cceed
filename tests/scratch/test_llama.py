"""The Llama family from scratch (Mistral and Qwen2 as records on it) against Hugging Face, option by
option, on tiny random checkpoints, and on the real offline SmolLM2."""

import contextlib
import json

import pytest
import torch
from numeric import F64, fp32
from checkpoints import make_llama

import probes
from probes import hf, parity, scratch
from probes.cli import main
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES, TOLERANCES
from probes.scratch import llama

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["the cat sat on the mat because it was warm and the dog was not", "小明把苹果给了小红"]  # a padded batch
ENGLISH = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE = "小明把苹果给了小红，因为她很饿"

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16, "rope_theta": 10000.0}
OPTIONS = {
    "group-1": dict(num_attention_heads=9, num_key_value_heads=9, hidden_size=72),
    "group-3": dict(num_attention_heads=9, num_key_value_heads=3, hidden_size=72),
    "group-9": dict(num_attention_heads=9, num_key_value_heads=1, hidden_size=72),  # multi-query
    "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    "rope-linear": dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
    "rope-dynamic": dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
    "rope-llama3": dict(rope_parameters=LLAMA3),
    "tied": dict(tie_word_embeddings=True),
    "biases": dict(attention_bias=True, mlp_bias=True),
    "head-dim": dict(head_dim=12),  # not hidden_size / heads (48 / 6 = 8)
    "gelu-tanh": dict(hidden_act="gelu_pytorch_tanh"),
}


def _load(tmp_path, family="llama", **options):
    return probes.load(str(make_llama(tmp_path / "m", family=family, **options)))


def _compare(model, backend="eager", texts=TEXTS):
    enc = model.encode(texts)
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_bit_identical_to_hugging_face(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option])
    report = _compare(model)
    assert report.passed, report.to_text()
    assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
    assert report.logits_max_abs_diff == 0 and report.qkv_max_abs_diff == 0


@pytest.mark.parametrize("option", ["group-3", "group-9", "rope-llama3", "head-dim"])
@pytest.mark.parametrize("backend", ["sdpa", "flash"])
def test_the_lazy_backends_recover_the_same_attention(tmp_path, option, backend):
    report = _compare(_load(tmp_path, **OPTIONS[option]), backend)
    assert report.passed, report.to_text()
    assert report.candidate == f"scratch/{backend}" and 0 < report.attention_max_abs_diff <= report.tolerance["attention"]


def test_grouped_query_heads_share_their_key_and_value(tmp_path):
    model = _load(tmp_path, **OPTIONS["group-3"])
    assert (model.n_heads, model.n_kv_heads, model.d_head) == (9, 3, 8)
    enc = model.encode(ENGLISH)
    for trace in (hf.forward(model, enc), scratch.forward(model, enc), scratch.forward(model, enc, backend="sdpa")):
        q, k, v = trace.layer_qkv(1)
        assert q.shape[1] == 9 and k.shape[1] == v.shape[1] == 3
        assert [trace.kv_head(1, h) for h in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        _, k7, v7 = trace.qkv(1, 7)
        assert torch.equal(k7, k[0, 2]) and torch.equal(v7, v[0, 2])  # query head 7 reads key/value head 2


def test_hf_view_q_and_k_are_the_rotated_ones(tmp_path):
    """The scores are made of rotated q and k: softmax(q·kᵀ·scale) from the Hugging Face trace's own q, k
    is its attention; with the unrotated projections it is not."""
    model = _load(tmp_path).cast(torch.float64)  # float64: the softmax of the trace's q, k is its row to 1e-10
    trace = hf.forward(model, model.encode(ENGLISH))
    n = len(trace.token_strings())
    causal = torch.ones(n, n, dtype=torch.bool).tril()
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
    """Each variant really changes ω (so its bit-identical parity above is not vacuous)."""
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


def test_mistral_window_shorter_than_the_input(tmp_path):
    model = _load(tmp_path, family="mistral", sliding_window=3)
    assert [model.family.window(model.config, layer) for layer in range(2)] == [3, 3]
    for backend in ("eager", "sdpa", "flash"):
        report = _compare(model, backend)
        assert report.passed, (backend, report.to_text())
    trace = scratch.forward(model.cast(torch.float64), model.encode(ENGLISH), backend="sdpa")
    a = trace.attention(1, 4)
    n = a.shape[-1]
    far = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3
    assert (a[far] == 0).all()  # recovered within the window, summing to 1 there
    assert torch.allclose(a.sum(-1), torch.ones(n, dtype=a.dtype), atol=F64, rtol=0)


def test_a_window_left_out_is_caught(tmp_path, monkeypatch):
    """Parity fails when the scratch pass forgets the window: the window test above is not vacuous."""
    model = _load(tmp_path, family="mistral", sliding_window=3)
    monkeypatch.setattr(llama, "mistral_window", lambda config, layer: None)
    model._scratch = llama.Llama(model.hf.state_dict(), model.config, model.name)  # built without the window
    report = _compare(model)
    assert not report.passed and report.attention_max_abs_diff > 0.01


def test_qwen2_biases_and_window_on_some_layers(tmp_path):
    model = _load(tmp_path, family="qwen2", use_sliding_window=True, sliding_window=3, max_window_layers=1)
    assert [model.family.window(model.config, layer) for layer in range(2)] == [None, 3]
    assert model.hf.model.layers[0].self_attn.q_proj.bias is not None
    for backend in ("eager", "sdpa", "flash"):
        report = _compare(model, backend)
        assert report.passed, (backend, report.to_text())
    assert _compare(model).attention_max_abs_diff == 0


@pytest.mark.parametrize("rope, says", [
    ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}, "rope_type='yarn'"),
    ({"rope_type": "default", "partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
])
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, rope, says):
    model = _load(tmp_path, rope_parameters={"rope_theta": 10000.0, **rope})
    assert not model.scratch_supported and says in model.scratch_problem
    with pytest.raises(UnsupportedModel, match=says.replace("(", r"\(")):
        parity.check(model, ENGLISH)
    trace = hf.forward(model, model.encode(ENGLISH))
    assert trace.q is not None and trace.n_heads == 6


def test_smollm2_parity_on_real_weights(smollm2):
    """The offline SmolLM2 (GGUF, Llama architecture: 30 layers, 9 query heads reading 3 key/value heads)."""
    assert smollm2.family_name == "llama" and smollm2.scratch_supported
    assert (smollm2.n_layers, smollm2.n_heads, smollm2.n_kv_heads, smollm2.d_head) == (30, 9, 3, 64)
    for text in (ENGLISH, CHINESE):
        eager = parity.check(smollm2, text)
        assert eager.passed and eager.attention_max_abs_diff == 0 and eager.logits_max_abs_diff == 0, eager.to_text()
        lazy = parity.check(smollm2, text, backend="sdpa")
        assert lazy.passed, lazy.to_text()  # the verdict reads the scaled figures: logits in the tens
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


FLOAT64_CASES = {**OPTIONS, "mistral": dict(family="mistral", sliding_window=3),
                 "qwen2": dict(family="qwen2", use_sliding_window=True, sliding_window=3, max_window_layers=1)}


@pytest.mark.parametrize("option", list(FLOAT64_CASES))
def test_every_option_is_proven_in_float64_on_both_backends(tmp_path, option):
    """The machine-independent verdict: Hugging Face's model cast to float64 and ours agree to ≤ 1e-10."""
    model = _load(tmp_path, **FLOAT64_CASES[option]).cast(torch.float64)
    for backend in ("eager", "sdpa"):
        report = _compare(model, backend)
        assert report.proven and report.attention_max_abs_diff <= F64, (backend, report.to_text())
        assert report.hidden_max_rel_diff <= F64 and report.logits_max_rel_diff <= FLOAT64_TOLERANCES["logits"]


def test_hugging_faces_float32_steps_would_hide_below_the_float64_proof(tmp_path, monkeypatch):
    """Hugging Face's Llama computes RMSNorm's variance, the rotary angles and the softmax in float32 whatever
    the model's dtype: cast to float64 as it is, it differs from a float64 pass by fp32 rounding (1e-7), and the
    proof could not tell a correct pass from one rounding error. hf.KeepFloat64 keeps those steps float64."""
    model = _load(tmp_path, **OPTIONS["group-3"]).cast(torch.float64)
    assert _compare(model).proven
    monkeypatch.setattr(hf, "KeepFloat64", lambda: contextlib.nullcontext())
    report = _compare(model)
    assert not report.passed and F64 < report.attention_max_abs_diff <= parity.attention_tolerance(len(report.tokens))
