"""Named hook points of the from-scratch pass (``probes.scratch.hooks``): reading every point changes nothing, bit
for bit; an edit of z is ablation's edit; a pass stops after a point; an unknown point is refused by name; a new kind
of edit (the MLP's output, the scores, each head's write) works on every family without a line of family code."""

import pytest
import torch
from numeric import F64

import probes
from probes import scratch
from probes.effects import ablation
from probes.errors import BadOption
from probes.scratch import LAYER_POINTS, POINTS, point

TEXT = "Researchers probe every layer and every head."
EVERY = ("embed", *LAYER_POINTS, "final", "logits")  # every point (a layer's: of every layer)


def reader(seen: dict):
    """A read hook: keeps each point's tensor in ``seen`` and hands back None (the pass goes on with it)."""
    def read(x, name):
        seen[name] = x

    return read


def equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """``torch.equal`` of two tensors a pass must have made (its logits, its final state): neither may be None."""
    assert a is not None and b is not None
    return torch.equal(a, b)


CHECKPOINTS = {"gpt2": "gpt2_dir", "bert": "bert_mlm_dir", "roberta": "roberta_mlm_dir",
               "distilbert": "distilbert_mlm_dir", "modernbert": "modernbert_mlm_dir",
               "llama": "llama_dir"}  # a family: its tiny checkpoint's fixture


@pytest.fixture(scope="module", params=list(CHECKPOINTS))
def model(request):
    return probes.load(str(request.getfixturevalue(CHECKPOINTS[request.param])))


def test_a_read_hook_at_every_point_changes_nothing_bit_for_bit(model):
    enc = model.encode(TEXT)
    plain = scratch.run_with_hooks(model, enc, keep=["resid_pre"])
    seen: dict = {}
    read = reader(seen)
    hooked = scratch.run_with_hooks(model, enc, {name: read for name in EVERY}, keep=["resid_pre"])
    assert equal(plain.logits, hooked.logits) and equal(plain.final, hooked.final)
    assert all(torch.equal(a, b) for a, b in zip(plain.each("resid_pre"), hooked.each("resid_pre"), strict=True))
    n = model.n_layers
    assert set(seen) == {"embed", "final", "logits"} | {point(i, name) for i in range(n) for name in LAYER_POINTS}
    # what the points held is what the Trace of a pass without hooks shows
    trace = scratch.forward(model, enc)
    assert trace.attn is not None  # eager keeps the weights
    assert torch.equal(seen["embed"], trace.hidden_states[0]) and torch.equal(seen["final"], trace.hidden_states[-1])
    assert equal(seen["logits"], trace.logits)
    for i in range(n):
        assert torch.equal(seen[point(i, "resid_pre")], trace.hidden_states[i])
        assert torch.equal(seen[point(i, "attn.pattern")], trace.attn[i])
        assert seen[point(i, "attn.result")].shape == (*enc.input_ids.shape, model.n_heads, model.config.hidden_size)
    for i in range(n - 1):
        assert torch.equal(seen[point(i, "resid_post")], trace.hidden_states[i + 1])
    # and forward with the same hooks gives the same Trace
    again = scratch.forward(model, enc, hooks={name: read for name in EVERY})
    assert again.attn is not None
    assert all(torch.equal(a, b) for a, b in zip(again.attn, trace.attn, strict=True))
    assert equal(again.logits, trace.logits)


def test_zeroing_a_heads_z_is_zero_ablation(gpt2_model):
    enc = gpt2_model.encode(TEXT)

    def zero(z, name):
        z = z.clone()
        z[:, 2] = 0.0
        return z

    by_hook = scratch.run_with_hooks(gpt2_model, enc, {point(1, "attn.z"): zero}, keep=["attn.z"])
    by_ablation = scratch.run_with_hooks(gpt2_model, enc, ablation.ablation_hooks([[(1, 2)]], "zero"))
    assert equal(by_hook.logits, by_ablation.logits) and equal(by_hook.final, by_ablation.final)
    assert not by_hook["blocks.1.attn.z"][:, 2].any()  # keep sees what the pass went on with: after the edit
    clean = scratch.run_with_hooks(gpt2_model, enc)
    assert not equal(by_hook.logits, clean.logits)


