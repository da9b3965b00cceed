"""The from-scratch ModernBERT (pre-norm, rotary with a θ per layer type, global and local layers with a symmetric
window, GeGLU, no biases) against Hugging Face: tiny random checkpoints with randomised options (window sizes, rotary
bases, head widths, the layers' pattern, the optional biases), English and Chinese text with padding and pairs,
bit-identical in eager fp32, within the derived tolerances on sdpa, proven in float64 on both; the symmetric window
itself, each layer's own rotary tables, and the refusals."""

import random

import numpy as np
import pytest
import torch
from checkpoints import make_modernbert
from numeric import F64, fp32

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.explain import query_steps
from probes.scratch import modernbert

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "小明把苹果给了小红，因为她饿了。", "Short."]
PAIRS = ["She was hungry.", "因为她饿了", "And a much longer second sentence than the first one."]


def _load(tmp_path, **options):
    return probes.load(str(make_modernbert(tmp_path / "m", **options)))


def _compare(model, enc, backend="eager"):
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


def _parity(model, texts=TEXTS, pairs=None):
    """Proven in float64 (≤ 1e-10) on eager and sdpa, within the fp32 tolerances on sdpa, and bit-identical to
    Hugging Face in eager fp32."""
    for m in (model.cast(torch.float64), model):
        enc = m.encode(texts, pairs)
        for backend in ("eager", "sdpa"):
            report = _compare(m, enc, backend)
            assert report.passed and (m is model or report.proven), (backend, report.to_text())
    report = _compare(model, model.encode(texts, pairs))
    assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
    assert report.qkv_max_abs_diff == 0 and report.logits_max_abs_diff in (None, 0.0)
    return report


def _random_options(seed: int) -> dict:
    """A tiny ModernBERT's options drawn at random: layers, heads and head width, the window, both θ, which layers
    are global, the optional biases, the activations, with or without the masked-LM head."""
    rng = random.Random(seed)
    heads = rng.choice([1, 2, 4])
    d = rng.choice([4, 8, 12, 16])
    return dict(num_hidden_layers=rng.randint(2, 4), num_attention_heads=heads, hidden_size=heads * d,
                intermediate_size=rng.choice([8, 24, 40]), local_attention=rng.choice([2, 4, 6, 9, 16]),
                global_attn_every_n_layers=rng.choice([1, 2, 3]),
                global_rope_theta=rng.choice([50.0, 1e4, 160_000.0]), local_rope_theta=rng.choice([7.0, 500.0, 1e4]),
                norm_bias=rng.random() < 0.5, attention_bias=rng.random() < 0.5, mlp_bias=rng.random() < 0.5,
                classifier_bias=rng.random() < 0.5, decoder_bias=rng.random() < 0.5,
                hidden_activation=rng.choice(["gelu", "gelu_pytorch_tanh", "silu"]),
                classifier_activation=rng.choice(["gelu", "relu"]), masked_lm=rng.random() < 0.6)


@pytest.mark.parametrize("seed", range(6))
def test_random_options_pass_parity_with_padding_and_pairs(tmp_path, seed):
    options = _random_options(seed)
    model = _load(tmp_path, **options)
    report = _parity(model, pairs=PAIRS if seed % 2 else None)
    assert len(report.per_layer) == options["num_hidden_layers"]
    assert (report.logits_max_abs_diff is None) != options["masked_lm"]
    net = scratch.build(model)
    thetas = {kind: model.config.rope_parameters[kind]["rope_theta"] for kind in modernbert.LAYER_TYPES}
    assert thetas == {"full_attention": options["global_rope_theta"], "sliding_attention": options["local_rope_theta"]}
    assert [layer.spec.window for layer in net.layers] == [
        None if i % options["global_attn_every_n_layers"] == 0 else options["local_attention"] // 2 + 1
        for i in range(options["num_hidden_layers"])]


def test_a_partial_rotary_factor_is_ignored_as_hugging_face_ignores_it(tmp_path):
    """Hugging Face's ModernBERT turns every number of each head whatever ``partial_rotary_factor`` says: so does this
    network (turning only part would fail parity)."""
    rope = {kind: {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}
            for kind in modernbert.LAYER_TYPES}
    model = _load(tmp_path, rope_parameters=rope)
    assert model.config.rope_parameters["full_attention"].get("partial_rotary_factor") == 0.5
    _parity(model)
    assert scratch.build(model).rotary(4, "cpu")[0].shape[-1] == model.d_head


def test_masked_lm_head_is_bit_identical_and_proven(modernbert_mlm_dir):
    report = _parity(probes.load(str(modernbert_mlm_dir)), pairs=PAIRS)
    assert report.logits_max_abs_diff == 0


