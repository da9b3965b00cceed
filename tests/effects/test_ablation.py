"""Interventions: a planted copy head matters most; batched ablation equals one pass per head and equals the same
ablation done inside Hugging Face's own module; clean edited passes equal the Trace; bad input is refused."""

import pytest
import torch
from effects.planted import ALTERNATING, COPY_HEAD
from numeric import EPS64, F64

import probes
from probes import hf, runner, scratch
from probes.effects import ablation
from probes.errors import BadOption

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry"


def test_planted_copy_head_changes_the_loss_most(copy_model):
    frame = ablation.ablate_each(copy_model, ALTERNATING)
    top = frame.sort_values("loss").iloc[-1]
    assert (top["layer"], top["head"]) == COPY_HEAD
    assert top.loss > 5.0  # without it the model cannot predict the alternation
    others = frame.iloc[1:]  # heads 0.1–0.3
    assert others.loss.abs().max() < 0.01 * top.loss
    assert top.top_changed > 0.5 and others.top_changed.max() == 0.0


@pytest.mark.numeric
def test_patching_from_itself_changes_nothing_and_from_another_text_does(copy_model):
    same = ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "patch", other=ALTERNATING)
    # the patched pass is the clean one bit for bit; 1 − cos(x, x) in float64 is left: x·x and ‖x‖² are sums of
    # D terms (D·eps64 each), then a square root and a division
    d_model = copy_model.config.hidden_size
    assert all(abs(v) <= 2 * EPS64 * (d_model + 2) for v in same.values())
    other = ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "patch", other=ALTERNATING.replace("head", "he"))
    assert other["loss"] > 1.0


@pytest.mark.numeric
def test_mean_ablation_writes_the_reference_mean(copy_model64):
    model = copy_model64  # float64: the means of a padded batch and of one text at a time differ by rounding only
    reference = ["the head", "he the he the"]
    means = ablation.head_means(model, reference)
    got = scratch.run_with_hooks(model, model.encode(reference[0]),
                                 keep=["blocks.0.attn.z"])["blocks.0.attn.z"][0]  # [H, L, d]
    got2 = scratch.run_with_hooks(model, model.encode(reference[1]), keep=["blocks.0.attn.z"])["blocks.0.attn.z"][0]
    z = torch.cat([got, got2], dim=1)
    by_hand = z.mean(1)
    assert means.dtype == torch.float64
    assert torch.allclose(means[0], by_hand, atol=F64 * float(z.abs().max()), rtol=0)
    hooks = ablation.ablation_hooks([[COPY_HEAD]], "mean", means=means)
    assert list(hooks) == ["blocks.0.attn.z"]  # a hook where a head is ablated, nowhere else
    z = torch.randn(1, 4, 5, 8, dtype=torch.float64)
    assert torch.equal(hooks["blocks.0.attn.z"](z.clone(), "blocks.0.attn.z")[0, 0], means[0, 0].expand(5, 8))


@pytest.mark.numeric
def test_batched_equals_one_pass_per_head(minilm64, monkeypatch):
    minilm = minilm64  # float64: batches of other sizes sum in another order, which only float64 rounding sees
    batched = ablation.ablate_each(minilm, SHE, position=8)
    naive = ablation.ablate_each(minilm, SHE, position=8, batched=False)
    passes: list[int] = []  # each pass's number of copies
    run_with_hooks = ablation.run_with_hooks

    def counted(model, copies, *a, **k):
        passes.append(copies.input_ids.shape[0])
        return run_with_hooks(model, copies, *a, **k)

    monkeypatch.setattr(ablation, "run_with_hooks", counted)
    small = ablation.ablate_each(minilm, SHE, position=8, batch=5)
    cols = ["hidden_change", "token_change", "embedding_change"]
    assert (batched[cols] - naive[cols]).abs().to_numpy().max() <= F64
    assert (small[cols] - naive[cols]).abs().to_numpy().max() <= F64
    assert batched[cols].to_numpy().max() > 0.01
    assert passes == [1] + [5, 5, 2] * 6  # the clean pass, then at most 5 copies a pass within a layer (12 heads)
    with pytest.raises(BadOption, match="batch must be at least 1 copy a pass, not 0"):
        ablation.ablate_each(minilm, SHE, batch=0)


