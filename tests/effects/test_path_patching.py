"""Path patching: the same patch done by hand with hooks on Hugging Face's GPT-2 gives the same receiver pattern and
loss (float64); batches equal one sender at a time; a planted induction head loses its pattern when the
previous-token head is patched into its key, not into its query; grouped-query heads that share the patched key/value
head stay clean; bad input is refused in words."""

import json

import pytest
import torch
from checkpoints import gemma_norm_in_input_dtype, make_gemma, make_gpt2, make_induction, make_llama, make_neox
from numeric import F64

import probes
from probes.attention_math import repeat_kv
from probes.effects.measures import compare, lm_stats
from probes.effects.path_patching import path_patch
from probes.errors import BadOption
from probes.hf import KeepFloat64
from probes.models import load
from probes.scratch import build, point, run_with_hooks

CLEAN = "The cat sat on the mat, and the dog watched it."
CORRUPT = "The dog sat on the mat, and the cat watched it."


@pytest.fixture(scope="module")
def gpt2_3(tmp_path_factory):
    """A tiny three-layer GPT-2 in float64: a receiver in layer 2 has senders in two layers."""
    return load(str(make_gpt2(tmp_path_factory.mktemp("paths") / "gpt2", n_layer=3))).cast(torch.float64)


def hf_path_patch(model, clean: str, corrupt: str, sender, receiver, into: str):
    """The same patch by hand, with forward hooks on Hugging Face's modules: the sender's output (the input of its
    layer's ``c_proj``, its slice through its rows of c_proj) on both texts, then on the clean text the receiver
    layer's ``c_attn`` output gets the receiver's q, k or v slice recomputed from ln_1(x + Δ). Returns the
    receiver's attention [L, L] and the mean next-token loss, patched and clean."""
    hf = model.hf
    blocks = hf.transformer.h
    width, n_heads = model.config.n_embd, model.config.n_head
    d = width // n_heads
    (s_layer, s_head), (r_layer, r_head) = sender, receiver
    ids, ids_c = model.encode(clean).input_ids, model.encode(corrupt).input_ids

    def sender_out(input_ids):
        got: dict[str, torch.Tensor] = {}
        hook = blocks[s_layer].attn.c_proj.register_forward_pre_hook(lambda m, args: got.setdefault("z", args[0]))
        hf(input_ids=input_ids)
        hook.remove()
        rows = slice(s_head * d, (s_head + 1) * d)
        return got["z"][0, :, rows] @ blocks[s_layer].attn.c_proj.weight[rows]  # [L, D]: z_s · W_O[s]

    with torch.inference_mode(), KeepFloat64():
        delta = sender_out(ids_c) - sender_out(ids)
        clean_out = hf(input_ids=ids, labels=ids, output_attentions=True)
        block = blocks[r_layer]
        seen = {}

        def keep_input(module, args, kwargs):
            seen["x"] = args[0] if args else kwargs["hidden_states"]

        def patch(module, args, out):
            weight, bias = block.attn.c_attn.weight, block.attn.c_attn.bias
            new = block.ln_1(seen["x"] + delta) @ weight + bias  # ln_1 is not hooked: no recursion
            cols = slice({"q": 0, "k": 1, "v": 2}[into] * width + r_head * d,
                         {"q": 0, "k": 1, "v": 2}[into] * width + (r_head + 1) * d)
            out = out.clone()
            out[..., cols] = new[..., cols]
            return out

        hooks = [block.register_forward_pre_hook(keep_input, with_kwargs=True),
                 block.attn.c_attn.register_forward_hook(patch)]
        try:
            out = hf(input_ids=ids, labels=ids, output_attentions=True)
        finally:
            for h in hooks:
                h.remove()
    return out.attentions[r_layer][0, r_head], float(out.loss), clean_out.attentions[r_layer][0, r_head], \
        float(clean_out.loss)