def test_stop_after_returns_what_came_before_and_no_logits(model):
    enc = model.encode(TEXT)
    whole = scratch.run_with_hooks(model, enc, keep=["resid_pre", "attn.z"])
    cut = scratch.run_with_hooks(model, enc, keep=["resid_pre", "attn.z"], stop_after="blocks.1.attn.z")
    assert cut.logits is None and cut.final is None and cut.stopped == "blocks.1.attn.z"
    assert len(cut.each("resid_pre")) == 2 and len(cut.each("attn.z")) == 2
    # the cut pass's layers: the whole's first two
    assert all(torch.equal(a, b) for a, b in zip(cut.each("attn.z"), whole.each("attn.z"), strict=False))
    assert torch.equal(cut["blocks.1.resid_pre"], whole["blocks.1.resid_pre"])
    for name in ("embed", "blocks.0.attn.scores", "blocks.0.attn.result", "blocks.1.mlp_out", "final"):  # any point
        stopped = scratch.run_with_hooks(model, enc, keep=["resid_pre"], stop_after=name)
        assert stopped.stopped == name and stopped.logits is None
        ran = {"embed": 0, "blocks.0": 1, "blocks.1": 2}.get(name[:8].rstrip("."), model.n_layers)  # final: every layer
        assert len(stopped.each("resid_pre")) == ran


def test_an_unknown_point_is_refused_naming_the_valid_ones(gpt2_model):
    enc = gpt2_model.encode(TEXT)
    for bad in ("blocks.0.attn.zz", "resid", "blocks.9.attn.z", "blocks.x.mlp_out"):
        with pytest.raises(BadOption, match="blocks.L.attn.pattern") as caught:
            scratch.run_with_hooks(gpt2_model, enc, {bad: lambda x, name: None})
        assert all(name in str(caught.value) for name in POINTS)
        with pytest.raises(BadOption, match="unknown hook point"):
            scratch.run_with_hooks(gpt2_model, enc, keep=[bad])
        with pytest.raises(BadOption, match="unknown hook point"):
            scratch.run_with_hooks(gpt2_model, enc, stop_after=bad)
    with pytest.raises(BadOption, match="layers 0–1"):
        scratch.run_with_hooks(gpt2_model, enc, {"blocks.2.attn.z": lambda x, name: None})
    with pytest.raises(BadOption, match="unknown point 'z' of a layer"):
        point(0, "z")


def test_an_edit_of_the_mlps_output_needs_no_family_code(model):
    # a kind of edit no caller made before: each family reaches mlp_out, and goes on with what the hook hands back
    enc = model.encode(TEXT)
    clean = scratch.run_with_hooks(model, enc, keep=["attn_out", "resid_pre", "resid_post"])
    same = scratch.run_with_hooks(model, enc, {point(0, "mlp_out"): lambda x, name: x.clone()})
    assert equal(same.final, clean.final)  # the tensor handed back is the one the pass goes on with
    zeroed = scratch.run_with_hooks(model, enc, {point(0, "mlp_out"): lambda x, name: torch.zeros_like(x)},
                                    keep=["attn_out", "resid_pre", "resid_post"])
    assert torch.equal(zeroed["blocks.0.attn_out"], clean["blocks.0.attn_out"])  # before the edit: untouched
    assert not torch.equal(zeroed["blocks.0.resid_post"], clean["blocks.0.resid_post"])  # after it: changed
    assert not equal(zeroed.final, clean.final)
    if isinstance(scratch.build(model), scratch.DecoderNetwork):  # pre-norm: the layer's output is x + attention + MLP,
        # and the MLP wrote nothing (a post-norm encoder, BERT's kind, normalises that sum)
        assert torch.equal(zeroed["blocks.0.resid_post"], zeroed["blocks.0.resid_pre"] + zeroed["blocks.0.attn_out"])