@pytest.mark.numeric
def test_equals_ablating_inside_hugging_face(minilm64):
    """Zero the head's slice of the output projection's input in Hugging Face's BertModel: the same change (both
    in float64, so to float64 rounding)."""
    minilm = minilm64
    layer, head = 5, 5
    enc = minilm.encode(SHE)
    d = minilm.d_head
    dense = minilm.hf.encoder.layer[layer].attention.output.dense

    def zero_head(_module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0.0
        return (x,)

    with torch.inference_mode(), hf.KeepFloat64():
        clean = minilm.hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state[0]
        hook = dense.register_forward_pre_hook(zero_head)
        try:
            ablated = minilm.hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state[0]
        finally:
            hook.remove()
    expected = (1 - torch.nn.functional.cosine_similarity(ablated, clean, dim=-1)).mean()
    got = ablation.ablate(minilm, SHE, [(layer, head)])
    assert ablated.dtype == torch.float64
    assert got["hidden_change"] == pytest.approx(float(expected), abs=F64, rel=0)
    assert got["hidden_change"] > 0.05


# where each encoder's attention output projection sits in Hugging Face's module (its input: the heads' z, side by side)
OUTPUT_PROJECTION = {"roberta_mlm_dir": lambda hf, layer: hf.base_model.encoder.layer[layer].attention.output.dense,
                     "distilbert_mlm_dir": lambda hf, layer: hf.base_model.transformer.layer[layer].attention.out_lin,
                     "modernbert_mlm_dir": lambda hf, layer: hf.base_model.layers[layer].attn.Wo}


@pytest.mark.numeric
@pytest.mark.parametrize("fixture", list(OUTPUT_PROJECTION))
def test_equals_ablating_inside_hugging_face_in_roberta_and_distilbert(fixture, request):
    """As above, on a tiny RoBERTa (its positions from the padding index), DistilBERT (its own module names) and
    ModernBERT (pre-norm, rotary, a local layer), each with a masked-LM head: the same hidden change, to float64
    rounding."""
    model = probes.models.load(str(request.getfixturevalue(fixture))).cast(torch.float64)
    layer, head = 1, 2
    enc = model.encode(SHE)
    d = model.d_head

    def zero_head(_module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0.0
        return (x,)

    base = model.hf.base_model
    with torch.inference_mode(), hf.KeepFloat64():
        clean = base(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state[0]
        hook = OUTPUT_PROJECTION[fixture](model.hf, layer).register_forward_pre_hook(zero_head)
        try:
            ablated = base(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state[0]
        finally:
            hook.remove()
    expected = (1 - torch.nn.functional.cosine_similarity(ablated, clean, dim=-1)).mean()
    got = ablation.ablate(model, SHE, [(layer, head)])
    assert ablated.dtype == torch.float64 and "loss" not in got  # a masked-LM head predicts no next token
    assert got["hidden_change"] == pytest.approx(float(expected), abs=F64, rel=0)
    assert got["hidden_change"] > 0.01


@pytest.mark.numeric
def test_clean_edited_pass_equals_the_trace(gpt2_model):
    enc = gpt2_model.encode("Researchers probe every head")
    trace = runner.forward(gpt2_model, enc, "scratch")
    got = scratch.run_with_hooks(gpt2_model, enc, keep=["blocks.1.resid_pre"])
    assert trace.logits is not None and got.final is not None and got.logits is not None  # whole passes, with logits
    assert torch.equal(got.final, trace.hidden_states[-1]) and torch.equal(got.logits, trace.logits)
    resumed = scratch.run_with_hooks(gpt2_model, enc, resume=(1, got["blocks.1.resid_pre"]))
    assert resumed.logits is not None
    assert torch.equal(resumed.logits, trace.logits)  # starting at layer 1 from its input: the same numbers


@pytest.mark.numeric
def test_an_edited_trace_shows_the_edit_downstream(gpt2_model):
    enc = gpt2_model.encode("Researchers probe every head")
    clean = runner.forward(gpt2_model, enc, "scratch")
    edited = scratch.forward(gpt2_model, enc, hooks=ablation.ablation_hooks([[(0, 1)]]))
    assert torch.equal(edited.attention(0), clean.attention(0))  # layer 0's attention is before the edit
    assert (edited.attention(1) - clean.attention(1)).abs().max() > 0.1  # layer 1 reads the edited stream


def test_bad_input_is_refused_with_advice(minilm, copy_model):
    with pytest.raises(BadOption, match="same length in tokens"):
        ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "patch", other="the head")
    with pytest.raises(BadOption, match="reference set"):
        ablation.ablate(copy_model, ALTERNATING, [COPY_HEAD], "mean")
    with pytest.raises(BadOption, match="outside the text's"):
        ablation.ablate(minilm, SHE, [(1, 2)], position=99)
    with pytest.raises(BadOption, match="unknown ablation"):
        ablation.ablation_hooks([[(0, 0)]], "half")


@pytest.mark.numeric
def test_grouped_query_ablation_equals_hugging_face(llama_dir):
    """Llama with 6 query heads over 2 key/value heads: zeroing head 4's slice of o_proj's input in Hugging Face's
    module changes the next-token loss exactly as the from-scratch ablation says (both in float64)."""
    import probes
    from probes.effects.measures import token_losses

    model = probes.models.load(str(llama_dir)).cast(torch.float64)
    text, (layer, head) = "Researchers probe every layer and every head", (1, 4)
    enc = model.encode(text)
    d = model.d_head
    o_proj = model.hf.model.layers[layer].self_attn.o_proj

    def zero_head(_module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0.0
        return (x,)

    with torch.inference_mode(), hf.KeepFloat64():
        clean = model.hf(input_ids=enc.input_ids).logits
        hook = o_proj.register_forward_pre_hook(zero_head)
        try:
            ablated = model.hf(input_ids=enc.input_ids).logits
        finally:
            hook.remove()
    n = enc.input_ids.shape[1]
    expected = float((token_losses(ablated, enc.input_ids[0], n) - token_losses(clean, enc.input_ids[0], n)).mean())
    got = ablation.ablate(model, text, [(layer, head)])
    assert ablated.dtype == torch.float64
    assert got["loss"] == pytest.approx(expected, abs=F64, rel=0) and abs(expected) > 1e-3


@pytest.mark.numeric
def test_one_measure_alone_equals_its_column_of_every_measure(gpt2_model64, minilm64):
    """Asked for one measure, ablate_each computes only that column (no logits for a hidden-state measure; on a
    causal model, token_change and logit_diff stop at their position): the numbers of the full table, to float64
    rounding (another batch composition and length sum in another order)."""
    targets = (5, 9)
    for model, position, names in ((gpt2_model64, 6, ("loss", "top_changed", "logit_diff", "hidden_change",
                                                        "token_change", "embedding_change")),
                                   (minilm64, 8, ("hidden_change", "token_change", "embedding_change"))):
        full = ablation.ablate_each(model, SHE, position=position, targets=targets)
        assert set(names) <= set(full.columns)
        for name in names:
            one = ablation.ablate_each(model, SHE, position=position, targets=targets, measures=[name])
            assert list(one.columns) == ["layer", "head", name]
            assert (one[["layer", "head"]] == full[["layer", "head"]]).all().all()
            assert (one[name] - full[name]).abs().max() <= F64, (model.name, name)
            assert full[name].abs().max() > 1e3 * F64, (model.name, name)  # a column that is not all zeros


def test_progress_is_reported_after_each_head(gpt2_model, minilm):
    for model, measures in ((gpt2_model, ["token_change"]), (minilm, None)):
        calls: list[tuple[int, int]] = []
        ablation.ablate_each(model, SHE, position=3, measures=measures,
                             progress=lambda *a, calls=calls: calls.append(a))
        total = model.n_layers * model.n_heads
        assert calls == [(done, total) for done in range(1, total + 1)]


def test_measures_that_do_not_apply_are_refused_with_advice(minilm, gpt2_model):
    with pytest.raises(BadOption, match="unknown measure 'lose': choose one of hidden_change"):
        ablation.ablate_each(minilm, SHE, measures=["lose"])
    with pytest.raises(BadOption, match="loss needs a language-model head"):
        ablation.ablate_each(minilm, SHE, measures=["loss"])
    with pytest.raises(BadOption, match="logit_diff needs two target tokens"):
        ablation.ablate_each(gpt2_model, SHE, measures=["logit_diff"])
    with pytest.raises(BadOption, match="no measure asked for"):
        ablation.ablate_each(gpt2_model, SHE, measures=[])


@pytest.mark.numeric
def test_equals_ablating_inside_hugging_faces_gemma3(tmp_path):
    """Gemma 3 (QK-norm, each layer type its own rotary table, the post-attention norm after the heads' sum): zero
    head 1.2's slice of o_proj's input in Hugging Face's own module (its RMSNorm made to compute in float64): the same
    hidden change and next-token loss change, to float64 rounding. The from-scratch ablation reruns the layer, the
    post-norm included, so nothing is frozen."""
    from checkpoints import gemma_norm_in_input_dtype, make_gemma

    model = probes.models.load(str(make_gemma(tmp_path / "g3", family="gemma3"))).cast(torch.float64)
    layer, head, d = 1, 2, model.d_head
    ids = model.encode(SHE).input_ids

    def zero_head(_module, args):
        x = args[0].clone()
        x[..., head * d:(head + 1) * d] = 0.0
        return (x,)

    def run_hf():
        out = model.hf(input_ids=ids, labels=ids, output_hidden_states=True)
        return out.hidden_states[-1][0], float(out.loss)

    with torch.inference_mode(), hf.KeepFloat64(), gemma_norm_in_input_dtype():
        clean, clean_loss = run_hf()
        hook = model.hf.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero_head)
        try:
            ablated, loss = run_hf()
        finally:
            hook.remove()
    expected = (1 - torch.nn.functional.cosine_similarity(ablated, clean, dim=-1)).mean()
    got = ablation.ablate(model, SHE, [(layer, head)])
    assert ablated.dtype == torch.float64
    assert got["hidden_change"] == pytest.approx(float(expected), abs=F64, rel=0) and got["hidden_change"] > 1e-3
    assert got["loss"] == pytest.approx(loss - clean_loss, abs=F64, rel=0) and abs(got["loss"]) > 1e-4


@pytest.mark.numeric
def test_every_measure_at_every_position_from_the_kept_copies(gpt2_model64, minilm64):
    """ablate_each_kept runs every head's copy once; each measure at each position read from the kept copies is
    ablate_each's own column, to float64 rounding (zero and mean ablation), and a text past the budget is refused
    with advice."""
    reference = ["The dog ran to the park.", "A bird sang in the old tree by the river."]
    for model, names in ((gpt2_model64, ("loss", "top_changed", "hidden_change", "token_change",
                                         "embedding_change")),
                         (minilm64, ("hidden_change", "token_change", "embedding_change"))):
        for how in ("zero", "mean"):
            calls: list[tuple[int, int]] = []
            kept = ablation.ablate_each_kept(model, SHE, how, reference=reference,
                                             progress=lambda *a, calls=calls: calls.append(a))
            assert calls[-1] == (model.n_layers * model.n_heads,) * 2
            for position in (2, 6):
                full = ablation.ablate_each(model, SHE, how, reference=reference, position=position)
                got = kept.frame(list(names), position)
                assert (got[["layer", "head"]] == full[["layer", "head"]]).all().all()
                for name in names:
                    assert (got[name] - full[name]).abs().max() <= F64, (model.name, how, name, position)
                    assert full[name].abs().max() > 1e3 * F64, (model.name, name)
    with pytest.raises(BadOption, match="choose zero or mean"):
        ablation.ablate_each_kept(gpt2_model64, SHE, "patch")


def test_keeping_the_copies_past_the_budget_is_refused_with_advice(gpt2_model, monkeypatch):
    n = gpt2_model.encode(SHE).input_ids.shape[1]
    monkeypatch.setattr(ablation, "KEEP_BUDGET", ablation.kept_bytes(gpt2_model, n) - 1)
    with pytest.raises(BadOption, match="ask ablate_each for the measure wanted"):
        ablation.ablate_each_kept(gpt2_model, SHE)