@pytest.mark.numeric
@pytest.mark.parametrize("into", ["q", "k", "v"])
def test_equals_the_same_patch_by_hand_in_hugging_face(gpt2_3, into):
    # float64 on both sides: the same function, so rounding only (F64); the texts are one length on this tokenizer
    assert gpt2_3.encode(CLEAN).input_ids.shape == gpt2_3.encode(CORRUPT).input_ids.shape
    senders = [(0, 1), (1, 2), (1, 0)]
    got = path_patch(gpt2_3, CLEAN, CORRUPT, (2, 3), into, senders=senders, keep_patterns=True)
    assert got.patterns is not None  # kept
    for i, sender in enumerate(senders):
        pattern, loss, clean_pattern, clean_loss = hf_path_patch(gpt2_3, CLEAN, CORRUPT, sender, (2, 3), into)
        assert (got.patterns[i] - pattern).abs().max() <= F64
        assert (got.clean_pattern - clean_pattern).abs().max() <= F64
        assert got.frame.loss[i] == pytest.approx(loss - clean_loss, abs=F64, rel=0)
        moved = float((pattern - clean_pattern).abs().max())
        assert got.frame.pattern_change[i] == pytest.approx(moved, abs=F64, rel=0)
    assert got.frame.loss.abs().max() > 1e-4  # the patches did something…
    if into == "v":  # …and a value moves no weight: the pattern is the clean one
        assert got.frame.pattern_change.max() <= F64
    else:
        assert got.frame.pattern_change.max() > 0.01


@pytest.mark.numeric
def test_batched_equals_one_sender_at_a_time_and_no_change_changes_nothing(gpt2_3):
    many = path_patch(gpt2_3, CLEAN, CORRUPT, (2, 1), "k")
    one = path_patch(gpt2_3, CLEAN, CORRUPT, (2, 1), "k", batch=1)
    cols = [c for c in many.frame.columns if c not in ("layer", "head")]
    assert len(many.frame) == 8 and (many.frame[cols] - one.frame[cols]).abs().to_numpy().max() <= F64
    same = path_patch(gpt2_3, CLEAN, CLEAN, (2, 1), "q")  # Δ = 0 for every sender: the clean pass again
    assert same.frame[cols].abs().to_numpy().max() <= F64


@pytest.mark.numeric
@pytest.mark.parametrize("family", ["llama", "qwen3", "phi3"])
def test_grouped_heads_sharing_the_patched_key_stay_clean(tmp_path, family):
    # 6 query heads read 2 key/value heads: patching receiver 2.0's key changes only head 2.0's pattern, although
    # heads 2.1 and 2.2 read the same key/value head; by hand: head 2.0 with k recomputed from x + Δ (Qwen3: through
    # QK-norm; Phi-3: through the fused projection)
    model = load(str(make_llama(tmp_path / family, family=family, num_hidden_layers=3))).cast(torch.float64)
    net = build(model)
    enc, enc_c = model.encode(CLEAN), model.encode(CORRUPT)
    assert enc.input_ids.shape == enc_c.input_ids.shape
    got = path_patch(model, CLEAN, CORRUPT, (2, 0), "k", senders=[(1, 4)], keep_patterns=True)
    base = run_with_hooks(model, enc, keep=["resid_pre", "attn.z"])
    inputs, base_z = base.each("resid_pre"), base.each("attn.z")
    z_c = run_with_hooks(model, enc_c, keep=["attn.z"], logits=False).each("attn.z")
    w_o = net.head_out(1)[0]
    x = inputs[2] + (z_c[1][0, 4] - base_z[1][0, 4]) @ w_o[4]
    q, _, _ = net.qkv(2, inputs[2])
    _, k, _ = net.qkv(2, x)
    n = q.shape[2]
    assert model.family is not None  # the scratch network's family
    scale = model.family.scale(model.config, 2)
    scores = (q[0, 0] @ k[0, 0].T) * scale + torch.triu(torch.full((n, n), float("-inf"), dtype=q.dtype), 1)
    assert got.patterns is not None  # kept
    assert (got.patterns[0] - scores.softmax(-1)).abs().max() <= F64
    assert got.frame.pattern_change[0] > 0.01
    # the pass by hand, only head 2.0's key replaced (k and v one per query head): heads 2.1 and 2.2, which read the
    # same key/value head, keep their clean output, and the loss change is path_patch's
    def by_hand_k(k, name):
        k = repeat_kv(k, 3).clone()
        k[:, 0] = net.qkv(2, x)[1][:, 0]
        return k

    hand = run_with_hooks(model, enc,
                          {"blocks.2.attn.k": by_hand_k, "blocks.2.attn.v": lambda v, name: repeat_kv(v, 3)},
                          keep=["blocks.2.attn.z"], resume=(2, inputs[2]))
    seen = hand["blocks.2.attn.z"]
    assert (seen[0, 1:] - base_z[2][0, 1:]).abs().max() <= F64
    assert (seen[0, 0] - base_z[2][0, 0]).abs().max() > 1e-3
    ids = enc.input_ids[0]
    assert base.final is not None and hand.final is not None  # both passes ran to their end
    measured = compare(base.final[0], hand.final, n, lm_stats(ids, n, logits=base.logits),
                       lm_stats(ids, n, logits=hand.logits))
    assert got.frame.loss[0] == pytest.approx(float(measured["loss"][0]), abs=F64, rel=0)