def test_pairs_have_separators_and_no_token_types(modernbert_mlm_dir):
    model = probes.load(str(modernbert_mlm_dir))
    assert model.family.name == "modernbert" and model.family.pairs and not model.family.token_types
    enc = model.encode("first sentence", "second sentence")
    assert enc.token_type_ids is None  # ModernBertModel takes none
    assert enc.input_ids[0].tolist().count(model.tokenizer.sep_token_id) == 2
    assert not model.is_causal and not scratch.build(model).causal


def test_the_local_window_is_symmetric(modernbert_mlm_dir):
    """Layer 0 is global, layers 1 and 2 local with local_attention 4: a query sees the keys at most 2 positions away
    on either side (w = 3: fewer than 3 away), exactly 0 outside, each row summing to 1, in Hugging Face's attention,
    in eager and in the lazy Trace's recovered rows."""
    model = probes.load(str(modernbert_mlm_dir))
    assert [model.family.window(model.config, layer) for layer in range(3)] == [None, 3, 3]
    enc = model.encode(TEXTS[0])
    n = enc.input_ids.shape[1]
    far = (torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs() > 2
    for trace in (hf.forward(model, enc), scratch.forward(model, enc), scratch.forward(model, enc, backend="sdpa")):
        for layer in (1, 2):
            a = trace.attention(layer)  # [H, n, n]
            assert (a[:, far] == 0).all() and (a[:, ~far] > 0).all()
            assert torch.allclose(a.sum(-1), torch.ones(a.shape[:-1]), atol=fp32(n), rtol=0)
        assert (trace.attention(0)[:, far] > 0).all()  # the global layer sees every key
    assert hf.forward(model, enc).windows == [None, 3, 3]


def test_a_one_sided_window_would_fail_parity(modernbert_mlm_dir, monkeypatch):
    """Not vacuous: the decoders' window (the past side only) on ModernBERT's local layers is caught."""
    import probes.attention_math as am

    model = probes.load(str(modernbert_mlm_dir))
    monkeypatch.setattr(am, "in_window", lambda query, key, w: (query - key >= 0) & (query - key < w))  # back only
    report = _compare(model, model.encode(TEXTS[0]))
    assert not report.passed


def test_each_layer_turns_by_its_own_theta(tmp_path):
    """The global and local layers' tables differ (θ 160,000 and 10,000): both Traces keep one pair per layer, the
    scratch tables equal Hugging Face's, and the Q/K/V explanation un-turns q by its layer's angles."""
    model = _load(tmp_path, masked_lm=True)
    enc = model.encode(TEXTS[0])
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    assert isinstance(ours.rotary, list) and len(ours.rotary) == 3
    assert not torch.equal(ours.rotary_of(0)[0], ours.rotary_of(1)[0]) and torch.equal(ours.rotary_of(1)[0],
                                                                                     ours.rotary_of(2)[0])
    for layer in range(3):
        for mine, hers in zip(ours.rotary_of(layer), theirs.rotary_of(layer), strict=True):
            assert torch.allclose(mine, hers.expand_as(mine), atol=fp32(4), rtol=0)
    net = scratch.build(model)
    for trace in (ours, theirs):
        for layer in (0, 1):
            steps = query_steps(trace, layer, 1, 5)
            lay = net.layers[layer]
            q = lay.project(lay.normed(trace.hidden_states[layer]))[0][0, 1, 5].numpy()  # as the pass computes it
            # explain turns the pass's turned fp32 q back in float64: a few fp32 roundings of q's size apart
            assert np.allclose(steps.q_unrotated, q, atol=fp32(4, float(np.abs(q).max())), rtol=0)
            assert steps.window == (None if layer == 0 else 3) and not steps.causal


def test_the_float64_rotation_is_the_reference(tmp_path):
    """In float64 every layer's turned q and k, global and local, equal the Hugging Face capture's to float64
    rounding (a fp32 step anywhere, a table or a turn, would show ~1e-7)."""
    model = _load(tmp_path).cast(torch.float64)
    enc = model.encode(TEXTS[1])
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    for layer in range(3):
        q, k, _v = ours.layer_qkv(layer)
        assert (q - theirs.q[layer]).abs().max() <= F64 and (k - theirs.k[layer]).abs().max() <= F64


@pytest.mark.parametrize("norm_bias", [False, True])
def test_composition_maps_are_the_projections_with_the_norms_gain(tmp_path, norm_bias):
    """head_weights read from the fused Wqkv with the gain of the norm the attention reads through (the embeddings'
    on layer 0, which has no attn_norm): the centred, ÷ σ input times W_Q[h] (W_K, W_V) is the layer's own q (k, v)
    before the turn, less the norm's bias through the projection (float64)."""
    model = _load(tmp_path, norm_bias=norm_bias, masked_lm=True).cast(torch.float64)
    net = scratch.build(model)
    enc = model.encode(TEXTS[0])
    inputs = scratch.run(model, enc, keep=["resid_pre"]).each("resid_pre")
    embedded = net.embed[enc.input_ids]
    for layer, lay in enumerate(net.layers):
        x = embedded if layer == 0 else inputs[layer]  # what the norm the attention reads through normalises
        norm = net.ln_emb if layer == 0 else lay.attn_norm
        centred = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + net.eps)
        bias = norm[1] if norm[1] is not None else torch.zeros_like(norm[0])
        for own, w, from_bias in zip(lay.project(lay.normed(inputs[layer])), net.head_weights(layer),
                                     lay.project(bias.expand_as(x)), strict=True):
            assert w.shape == (model.n_heads, model.config.hidden_size, model.d_head)
            got = torch.einsum("bld,hdk->bhlk", centred, w) + from_bias
            assert (got - own).abs().max() <= F64


