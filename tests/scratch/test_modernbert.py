"""What is ModernBERT's own (pre-norm, rotary with a θ per layer type, global and local layers with a symmetric window,
GeGLU, no biases; its parity against Hugging Face on tiny checkpoints with randomised options, English and Chinese text
with padding and pairs, bit-identical in eager fp32, within the derived tolerances on the lazy backends, proven in
float64 on eager and sdpa, and its refusals are the conformance suite's: ``test_conformance.py``): each layer's θ and
window, the symmetric window itself, each layer's own rotary tables, the float64 rotation, the composition maps,
Hugging Face's own sdpa path and bounded trace."""

import numpy as np
import pytest
import torch
from numeric import F64, fp32
from scratch.conformance import ENGLISH, SPECS, built, compare, load

import probes
from probes import hf, scratch
from probes.explain import query_steps
from probes.scratch import modernbert

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = SPECS["modernbert"].inputs[1].texts  # English and Chinese, padded


@pytest.mark.parametrize("seed", range(6))
def test_random_options_give_each_layer_its_theta_and_window(family_model, seed):
    """The checkpoints of random options the conformance suite holds to Hugging Face: each layer type's θ as drawn,
    the global layers every global_attn_every_n_layers-th, the others local with a window of local_attention / 2 + 1."""
    options = SPECS["modernbert"].options[f"random-{seed}"]
    assert isinstance(options, dict)  # a config varied (not a fixture's folder)
    model = family_model("modernbert", f"random-{seed}")
    net = built(model, modernbert.ModernBert)
    thetas = {kind: model.config.rope_parameters[kind]["rope_theta"] for kind in modernbert.LAYER_TYPES}
    assert thetas == {"full_attention": options["global_rope_theta"], "sliding_attention": options["local_rope_theta"]}
    assert [layer.spec.window for layer in net.layers] == [
        None if i % options["global_attn_every_n_layers"] == 0 else options["local_attention"] // 2 + 1
        for i in range(options["num_hidden_layers"])]


def test_a_partial_rotary_factor_is_ignored_as_hugging_face_ignores_it(family_model):
    """Hugging Face's ModernBERT turns every number of each head whatever ``partial_rotary_factor`` says: so does this
    network (turning only part would fail the conformance suite's parity on this checkpoint)."""
    model = family_model("modernbert", "partial-rotary-ignored")
    assert all(model.config.rope_parameters[kind].get("partial_rotary_factor") == 0.5
               for kind in modernbert.LAYER_TYPES)
    assert built(model, modernbert.ModernBert).rotary(4, "cpu")[0].shape[-1] == model.d_head


def test_the_local_window_is_symmetric(family_model):
    """Layer 0 is global, layers 1 and 2 local with local_attention 4: a query sees the keys at most 2 positions away
    on either side (w = 3: fewer than 3 away), exactly 0 outside, each row summing to 1, in Hugging Face's attention,
    in eager and in the lazy Trace's recovered rows."""
    model = family_model("modernbert", "masked-lm")
    assert [model.family.window(model.config, layer) for layer in range(3)] == [None, 3, 3]
    enc = model.encode(ENGLISH)
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
    report = compare(model, model.encode(ENGLISH))
    assert not report.passed


