"""What is Gemma 3's own (text; its parity against Hugging Face, option by option, bit-identical in eager, the lazy
backends, the float64 proof refused by name and made against Hugging Face's own code with its norm in the input's
dtype, and the refusals are the conformance suite's: ``test_conformance.py``): each layer type turns by its own table,
QK-norm and the rotary table of each layer type left out are caught, the layers alternate local and global, QK-norm
bounds each head's q and k, a partial rotary is refused, a score cap is refused at load because Hugging Face ignores
it, the multimodal ``gemma3`` type is left to the Hugging Face view, the head probes read the same scores from either
path."""

import pytest
import torch
from checkpoints import GEMMA3_ROPE, gpt2_tokenizer, make_gemma
from numeric import fp32
from scratch.conformance import ENGLISH, built, gemma3_rope, load, parity_of

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.scratch import gemma3, llama

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_each_layer_type_turns_by_its_own_table(family_model):
    """Either path's Trace keeps a list of each layer's tables: the local layers' equal Hugging Face's local table, the
    global layer's its global one (θ 1,000,000 and positions ÷ 8), and they differ; the network's (``rotary(length,
    device, layer)``) agree with Hugging Face's."""
    model = family_model("gemma3", "default")
    enc = model.encode(ENGLISH)
    theirs, ours = hf.forward(model, enc).rotary, scratch.forward(model, enc).rotary
    assert theirs is not None and ours is not None and len(theirs) == len(ours) == 3
    for (c1, s1), (c2, s2) in zip(theirs, ours, strict=True):
        assert torch.equal(c1, c2) and torch.equal(s1, s2)
    n = enc.input_ids.shape[1]
    for kind, (cos, sin) in zip(("sliding_attention", "full_attention"), ours[:2], strict=True):
        params = GEMMA3_ROPE[kind]
        omega = 1.0 / params["rope_theta"] ** (torch.arange(0, 16, 2).float() / 16) / params.get("factor", 1.0)
        angles = torch.arange(n)[:, None].float() * omega
        assert torch.equal(cos[0, :, :8], angles.cos()) and torch.equal(sin[0, :, 8:], angles.sin())
    assert not torch.equal(ours[0][0], ours[1][0]) and torch.equal(ours[0][0], ours[2][0])  # layer 2 is local too
    net = built(model, gemma3.Gemma3)
    for layer, (cos, sin) in enumerate(ours):  # the network's accessor hands each layer its type's table
        got = net.rotary(n, enc.input_ids.device, layer)
        assert torch.equal(got[0], cos) and torch.equal(got[1], sin)


@pytest.mark.parametrize("leave_out", ["qk-norm", "one table", "linear factor", "post-attention norm"])
def test_each_new_part_left_out_is_caught(tmp_path, leave_out):
    """Parity fails far beyond rounding when the scratch pass forgets one of Gemma 3's parts: not vacuous."""
    model = load("gemma3", tmp_path)
    net = gemma3.Gemma3(model.hf.state_dict(), model.config, model.name)
    if leave_out == "qk-norm":
        for layer in net.layers:
            layer.q_norm = layer.k_norm = torch.ones_like(layer.q_norm)  # q and k normed, their gains gone
    elif leave_out == "one table":  # every layer turned by the local layers' table (the one-table assumption)
        net.rope = {kind: net.rope["sliding_attention"] for kind in net.rope}
    elif leave_out == "linear factor":
        net.rope = {**net.rope, "full_attention": {**net.rope["full_attention"], "rope_type": "default"}}
    else:
        for layer in net.layers:
            layer.post_attn = torch.zeros_like(layer.post_attn)
    model._scratch = net
    report = parity_of(model)
    assert not report.passed, report.to_text()
    if leave_out != "post-attention norm":  # a wrong q or k: caught at the very vectors
        assert report.qkv_max_abs_diff is not None and report.qkv_max_abs_diff > 1e-3, report.to_text()


def test_the_layers_alternate_local_and_global(family_model):
    """What the record says of the tiny checkpoint's layers (the conformance suite's lazy check sees each local layer
    give nothing past its window, the global one reach past it)."""
    model = family_model("gemma3", "default")
    assert [model.family.window(model.config, layer) for layer in range(3)] == [3, None, 3]
    assert [model.family.softcap(model.config, layer) for layer in range(3)] == [None] * 3
    assert model.family.scale(model.config, 0) == 10 ** -0.5


def test_qk_norm_bounds_each_heads_q_and_k(tmp_path):
    """QK-norm: every head's q and k before the rotation has an rms of its gain's (gain 1 + w: with w zeroed, rms 1),
    and a rotation keeps the norm, so the rotated ones too."""
    model = load("gemma3", tmp_path)
    net = built(model, gemma3.Gemma3)
    for layer in net.layers:
        layer.q_norm = layer.k_norm = torch.ones_like(layer.q_norm)
    x = model.hf.model.embed_tokens(model.encode(ENGLISH).input_ids)
    q, k, _ = net.qkv(1, x)
    for t in (q, k):
        # fp32: the norm's mean of d = 16 squares, its scale and the turn, each a few roundings of numbers near 1
        assert torch.allclose(t.pow(2).mean(-1), torch.ones(()), atol=fp32(4 * 16), rtol=0)


