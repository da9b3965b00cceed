"""Interventions: a planted copy head matters most; batched ablation equals one pass per head and equals the same
ablation done inside Hugging Face's own module; clean edited passes equal the Trace; bad input is refused."""

import pytest
import torch

from probes import runner, scratch
from probes.effects import ablation
from probes.errors import BadOption
from tests.effects.conftest import ALTERNATING, COPY_HEAD

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry"


def test_planted_copy_head_changes_the_loss_most(copy_model):
    frame = ablation.ablate_each(copy_model, ALTERNATING)
    top = frame.sort_values("loss").iloc[-1]
    assert (top["layer"], top["head"]) == COPY_HEAD
    assert top.loss > 5.0  # without it the model cannot predict the alternation
    others = frame.iloc[1:]  # heads 0.1–0.3
    assert others.loss.abs().max() < 0.01 * top.loss
    assert top.top_changed > 0.5 and others.top_changed.max() == 0.0


def test_patching_from_itself_changes_nothing_and_from_another_text_does(copy_model):
    same = ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "patch", other=ALTERNATING)
    assert all(abs(v) < 1e-12 for v in same.values())
    other = ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "patch", other=ALTERNATING.replace("head", "he"))
    assert other["loss"] > 1.0


def test_mean_ablation_writes_the_reference_mean(copy_model):
    reference = ["the head", "he the he the"]
    means = ablation.head_means(copy_model, reference)
    got = scratch.outputs(copy_model, copy_model.encode(reference[0]), keep_z=True).z[0][0]  # [H, L, d]
    got2 = scratch.outputs(copy_model, copy_model.encode(reference[1]), keep_z=True).z[0][0]
    by_hand = torch.cat([got, got2], dim=1).double().mean(1)
    assert torch.allclose(means[0].double(), by_hand, atol=1e-6)
    edit = ablation.ablation_edit([[COPY_HEAD]], "mean", means=means)
    z = torch.randn(1, 4, 5, 8)
    assert torch.equal(edit(0, z.clone())[0, 0], means[0, 0].expand(5, 8))


def test_batched_equals_one_pass_per_head(minilm):
    batched = ablation.ablate_each(minilm, SHE, position=8)
    naive = ablation.ablate_each(minilm, SHE, position=8, batched=False)
    cols = ["hidden_change", "token_change", "embedding_change"]
    assert (batched[cols] - naive[cols]).abs().to_numpy().max() < 1e-6
    assert batched[cols].to_numpy().max() > 0.01


def test_equals_ablating_inside_hugging_face(minilm):
    """Zero the head's slice of the output projection's input in Hugging Face's BertModel: the same change."""
    layer, head = 5, 5
    enc = minilm.encode(SHE)
    d = minilm.d_head
    dense = minilm.hf.encoder.layer[layer].attention.output.dense

    def zero_head(_module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0.0
        return (x,)

    with torch.inference_mode():
        clean = minilm.hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state[0]
        hook = dense.register_forward_pre_hook(zero_head)
        try:
            ablated = minilm.hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state[0]
        finally:
            hook.remove()
    expected = (1 - torch.nn.functional.cosine_similarity(ablated.double(), clean.double(), dim=-1)).mean()
    got = ablation.ablate(minilm, SHE, [(layer, head)])
    assert got["hidden_change"] == pytest.approx(float(expected), abs=1e-6)
    assert got["hidden_change"] > 0.05


def test_clean_edited_pass_equals_the_trace(gpt2_model):
    enc = gpt2_model.encode("Researchers probe every head")
    trace = runner.forward(gpt2_model, enc, "scratch")
    got = scratch.outputs(gpt2_model, enc)
    assert torch.equal(got.hidden, trace.hidden_states[-1]) and torch.equal(got.logits, trace.logits)
    keep = scratch.outputs(gpt2_model, enc, keep_inputs=True)
    resumed = scratch.outputs(gpt2_model, enc, resume=(1, keep.inputs[1]))
    assert torch.equal(resumed.logits, trace.logits)  # starting at layer 1 from its input: the same numbers


def test_an_edited_trace_shows_the_edit_downstream(gpt2_model):
    enc = gpt2_model.encode("Researchers probe every head")
    clean = runner.forward(gpt2_model, enc, "scratch")
    edited = scratch.forward(gpt2_model, enc, edit=ablation.ablation_edit([[(0, 1)]]))
    assert torch.equal(edited.attention(0), clean.attention(0))  # layer 0's attention is before the edit
    assert not torch.allclose(edited.attention(1), clean.attention(1))  # layer 1 reads the edited stream


def test_bad_input_is_refused_with_advice(minilm, copy_model):
    with pytest.raises(BadOption, match="outside minilm: layers 0–5, heads 0–11"):
        ablation.parse_heads("1.2,6.0", minilm)
    with pytest.raises(BadOption, match="LAYER.HEAD"):
        ablation.parse_heads("1-2", minilm)
    with pytest.raises(BadOption, match="same length in tokens"):
        ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "patch", other="the head")
    with pytest.raises(BadOption, match="reference set"):
        ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "mean")
    with pytest.raises(BadOption, match="outside the text's"):
        ablation.ablate(minilm, SHE, [(1, 2)], position=99)
    with pytest.raises(BadOption, match="unknown ablation"):
        ablation.ablation_edit([[(0, 0)]], "half")


def test_grouped_query_ablation_equals_hugging_face(llama_dir):
    """Llama with 6 query heads over 2 key/value heads: zeroing head 4's slice of o_proj's input in Hugging Face's
    module changes the next-token loss exactly as the from-scratch ablation says."""
    import probes
    from probes.effects.measures import token_losses

    model = probes.load(str(llama_dir))
    text, (layer, head) = "Researchers probe every layer and every head", (1, 4)
    enc = model.encode(text)
    d = model.d_head
    o_proj = model.hf.model.layers[layer].self_attn.o_proj

    def zero_head(_module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0.0
        return (x,)

    with torch.inference_mode():
        clean = model.hf(input_ids=enc.input_ids).logits
        hook = o_proj.register_forward_pre_hook(zero_head)
        try:
            ablated = model.hf(input_ids=enc.input_ids).logits
        finally:
            hook.remove()
    n = enc.input_ids.shape[1]
    expected = float((token_losses(ablated, enc.input_ids[0], n) - token_losses(clean, enc.input_ids[0], n)).mean())
    got = ablation.ablate(model, text, [(layer, head)])
    assert got["loss"] == pytest.approx(expected, abs=1e-5) and abs(expected) > 1e-3