def tables(trace, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The trace's rotary tables (cos, sin) of ``layer``: a rotary model's Trace has them for every layer."""
    got = trace.rotary_of(layer)
    assert got is not None, f"no rotary tables for layer {layer}"
    return got


def test_each_layer_turns_by_its_own_theta(family_model):
    """The global and local layers' tables differ (θ 160,000 and 10,000): both Traces keep one pair per layer, the
    scratch tables equal Hugging Face's, and the Q/K/V explanation un-turns q by its layer's angles."""
    model = family_model("modernbert", "masked-lm")
    enc = model.encode(ENGLISH)
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    assert isinstance(ours.rotary, list) and len(ours.rotary) == 3
    assert not torch.equal(tables(ours, 0)[0], tables(ours, 1)[0]) and torch.equal(tables(ours, 1)[0],
                                                                                 tables(ours, 2)[0])
    for layer in range(3):
        for mine, hers in zip(tables(ours, layer), tables(theirs, layer), strict=True):
            assert torch.allclose(mine, hers.expand_as(mine), atol=fp32(4), rtol=0)
    net = built(model, modernbert.ModernBert)
    for trace in (ours, theirs):
        for layer in (0, 1):
            steps = query_steps(trace, layer, 1, 5)
            assert steps.q_unrotated is not None  # a rotary model's
            lay = net.layers[layer]
            q = lay.project(lay.normed(trace.hidden_states[layer]))[0][0, 1, 5].numpy()  # as the pass computes it
            # explain turns the pass's turned fp32 q back in float64: a few fp32 roundings of q's size apart
            assert np.allclose(steps.q_unrotated, q, atol=fp32(4, float(np.abs(q).max())), rtol=0)
            assert steps.window == (None if layer == 0 else 3) and not steps.causal


def test_the_float64_rotation_is_the_reference(family_model):
    """In float64 every layer's turned q and k, global and local, equal the Hugging Face capture's to float64
    rounding (a fp32 step anywhere, a table or a turn, would show ~1e-7)."""
    model = family_model("modernbert", "masked-lm").cast(torch.float64)
    enc = model.encode(TEXTS[1])
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    for layer in range(3):
        q, k, _v = ours.layer_qkv(layer)
        assert theirs.q is not None and theirs.k is not None  # the capture keeps them
        assert (q - theirs.q[layer]).abs().max() <= F64 and (k - theirs.k[layer]).abs().max() <= F64


@pytest.mark.parametrize("norm_bias", [False, True])
def test_composition_maps_are_the_projections_with_the_norms_gain(tmp_path, norm_bias):
    """head_weights read from the fused Wqkv with the gain of the norm the attention reads through (the embeddings'
    on layer 0, which has no attn_norm): the centred, ÷ σ input times W_Q[h] (W_K, W_V) is the layer's own q (k, v)
    before the turn, less the norm's bias through the projection (float64)."""
    model = load("modernbert", tmp_path, norm_bias=norm_bias, masked_lm=True).cast(torch.float64)
    net = built(model, modernbert.ModernBert)
    enc = model.encode(ENGLISH)
    inputs = scratch.run_with_hooks(model, enc, keep=["resid_pre"]).each("resid_pre")
    embedded = net.embed[enc.input_ids]
    for layer, lay in enumerate(net.layers):
        x = embedded if layer == 0 else inputs[layer]  # what the norm the attention reads through normalises
        norm = net.ln_emb if layer == 0 else lay.attn_norm
        assert norm is not None  # every layer but 0 has its attn_norm
        centred = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + net.eps)
        bias = norm[1] if norm[1] is not None else torch.zeros_like(norm[0])
        for own, w, from_bias in zip(lay.project(lay.normed(inputs[layer])), net.head_weights(layer),
                                     lay.project(bias.expand_as(x)), strict=True):
            assert w.shape == (model.n_heads, model.config.hidden_size, model.d_head)
            got = torch.einsum("bld,hdk->bhlk", centred, w) + from_bias
            assert (got - own).abs().max() <= F64


def test_hugging_faces_sdpa_path_computes_what_its_eager_path_does(family_model, modernbert_mlm_dir):
    """The reference runs Hugging Face's eager attention; its sdpa path (the default outside this project) builds the
    same symmetric window as a mask: in float64, on a padded batch of English and Chinese, the last hidden states of
    the real tokens agree to float64 rounding, so the window we match is the model's, whichever path loads it."""
    from transformers import ModernBertForMaskedLM

    model = family_model("modernbert", "masked-lm").cast(torch.float64)
    fused = ModernBertForMaskedLM.from_pretrained(str(modernbert_mlm_dir), attn_implementation="sdpa",
                                                  dtype=torch.float64).eval()
    enc = model.encode(list(TEXTS))
    with torch.inference_mode(), hf.KeepFloat64():
        eager, sdpa = (m.model(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state
                       for m in (model.hf, fused))
    real = enc.attention_mask.bool()
    assert fused.config._attn_implementation == "sdpa" and model.hf.config._attn_implementation == "eager"
    assert (eager[real] - sdpa[real]).abs().max() <= F64


def test_a_bounded_hugging_face_trace_recovers_the_window_from_its_logsumexp(family_model):
    """Over its attention budget the Hugging Face view keeps one logsumexp per row, made with the layer's symmetric
    window (row_logsumexp), and recovers every head from it: in float64 the same rows as its own eager
    probabilities, exactly 0 outside the window."""
    model = family_model("modernbert", "masked-lm").cast(torch.float64)
    enc = model.encode(list(TEXTS))
    full, lazy = hf.forward(model, enc), hf.forward(model, enc, attention_budget=0)
    assert lazy.lazy and not full.lazy
    for item in range(len(TEXTS)):
        for layer in range(model.n_layers):
            got, want = lazy.attention(layer, item=item), full.attention(layer, item=item)
            assert (got - want).abs().max() <= F64 and torch.equal(got == 0, want == 0)


def test_every_position_is_a_turn_not_a_table(family_model):
    """No position embedding: the same token at two positions embeds the same; only q and k carry position."""
    model = family_model("modernbert", "masked-lm")
    net = built(model, modernbert.ModernBert)
    ids = torch.tensor([[5, 7, 5]])
    x = net.embeddings(ids)
    assert torch.equal(x[0, 0], x[0, 2])
    assert model.family.positions == "rotary" and model.max_tokens == model.config.max_position_embeddings