def test_a_planted_induction_head_reads_the_previous_token_head_through_its_key(tmp_path):
    # make_induction: head 0.0 copies the previous token into residual dims 48–63; head 1.0's key reads those dims,
    # its query only the current token (dims 0–15). The corrupted text rotates the first six tokens by one, so the
    # previous token written at positions 1–6 changes (the second half, and so what a repeated token's query reads,
    # is unchanged). Into the KEY, Δ moves every induction target's previous-token slot to another token: the
    # pattern breaks. Into the QUERY, Δ lands in dims 48–63, which the query's projection does not read, and a
    # rotation swaps one one-hot for another there, so ln_1's mean and σ (the only way Δ could reach the query) stay
    # as they were: the pattern holds. (Tokens outside the six have no embedding in this model: replacing them would
    # drop a one-hot and change ln_1's σ, a small effect on the query we avoid.)
    path, text = make_induction(tmp_path / "induction")
    model = probes.load(str(path))
    ids = model.encode(text).input_ids[0].tolist()
    first = ids[:6]
    corrupt = model.tokenizer.decode(first[1:] + first[:1] + ids[6:])
    assert model.encode(corrupt).input_ids[0].tolist() == first[1:] + first[:1] + ids[6:]
    cells = [(6 + i, i + 1) for i in range(6)]  # the second token i attends to the token after its first occurrence
    key = path_patch(model, text, corrupt, (1, 0), "k", cells=cells)
    query = path_patch(model, text, corrupt, (1, 0), "q", cells=cells)
    assert key.clean_cells is not None and key.clean_cells > 0.9
    prev = key.frame.set_index(["layer", "head"]).loc[(0, 0)]
    assert prev.cells < 0.5 and prev.pattern_shift > 0.5
    assert query.frame.set_index(["layer", "head"]).loc[(0, 0)].cells > 0.8
    assert key.ranked("pattern_shift").iloc[0][["layer", "head"]].tolist() == [0, 0]


def test_an_encoder_has_pattern_changes_but_no_loss(minilm):
    got = path_patch(minilm, "the cat sat on the mat", "the dog sat on the rug", (3, 1), "q", senders=[(0, 0), (2, 5)])
    assert "loss" not in got.frame and got.frame.pattern_shift.max() > 0


@pytest.mark.parametrize("fixture", ["roberta_mlm_dir", "distilbert_mlm_dir", "modernbert_mlm_dir"])
def test_a_masked_lm_encoder_has_pattern_changes_but_no_loss(fixture, request):
    """RoBERTa and DistilBERT (post-norm encoders with a masked-LM head, not next-token predictors) and ModernBERT
    (a pre-norm one, rotary, its receiver layer 1 local): the receiver's pattern moves, and no next-token measure is
    offered."""
    model = probes.load(str(request.getfixturevalue(fixture)))
    got = path_patch(model, CLEAN, CORRUPT, (1, 1), "k", senders=[(0, 0), (0, 3)])
    assert not model.predicts_tokens and "loss" not in got.frame and got.frame.pattern_shift.max() > 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(corrupted="The cat sat."), "same length in tokens"),
    (dict(receiver=(0, 1)), "layer 0"),
    (dict(receiver=(2, 9)), "outside"),
    (dict(into="x"), "q, k, v"),
    (dict(senders=[(2, 0)]), r"sender 2\.0 is outside the layers before receiver 2\.1: layers 0–1"),
    (dict(cells=[(3, 99)]), "key token 99 is outside the text's"),
])
def test_bad_input_is_refused_in_words(gpt2_3, kwargs, message):
    args = dict(clean=CLEAN, corrupted=CORRUPT, receiver=(2, 1), into="k") | kwargs
    with pytest.raises(BadOption, match=message):
        path_patch(gpt2_3, **args)