def test_hugging_faces_sdpa_path_computes_what_its_eager_path_does(modernbert_mlm_dir):
    """The reference runs Hugging Face's eager attention; its sdpa path (the default outside this project) builds the
    same symmetric window as a mask: in float64, on a padded batch of English and Chinese, the last hidden states of
    the real tokens agree to float64 rounding, so the window we match is the model's, whichever path loads it."""
    from transformers import ModernBertForMaskedLM

    model = probes.load(str(modernbert_mlm_dir)).cast(torch.float64)
    fused = ModernBertForMaskedLM.from_pretrained(str(modernbert_mlm_dir), attn_implementation="sdpa",
                                                  dtype=torch.float64).eval()
    enc = model.encode(TEXTS)
    with torch.inference_mode(), hf.KeepFloat64():
        eager, sdpa = (m.model(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state
                       for m in (model.hf, fused))
    real = enc.attention_mask.bool()
    assert fused.config._attn_implementation == "sdpa" and model.hf.config._attn_implementation == "eager"
    assert (eager[real] - sdpa[real]).abs().max() <= F64


def test_a_bounded_hugging_face_trace_recovers_the_window_from_its_logsumexp(modernbert_mlm_dir):
    """Over its attention budget the Hugging Face view keeps one logsumexp per row, made with the layer's symmetric
    window (row_logsumexp), and recovers every head from it: in float64 the same rows as its own eager
    probabilities, exactly 0 outside the window."""
    model = probes.load(str(modernbert_mlm_dir)).cast(torch.float64)
    enc = model.encode(TEXTS)
    full, lazy = hf.forward(model, enc), hf.forward(model, enc, attention_budget=0)
    assert lazy.lazy and not full.lazy
    for item in range(len(TEXTS)):
        for layer in range(model.n_layers):
            got, want = lazy.attention(layer, item=item), full.attention(layer, item=item)
            assert (got - want).abs().max() <= F64 and torch.equal(got == 0, want == 0)


def test_the_lazy_backends_recover_the_same_attention(modernbert_mlm_dir):
    model = probes.load(str(modernbert_mlm_dir))
    enc = model.encode(TEXTS, PAIRS)
    for backend in ("sdpa", "flash"):
        report = _compare(model, enc, backend)
        assert report.passed, report.to_text()
        assert report.candidate == f"scratch/{backend}" and 0 < report.attention_max_abs_diff


def test_every_position_is_a_turn_not_a_table(modernbert_mlm_dir):
    """No position embedding: the same token at two positions embeds the same; only q and k carry position."""
    model = probes.load(str(modernbert_mlm_dir))
    net = scratch.build(model)
    ids = torch.tensor([[5, 7, 5]])
    x = net.embeddings(ids)
    assert torch.equal(x[0, 0], x[0, 2])
    assert model.family.positions == "rotary" and model.max_tokens == model.config.max_position_embeddings


@pytest.mark.parametrize("options, says", [
    (dict(hidden_activation="gelu_10"), "hidden_activation='gelu_10'"),
    (dict(classifier_activation="gelu_10", masked_lm=True), "classifier_activation='gelu_10'"),
    (dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
                           "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}), "rope_type='linear'"),
])
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, options, says):
    model = _load(tmp_path, **options)
    with pytest.raises(UnsupportedModel, match=says):
        scratch.build(model)
    assert "ModernBERT" in model.scratch_problem
    assert hf.forward(model, model.encode("the Hugging Face view still works")).attn is not None


def test_a_weight_the_network_would_not_use_is_refused(modernbert_mlm_dir):
    model = probes.load(str(modernbert_mlm_dir))
    weights = dict(model.hf.state_dict(), **{"model.layers.0.attn_norm.weight": torch.ones(32)})
    with pytest.raises(UnsupportedModel, match="attn_norm"):
        modernbert.ModernBert(weights, model.config, "extra")