def test_an_edit_of_the_scores_moves_the_pattern(model):
    enc = model.encode(TEXT)

    def hide_key_1(s, name):  # no query may look at token 1 (scores [B, H, L, L]); token 0 stays for every row
        s = s.clone()
        s[..., 1] = float("-inf")
        return s

    seen: dict = {}
    scratch.run_with_hooks(model, enc, {"blocks.0.attn.scores": hide_key_1,
                                        "blocks.0.attn.pattern": reader(seen)})
    assert not seen["blocks.0.attn.pattern"][..., 1].any()
    trace = scratch.forward(model, enc, hooks={"blocks.0.attn.scores": hide_key_1})  # the Trace shows the edit
    assert trace.attn is not None  # eager keeps the weights
    assert not trace.attn[0][..., 1].any() and torch.equal(trace.attn[0], seen["blocks.0.attn.pattern"])
    with pytest.raises(BadOption, match="lazy"):  # sdpa keeps no scores: an edit there could not be shown
        scratch.forward(model, enc, backend="sdpa", hooks={"blocks.0.attn.scores": hide_key_1})


@pytest.mark.numeric
def test_each_heads_write_sums_to_the_attention_output_and_can_be_edited(gpt2_model):
    # float64: Σ_h z_h·W_O[h] + b_O against the pass's own output projection differs by rounding only
    model = gpt2_model.cast(torch.float64)
    enc = model.encode(TEXT)
    seen: dict = {}
    got = scratch.run_with_hooks(model, enc, {"blocks.1.attn.result": reader(seen)},
                                 keep=["blocks.1.attn_out"])
    bias = scratch.build(model).head_out(1)[1]
    out = got["blocks.1.attn_out"]
    assert (seen["blocks.1.attn.result"].sum(2) + bias - out).abs().max() <= F64 * float(out.abs().max())

    def drop_head_2(r, name):  # [B, L, H, D]: head 2 writes nothing
        r = r.clone()
        r[:, :, 2] = 0.0
        return r

    by_result = scratch.run_with_hooks(model, enc, {"blocks.1.attn.result": drop_head_2})
    by_z = scratch.run_with_hooks(model, enc, ablation.ablation_hooks([[(1, 2)]], "zero"))
    assert by_result.logits is not None and by_z.logits is not None  # both ran to their end
    assert (by_result.logits - by_z.logits).abs().max() <= F64 * float(by_z.logits.abs().max())


def test_a_hook_on_every_layer_is_told_which_point_it_is(gpt2_model):
    enc = gpt2_model.encode(TEXT)
    names = []
    scratch.run_with_hooks(gpt2_model, enc,
                           {"attn.z": [lambda z, name: names.append(name), lambda z, name: names.append("then")]})
    assert names == ["blocks.0.attn.z", "then", "blocks.1.attn.z", "then"]  # several hooks: in order, at each point
    assert [scratch.layer_of(name) for name in names[::2]] == [0, 1]


def test_generation_runs_every_step_through_the_hooks(gpt2_model):
    from probes import generation

    plain = generation.generate(gpt2_model, "Researchers probe", 4)
    names = []
    read = generation.generate(gpt2_model, "Researchers probe", 4, hooks={"attn.z": lambda z, name: names.append(name)})
    assert torch.equal(read.logits, plain.logits)
    assert all(torch.equal(a, b) for a, b in zip(read.rows, plain.rows, strict=True))
    assert names == ["blocks.0.attn.z", "blocks.1.attn.z"] * plain.n_steps  # the prefill, then one token a step

    def zero_heads(z, name):
        return torch.zeros_like(z)

    edited = generation.generate(gpt2_model, "Researchers probe", 4, hooks={"blocks.1.attn.z": zero_heads})
    assert not torch.equal(edited.logits[0], plain.logits[0])