@pytest.fixture(scope="module")
def gpt2_3_dir(tmp_path_factory):
    return make_gpt2(tmp_path_factory.mktemp("paths-cli") / "gpt2", n_layer=3)


@pytest.mark.numeric
def test_cli_ranks_the_library_numbers(gpt2_3_dir, capsys):
    from probes.cli import main

    args = ["patch", "--model", str(gpt2_3_dir), "--text", CLEAN, "--corrupt", CORRUPT, "--receiver", "2.3", "--into",
            "k"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = path_patch(probes.load(str(gpt2_3_dir)), CLEAN, CORRUPT, (2, 3), "k").ranked()
    # the same computation on the same weights: the same floats, and JSON writes a float back exactly
    assert data["ranked_by"] == "loss" and len(data["senders"]) == 8
    assert [(s["layer"], s["head"], s["loss"]) for s in data["senders"]] == list(
        zip(expected["layer"], expected["head"], expected["loss"], strict=True))
    assert main([*args, "--senders", "0.1,1.2", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "receiver 2.3's k" in out and "pattern_shift" in out and len(
        [line for line in out.splitlines() if line.startswith("    ")]) == 1


def test_cli_on_an_encoder_ranks_by_the_pattern(capsys):
    from probes.cli import main

    assert main(["patch", "--text", "the cat sat on the mat", "--corrupt", "the dog sat on the mat", "--receiver",
                 "2.1", "--into", "q", "--senders", "0.0,1.3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranked_by"] == "pattern_shift" and "loss" not in data["senders"][0]


@pytest.mark.parametrize("args, message", [
    (["--corrupt", "The cat."], "same length in tokens"),
    (["--receiver", "0.1"], "layer 0"),
    (["--receiver", "2-1"], "LAYER.HEAD"),
    (["--receiver", "7.1"], "outside"),
    (["--senders", "2.0"], "sender 2.0 is outside the layers before receiver 2.1: layers 0–1"),
    (["--target", " the"], "--versus"),
])
def test_cli_bad_input_is_one_line_and_exit_2(gpt2_3_dir, args, message, capsys):
    from probes.cli import main

    base = {"--text": CLEAN, "--corrupt": CORRUPT, "--receiver": "2.1"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    assert main(["patch", "--model", str(gpt2_3_dir), *(x for kv in base.items() for x in kv)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("error: ")


def test_cli_an_encoder_has_no_logits_for_a_target(capsys):
    from probes.cli import main

    assert main(["patch", "--text", "the cat sat", "--corrupt", "the dog sat", "--receiver", "1.0", "--target",
                 "cat", "--versus", "dog"]) == 2
    assert "pattern change is still measured" in capsys.readouterr().err


def test_identity_qkv_hooks_leave_the_pass_bit_for_bit(gpt2_3):
    # the q, k, v hook points: reached once per layer, in order, q then k then v; handing them back unchanged gives the
    # same pass, bit for bit
    enc = gpt2_3.encode(CLEAN)
    calls: list[str] = []

    def same(x, name):
        calls.append(name)
        return x

    plain = run_with_hooks(gpt2_3, enc)
    hooked = run_with_hooks(gpt2_3, enc, {"attn.q": same, "attn.k": same, "attn.v": same})
    assert calls == [point(layer, f"attn.{x}") for layer in range(3) for x in "qkv"]
    assert plain.logits is not None and hooked.logits is not None  # both passes ran to their end
    assert plain.final is not None and hooked.final is not None
    assert torch.equal(plain.logits, hooked.logits) and torch.equal(plain.final, hooked.final)


@pytest.mark.numeric
def test_the_batch_follows_the_budget_and_the_numbers_do_not(gpt2_3):
    from probes.effects.ablation import copy_bytes
    from probes.effects.path_patching import fixed_bytes

    length = gpt2_3.encode(CLEAN).input_ids.shape[-1]
    one, fixed = copy_bytes(gpt2_3, length), fixed_bytes(gpt2_3, length, True)
    passes = []
    three = path_patch(gpt2_3, CLEAN, CORRUPT, (2, 1), "k", budget=fixed + 3 * one + one // 2,
                       progress=lambda done, total: passes.append(done))
    assert passes == [3, 6, 8]  # 8 senders, three a pass within the budget
    passes.clear()
    whole = path_patch(gpt2_3, CLEAN, CORRUPT, (2, 1), "k", budget=fixed + 8 * one,
                       progress=lambda done, total: passes.append(done))
    assert passes == [8]
    single = path_patch(gpt2_3, CLEAN, CORRUPT, (2, 1), "k", batch=1)
    cols = [c for c in single.frame.columns if c not in ("layer", "head")]
    for got in (three, whole):
        assert (got.frame[cols] - single.frame[cols]).abs().to_numpy().max() <= F64


def test_a_budget_too_small_for_one_sender_is_refused_before_any_pass(gpt2_3):
    from probes.effects.ablation import copy_bytes
    from probes.effects.path_patching import fixed_bytes

    length = gpt2_3.encode(CLEAN).input_ids.shape[-1]
    need = copy_bytes(gpt2_3, length) + fixed_bytes(gpt2_3, length, True)
    passes = []
    with pytest.raises(BadOption, match=rf"a text of {length} tokens .* for one sender at a time, more than the .* "
                                        "shorten the text"):
        path_patch(gpt2_3, CLEAN, CORRUPT, (2, 1), "k", budget=need - 1, progress=lambda *a: passes.append(a))
    assert passes == []


@pytest.mark.numeric
def test_gemma_senders_write_through_the_post_norm_frozen_at_the_clean_pass(tmp_path):
    # Gemma 2: a sender's write reaches the residual through its layer's post-attention norm, which path patching
    # freezes at the clean pass's scale: Δ = Δz_h·W_O[h] · (1 + w) ÷ rms(clean attention output); the receiver's
    # scores are soft-capped (cap 5) as its layer caps them. By hand, the same Δ, the receiver's pattern and the loss
    from checkpoints import make_gemma

    model = load(str(make_gemma(tmp_path / "gemma2"))).cast(torch.float64)
    net = build(model)
    enc, enc_c = model.encode(CLEAN), model.encode(CORRUPT)
    got = path_patch(model, CLEAN, CORRUPT, (2, 0), "k", senders=[(1, 3)], keep_patterns=True)
    base = run_with_hooks(model, enc, keep=["resid_pre", "attn.z"])
    inputs, base_z = base.each("resid_pre"), base.each("attn.z")
    z_c = run_with_hooks(model, enc_c, keep=["attn.z"], logits=False).each("attn.z")
    hf_layer = model.hf.model.layers[1]
    w_o = hf_layer.self_attn.o_proj.weight.detach().T.reshape(model.n_heads, -1, model.config.hidden_size)
    whole = torch.einsum("hld,hdD->lD", base_z[1][0], w_o)  # the clean attention output, before the post-norm
    frozen = (1 + hf_layer.post_attention_layernorm.weight.detach()) * torch.rsqrt(
        whole.pow(2).mean(-1, keepdim=True) + model.config.rms_norm_eps)
    x = inputs[2] + ((z_c[1][0, 3] - base_z[1][0, 3]) @ w_o[3]) * frozen
    q, _, _ = net.qkv(2, inputs[2])
    _, k, _ = net.qkv(2, x)
    n = q.shape[2]
    assert model.family is not None  # the scratch network's family
    scores = (q[0, 0] @ k[0, 0].T) * model.family.scale(model.config, 2)
    scores = 5.0 * torch.tanh(scores / 5.0)  # the soft-cap, before the mask
    window = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3  # layer 2 is local: a window of 3
    scores = scores.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1) | window, float("-inf"))
    assert got.patterns is not None  # kept
    assert (got.patterns[0] - scores.softmax(-1)).abs().max() <= F64
    assert got.frame.pattern_change[0] > 0.01

    def by_hand_k(k, name):
        k = repeat_kv(k, 2).clone()
        k[:, 0] = net.qkv(2, x)[1][:, 0]
        return k

    hand = run_with_hooks(model, enc,
                          {"blocks.2.attn.k": by_hand_k, "blocks.2.attn.v": lambda v, name: repeat_kv(v, 2)},
                          keep=["blocks.2.attn.z"], resume=(2, inputs[2]))
    ids = enc.input_ids[0]
    assert base.final is not None and hand.final is not None  # both passes ran to their end
    measured = compare(base.final[0], hand.final, n, lm_stats(ids, n, logits=base.logits),
                       lm_stats(ids, n, logits=hand.logits))
    assert got.frame.loss[0] == pytest.approx(float(measured["loss"][0]), abs=F64, rel=0)


def hf_gemma3_path_patch(model, clean: str, corrupt: str, sender, receiver, into: str):
    """The same patch by hand on Hugging Face's Gemma 3 (every query head its own key/value head here): the sender's
    write Δz_s·W_O[s] (the input of its layer's ``o_proj``, its slice through its columns of W_O) through the
    post-attention norm frozen at the clean pass ((1 + w) ÷ rms of the clean ``o_proj`` output); on the clean text the
    receiver layer's q (``q_norm``'s output), k (``k_norm``'s) or v (``v_proj``'s) of the receiver head recomputed from
    x + Δ, through the layer's own input norm, projection and QK-norm (before the rotation, which Hugging Face applies
    after). Returns the receiver's attention [L, L] and the mean next-token loss, patched and clean."""
    hf = model.hf
    layers = hf.model.layers
    (s_layer, s_head), (r_layer, r_head) = sender, receiver
    d = model.d_head
    ids, ids_c = model.encode(clean).input_ids, model.encode(corrupt).input_ids
    o_proj = layers[s_layer].self_attn.o_proj
    cols = slice(s_head * d, (s_head + 1) * d)

    def sender_z(input_ids):
        got: dict[str, torch.Tensor] = {}
        hooks = [o_proj.register_forward_pre_hook(lambda m, args: got.setdefault("z", args[0])),
                 o_proj.register_forward_hook(lambda m, args, out: got.setdefault("whole", out))]
        hf(input_ids=input_ids)
        for h in hooks:
            h.remove()
        return got["z"][0, :, cols] @ o_proj.weight[:, cols].T, got["whole"][0]  # z_s·W_O[s], all heads' output

    with torch.inference_mode(), KeepFloat64(), gemma_norm_in_input_dtype():
        (write_c, _), (write, whole) = sender_z(ids_c), sender_z(ids)
        post = layers[s_layer].post_attention_layernorm
        frozen = (1 + post.weight) * torch.rsqrt(whole.pow(2).mean(-1, keepdim=True) + post.eps)
        delta = (write_c - write) * frozen
        clean_out = hf(input_ids=ids, labels=ids, output_attentions=True)
        layer, attn = layers[r_layer], layers[r_layer].self_attn
        seen = {}

        def keep_input(module, args, kwargs):
            seen["x"] = args[0] if args else kwargs["hidden_states"]

        def recomputed(which):
            h = layer.input_layernorm(seen["x"] + delta)
            proj = getattr(attn, f"{which}_proj")
            out = torch.nn.functional.linear(h, proj.weight, proj.bias)  # v_proj is hooked: its code, not its call
            if which == "v":
                return out
            heads = out.view(*out.shape[:-1], -1, d).transpose(1, 2)
            norm = getattr(attn, f"{which}_norm")
            return type(norm).forward(norm, heads)  # the module's code without its hooks (no recursion)

        def patch(module, args, out):
            new, out = recomputed(into), out.clone()
            if into == "v":
                out[..., r_head * d:(r_head + 1) * d] = new[..., r_head * d:(r_head + 1) * d]
            else:
                out[:, r_head] = new[:, r_head]
            return out

        target = attn.v_proj if into == "v" else getattr(attn, f"{into}_norm")
        hooks = [layer.register_forward_pre_hook(keep_input, with_kwargs=True), target.register_forward_hook(patch)]
        try:
            out = hf(input_ids=ids, labels=ids, output_attentions=True)
        finally:
            for h in hooks:
                h.remove()
    return out.attentions[r_layer][0, r_head], float(out.loss), clean_out.attentions[r_layer][0, r_head], \
        float(clean_out.loss)


@pytest.mark.numeric
@pytest.mark.parametrize("into", ["q", "k", "v"])
def test_gemma3_equals_the_same_patch_by_hand_in_hugging_face(tmp_path, into):
    # Gemma 3 in float64 (Hugging Face's RMSNorm made to compute in it): senders in the local layer 0 and the global
    # layer 1 (each turned by its own rotary table), a receiver in the local layer 2 (window 3), through QK-norm
    model = load(str(make_gemma(tmp_path / "gemma3", family="gemma3", num_key_value_heads=4)))
    model = model.cast(torch.float64)
    assert model.encode(CLEAN).input_ids.shape == model.encode(CORRUPT).input_ids.shape
    senders = [(0, 1), (1, 3), (1, 0)]
    got = path_patch(model, CLEAN, CORRUPT, (2, 2), into, senders=senders, keep_patterns=True)
    assert got.patterns is not None  # kept
    for i, sender in enumerate(senders):
        pattern, loss, clean_pattern, clean_loss = hf_gemma3_path_patch(model, CLEAN, CORRUPT, sender, (2, 2), into)
        assert (got.patterns[i] - pattern).abs().max() <= F64
        assert (got.clean_pattern - clean_pattern).abs().max() <= F64
        assert got.frame.loss[i] == pytest.approx(loss - clean_loss, abs=F64, rel=0)
    assert got.frame.loss.abs().max() > 1e-4
    if into == "v":
        assert got.frame.pattern_change.max() <= F64
    else:
        assert got.frame.pattern_change.max() > 0.01


@pytest.mark.numeric
@pytest.mark.parametrize("parallel", [True, False])
def test_gpt_neox_equals_the_patch_by_hand(tmp_path, parallel):
    # GPT-NeoX (q, k and v cut per head out of one fused product, a quarter of each head turned; the parallel
    # residual or the sequential one): patching receiver 2.1's key from sender 1.3 is head 2.1 with k recomputed
    # from x + Δ, Δ the sender's corrupt less clean write; the other heads keep their clean output
    model = load(str(make_neox(tmp_path / "neox", num_hidden_layers=3,
                               use_parallel_residual=parallel))).cast(torch.float64)
    net = build(model)
    enc, enc_c = model.encode(CLEAN), model.encode(CORRUPT)
    assert enc.input_ids.shape == enc_c.input_ids.shape
    got = path_patch(model, CLEAN, CORRUPT, (2, 1), "k", senders=[(1, 3)], keep_patterns=True)
    base = run_with_hooks(model, enc, keep=["resid_pre", "attn.z"])
    inputs, base_z = base.each("resid_pre"), base.each("attn.z")
    z_c = run_with_hooks(model, enc_c, keep=["attn.z"], logits=False).each("attn.z")
    x = inputs[2] + (z_c[1][0, 3] - base_z[1][0, 3]) @ net.head_out(1)[0][3]
    q, _, _ = net.qkv(2, inputs[2])
    _, k, _ = net.qkv(2, x)
    n = q.shape[2]
    assert model.family is not None  # the scratch network's family
    scores = (q[0, 1] @ k[0, 1].T) * model.family.scale(model.config, 2) + \
        torch.triu(torch.full((n, n), float("-inf"), dtype=q.dtype), 1)
    assert got.patterns is not None  # kept
    assert (got.patterns[0] - scores.softmax(-1)).abs().max() <= F64
    assert got.frame.pattern_change[0] > 0.01

    def by_hand_k(k, name):
        k = k.clone()
        k[:, 1] = net.qkv(2, x)[1][:, 1]
        return k

    hand = run_with_hooks(model, enc, {"blocks.2.attn.k": by_hand_k}, keep=["blocks.2.attn.z"], resume=(2, inputs[2]))
    seen = hand["blocks.2.attn.z"]
    assert (seen[0, [0, 2, 3]] - base_z[2][0, [0, 2, 3]]).abs().max() <= F64
    assert (seen[0, 1] - base_z[2][0, 1]).abs().max() > 1e-3
    ids = enc.input_ids[0]
    assert base.final is not None and hand.final is not None  # both passes ran to their end
    measured = compare(base.final[0], hand.final, n, lm_stats(ids, n, logits=base.logits),
                       lm_stats(ids, n, logits=hand.logits))
    assert got.frame.loss[0] == pytest.approx(float(measured["loss"][0]), abs=F64, rel=0)


@pytest.mark.numeric
def test_olmo2_senders_write_through_the_post_norm_frozen_at_the_clean_pass(tmp_path):
    # OLMo 2: no norm before the attention, QK-norm over the whole projection, and the attention's output normed
    # after W_O (with its bias): path patching freezes that norm at the clean pass's scale, Δ = Δz_h·W_O[h] · w ÷
    # rms(clean attention output + b). By hand with Hugging Face's weights: the same Δ, the receiver's pattern, the loss
    model = load(str(make_llama(tmp_path / "olmo2", family="olmo2", num_hidden_layers=3,
                                attention_bias=True))).cast(torch.float64)
    net = build(model)
    enc, enc_c = model.encode(CLEAN), model.encode(CORRUPT)
    got = path_patch(model, CLEAN, CORRUPT, (2, 1), "k", senders=[(1, 3)], keep_patterns=True)
    base = run_with_hooks(model, enc, keep=["resid_pre", "attn.z"])
    inputs, base_z = base.each("resid_pre"), base.each("attn.z")
    z_c = run_with_hooks(model, enc_c, keep=["attn.z"], logits=False).each("attn.z")
    hf_layer = model.hf.model.layers[1]
    w_o = hf_layer.self_attn.o_proj.weight.detach().T.reshape(model.n_heads, -1, model.config.hidden_size)
    whole = torch.einsum("hld,hdD->lD", base_z[1][0], w_o) + hf_layer.self_attn.o_proj.bias.detach()
    frozen = hf_layer.post_attention_layernorm.weight.detach() * torch.rsqrt(
        whole.pow(2).mean(-1, keepdim=True) + model.config.rms_norm_eps)
    x = inputs[2] + ((z_c[1][0, 3] - base_z[1][0, 3]) @ w_o[3]) * frozen
    group = model.n_heads // model.config.num_key_value_heads
    q, _, _ = net.qkv(2, inputs[2])
    _, k, _ = net.qkv(2, x)
    n = q.shape[2]
    assert model.family is not None  # the scratch network's family
    scores = (q[0, 1] @ k[0, 1 // group].T) * model.family.scale(model.config, 2) + \
        torch.triu(torch.full((n, n), float("-inf"), dtype=q.dtype), 1)
    assert got.patterns is not None  # kept
    assert (got.patterns[0] - scores.softmax(-1)).abs().max() <= F64
    assert got.frame.pattern_change[0] > 0.01

    def by_hand_k(k, name):
        k = repeat_kv(k, group).clone()
        k[:, 1] = repeat_kv(net.qkv(2, x)[1], group)[:, 1]
        return k

    hand = run_with_hooks(model, enc,
                          {"blocks.2.attn.k": by_hand_k, "blocks.2.attn.v": lambda v, name: repeat_kv(v, group)},
                          keep=["blocks.2.attn.z"], resume=(2, inputs[2]))
    ids = enc.input_ids[0]
    assert base.final is not None and hand.final is not None  # both passes ran to their end
    measured = compare(base.final[0], hand.final, n, lm_stats(ids, n, logits=base.logits),
                       lm_stats(ids, n, logits=hand.logits))
    assert got.frame.loss[0] == pytest.approx(float(measured["loss"][0]), abs=F64, rel=0)