def test_a_partial_rotary_is_refused_by_name(tmp_path):
    """``partial_rotary_factor`` < 1 on a layer type: refused by name (Hugging Face's own Gemma 3 cannot run it
    either: its q and k stay d wide while the tables shrink)."""
    rope = {kind: {**p, "partial_rotary_factor": 0.5} for kind, p in gemma3_rope().items()}
    model = load("gemma3", tmp_path, rope_parameters=rope)
    assert not model.scratch_supported and "partial_rotary_factor" in model.scratch_problem
    with pytest.raises(UnsupportedModel, match="partial_rotary_factor"):
        parity.check(model, ENGLISH)


def test_a_score_cap_is_refused_at_load_because_hugging_face_ignores_it(tmp_path):
    """transformers' Gemma 3 reads ``attn_logit_softcapping`` but never applies it (its logits with a cap of 0.1 equal
    those without): the loader refuses such a checkpoint by name, rather than show either path's wrong numbers."""
    import transformers

    path = make_gemma(tmp_path / "capped", family="gemma3", attn_logit_softcapping=0.1)
    ids = torch.tensor([[1, 5, 9, 2, 7, 3]])
    capped = transformers.Gemma3ForCausalLM.from_pretrained(path, attn_implementation="eager")
    plain = transformers.Gemma3ForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                           attn_logit_softcapping=None)
    with torch.inference_mode():
        assert torch.equal(capped(ids).logits, plain(ids).logits)  # the cap changed nothing: it is never applied
    with pytest.raises(UnsupportedModel, match=r"attn_logit_softcapping=0\.1.*Gemma 3 ignores"):
        probes.load(str(path))


def test_the_multimodal_model_type_is_refused_by_name_at_load(tmp_path):
    """``gemma3`` (Gemma3ForConditionalGeneration: a vision tower before the text, the text model's config nested
    under ``text_config``) has no family record, and the Hugging Face view cannot read it either (the wrapper has no
    layers of its own to count): the loader refuses it by name and points to the text-only model type."""
    import transformers

    from probes.families import family_of

    assert family_of(transformers.Gemma3Config()) is None
    text_only = family_of(transformers.Gemma3TextConfig())
    assert text_only is not None and text_only.name == "gemma3"
    tok = gpt2_tokenizer()
    text = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=64, query_pre_attn_scalar=10)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                       image_token_index=len(tok) - 1, boi_token_index=len(tok) - 2,
                                       eoi_token_index=len(tok) - 3)
    torch.manual_seed(0)
    transformers.Gemma3ForConditionalGeneration(config).save_pretrained(tmp_path / "mm")
    tok.save_pretrained(tmp_path / "mm")
    with pytest.raises(UnsupportedModel, match=r"multimodal 'gemma3' model .*text-only checkpoint .*'gemma3_text'"):
        probes.load(str(tmp_path / "mm"))


def test_rotary_tables_take_one_layer_types_parameters():
    """llama.rotary_tables with explicit parameters: the linear type divides every frequency by its factor."""
    import transformers

    config = transformers.Gemma3TextConfig(head_dim=8, rope_parameters=gemma3_rope())
    cos_local, _ = llama.rotary_tables(config, 5, params=config.rope_parameters["sliding_attention"])
    cos_global, _ = llama.rotary_tables(config, 5, params=config.rope_parameters["full_attention"])
    omega = 1.0 / 1_000_000.0 ** (torch.arange(0, 8, 2).float() / 8) / 8.0
    assert torch.equal(cos_global[0, :, :4], (torch.arange(5)[:, None].float() * omega).cos())
    assert not torch.equal(cos_local, cos_global)


def test_the_head_probes_read_the_same_scores_from_either_path(family_model):
    """The induction probes on Gemma 3's Traces (repeated random tokens, the local layers' window 3 included): the
    lazy from-scratch Trace gives Hugging Face's scores, to the attention's fp32 parity tolerance."""
    from probes import runner
    from probes.heads.induction import induction_scores, repeated_tokens

    model = family_model("gemma3", "default")
    enc = repeated_tokens(model, 3, 8)
    ours = induction_scores([runner.forward(model, enc, source="scratch", backend="sdpa", logits=False)])
    theirs = induction_scores([runner.forward(model, enc, source="hf", logits=False)])
    assert set(ours.label) == {"previous_token", "duplicate_token", "induction"}
    assert len(ours) == 3 * model.n_layers * model.n_heads
    tolerance = parity.TOLERANCES["attention"]  # each score is a mean of attention weights
    assert (ours.score - theirs.score).abs().max() <= tolerance
