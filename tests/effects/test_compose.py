"""Composition scores (probes.effects.compose): the low-rank formula against the plain D × D products, a planted
circuit found by K-composition, the baseline, and the refusals."""

from __future__ import annotations

import pytest
import torch
from checkpoints import make_induction, make_llama
from numeric import F64

from probes.effects.compose import (
    centres,
    composition_scores,
    convention_said,
    conventions,
    notes,
    parse_convention,
    parse_kinds,
    parse_receiver,
    random_baseline,
)
from probes.errors import BadOption
from probes.models import load
from probes.scratch import SplitNetwork, build, head_writer, run_with_hooks
from probes.scratch.olmo2 import Olmo2
from probes.scratch.qwen3 import Qwen3


def naive(net, kind: str) -> dict[tuple[int, int, int, int], float]:
    """Every score from the D × D matrices, float64, as the definition writes it."""
    L = len(net.layers)
    ov, qk = {}, {}
    for layer in range(L):
        w_q, w_k, w_v = (t.double() for t in net.head_weights(layer))
        w_o = head_writer(net, layer).double()  # W_O (Gemma: its post-attention norm's gain folded in)
        group = w_q.shape[0] // w_k.shape[0]
        for h in range(w_q.shape[0]):
            ov[layer, h] = w_v[h // group] @ w_o[h]
            qk[layer, h] = w_q[h] @ w_k[h // group].T
    right = {"q": qk, "k": {key: m.T for key, m in qk.items()}, "v": ov}[kind]
    fro = torch.linalg.matrix_norm
    return {(sl, sh, rl, rh): float(fro(ov[sl, sh] @ right[rl, rh]) / (fro(ov[sl, sh]) * fro(right[rl, rh])))
            for (sl, sh) in ov for (rl, rh) in right if sl < rl}


@pytest.mark.numeric
@pytest.mark.parametrize("which", ["gpt2_dir", "llama_dir", "qwen3_dir", "phi3_dir", "gemma2_dir", "gemma3_dir",
                                   "neox_dir", "olmo2_dir",
                                   "bert_dir", "roberta_mlm_dir", "distilbert_mlm_dir", "modernbert_mlm_dir"])
def test_low_rank_equals_naive(which, request):
    model = load(str(request.getfixturevalue(which)))
    net = build(model)
    frame = composition_scores(model)
    for kind in "qkv":
        part = frame[frame.kind == kind]
        expected = naive(net, kind)
        assert len(part) == len(expected)
        for row in part.itertuples():
            key = (row.sender_layer, row.sender_head, row.receiver_layer, row.receiver_head)
            assert abs(row.score - expected[key]) <= F64, (kind, key)


def test_grouped_query_heads_read_their_kv_head(llama_dir):
    model = load(str(llama_dir))
    assert model.n_kv_heads < model.n_heads  # the tiny Llama is grouped-query (6 heads on 2)
    net = build(model)
    assert isinstance(net, SplitNetwork)  # its heads' maps
    w_q, w_k, w_v = net.head_weights(1)
    assert w_q.shape[0] == model.n_heads and w_k.shape[0] == w_v.shape[0] == model.n_kv_heads
    assert notes(model)[-1].startswith("rotary")


@pytest.mark.numeric
def test_qk_norm_folds_its_gain_and_leaves_out_its_scale(tmp_path):
    """Qwen3: at position 0 (no turn) the pass's own q (k) of head h is x·W_Q[h] (x·W_K[h]) of the layer's input x,
    times one positive number per head, 1 ÷ (rms(x) · rms of the head's projection): the gains, of the layer's
    RMSNorm and of QK-norm, are in head_weights; the two scales, which depend on x, are not."""
    model = load(str(make_llama(tmp_path / "qwen3", family="qwen3", num_hidden_layers=2))).cast(torch.float64)
    net = build(model)
    assert isinstance(net, Qwen3)
    enc = model.encode("the cat sat on the mat")
    got = run_with_hooks(model, enc, logits=False, keep=["resid_pre"])
    for layer, x in enumerate(got.each("resid_pre")):
        q, k, _ = net.qkv(layer, x)
        w_q, w_k, _ = net.head_weights(layer)
        for own, maps in ((q, w_q), (k, w_k)):
            folded = torch.einsum("D,hDd->hd", x[0, 0], maps)  # [heads, d]
            ratio = folded / own[0, :, 0]  # one number per head, whatever the dimension
            assert (ratio > 0).all() and (ratio - ratio[:, :1]).abs().max() <= F64 * float(ratio.abs().max())
            assert (ratio[:, 0] - ratio[0, 0]).abs().max() > 1e-3  # the scale differs by head: left out, not folded
    # Llama's maps over the same weights, without QK-norm's gain: not proportional (the gain is really folded)
    lay = net.layers[0]
    plain = (lay.norm_attn[:, None] * lay.q_proj[0].t()).reshape(model.config.hidden_size, model.n_heads, -1)
    assert not torch.allclose(net.head_weights(0)[0], plain.transpose(0, 1), atol=F64, rtol=0)


@pytest.mark.numeric
def test_olmo2_qk_norm_folds_its_gain_across_heads(tmp_path):
    """OLMo 2: no norm before the attention, and QK-norm over the whole projection: at position 0 (no turn) the pass's
    own q (k) is x·W_Q[h] (x·W_K[h]) of the layer's input x times one positive number for every head and dimension, 1
    ÷ the rms of the whole projection: QK-norm's H·d gains are in head_weights, its scale is not."""
    model = load(str(make_llama(tmp_path / "olmo2", family="olmo2", num_hidden_layers=2))).cast(torch.float64)
    net = build(model)
    assert isinstance(net, Olmo2)
    got = run_with_hooks(model, model.encode("the cat sat on the mat"), logits=False, keep=["resid_pre"])
    for layer, x in enumerate(got.each("resid_pre")):
        q, k, _ = net.qkv(layer, x)
        w_q, w_k, _ = net.head_weights(layer)
        for own, maps in ((q, w_q), (k, w_k)):
            ratio = torch.einsum("D,hDd->hd", x[0, 0], maps) / own[0, :, 0]
            assert (ratio > 0).all() and (ratio - ratio[0, 0]).abs().max() <= F64 * float(ratio.abs().max())
    lay = net.layers[0]  # the maps without QK-norm's gain: not proportional (the gain is really folded)
    plain = lay.q_proj[0].t().reshape(model.config.hidden_size, model.n_heads, -1).transpose(0, 1)
    assert not torch.allclose(net.head_weights(0)[0], plain, atol=F64, rtol=0)


@pytest.fixture(scope="module")
def induction(tmp_path_factory):
    path, _text = make_induction(tmp_path_factory.mktemp("induction") / "gpt2")
    return load(str(path))


@pytest.mark.numeric
@pytest.mark.parametrize("which", ["gemma2_dir", "gemma3_dir"])
def test_gemma_folds_its_norm_gains_and_leaves_out_their_scales(which, request):
    # Gemma 2's readers read through input_layernorm (gain 1 + w) and its heads write through post_attention_layernorm
    # (gain 1 + w): both gains are folded into the maps, from Hugging Face's own weights by hand; the scales (1 ÷ the
    # rms of the input) depend on the input and are left out, as every norm's are. Gemma 3 adds QK-norm (gain 1 + w
    # over each head's q and k): its gains are folded into W_Q's and W_K's columns, its scale left out too
    model = load(str(request.getfixturevalue(which))).cast(torch.float64)
    net = build(model)
    assert isinstance(net, SplitNetwork)  # its heads' maps
    for layer in range(model.n_layers):
        hf_layer = model.hf.model.layers[layer]
        attn = hf_layer.self_attn
        pre = 1 + hf_layer.input_layernorm.weight.detach()
        post = 1 + hf_layer.post_attention_layernorm.weight.detach()
        w_q, w_k, _ = net.head_weights(layer)
        q_by_hand = (pre[:, None] * attn.q_proj.weight.detach().T).reshape(-1, model.n_heads, 16).transpose(0, 1)
        k_by_hand = (pre[:, None] * attn.k_proj.weight.detach().T).reshape(-1, model.n_kv_heads, 16).transpose(0, 1)
        if hasattr(attn, "q_norm"):  # Gemma 3: each head's d columns times QK-norm's gain
            q_by_hand, k_by_hand = q_by_hand * (1 + attn.q_norm.weight.detach()), \
                k_by_hand * (1 + attn.k_norm.weight.detach())
        o_by_hand = attn.o_proj.weight.detach().T.reshape(model.n_heads, 16, -1) * post
        assert (w_q - q_by_hand).abs().max() <= F64 and (w_k - k_by_hand).abs().max() <= F64
        assert (head_writer(net, layer) - o_by_hand).abs().max() <= F64


@pytest.mark.numeric
def test_planted_induction_head_k_composes_with_previous_token_head(induction):
    frame = composition_scores(induction, receivers=[(1, 0)], draws=50)
    k = frame[frame.kind == "k"].sort_values("score", ascending=False)
    top = k.iloc[0]
    assert (top.sender_layer, top.sender_head) == (0, 0)
    assert top.score > top.baseline_mean + 5 * top.baseline_sd
    q = frame[(frame.kind == "q") & (frame.sender_layer == 0) & (frame.sender_head == 0)].iloc[0]
    assert q.score < top.score / 5  # the previous-token head writes where the induction head's query does not read
    assert q.score < q.baseline_mean  # …less than random maps would
    v = frame[frame.kind == "v"]
    assert v.score.isna().all()  # head 1.0 reads no value (its W_V is zero): 0 ÷ 0, no score


def test_cli_skips_a_head_with_no_map(induction, capsys):
    import json

    from probes.cli import main

    assert main(["compose", "--model", str(induction.location), "--receiver", "1.0", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)  # valid JSON: no NaN in it
    assert got["kinds"]["v"]["top"] == [] and got["kinds"]["k"]["top"][0]["sender"] == "0.0"


@pytest.mark.numeric
def test_baseline_is_reproducible_and_near_its_expectation():
    mean, sd = random_baseline(64, 32, draws=20, seed=0)
    assert (mean, sd) == random_baseline(64, 32, draws=20, seed=0)
    assert 0 < sd < mean < 1


def test_refusals(gpt2_model):
    layers, heads = gpt2_model.n_layers, gpt2_model.n_heads
    for spec in ("3", "a.b", "1.2.3", f"{layers}.0", f"1.{heads}", "0.0", "-1.0"):
        with pytest.raises(BadOption):
            parse_receiver(spec, layers, heads)
    with pytest.raises(BadOption):
        composition_scores(gpt2_model, receivers=[(0, 1)])
    with pytest.raises(BadOption):
        composition_scores(gpt2_model, kind="x")
    with pytest.raises(BadOption):
        composition_scores(gpt2_model, draws=1)
    assert parse_kinds("all") == ("q", "k", "v") and parse_kinds("v,q") == ("q", "v")


def test_cli(gpt2_model, gpt2_dir, capsys):
    import json

    from probes.cli import main

    assert main(["compose", "--model", str(gpt2_dir), "--receiver", "1.0", "--kind", "k", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "K-composition" in out and "baseline" in out and "weights" in out
    assert main(["compose", "--model", str(gpt2_dir), "--receiver", "1.0", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert set(got["kinds"]) == {"q", "k", "v"} and len(got["kinds"]["k"]["top"]) == 4  # layer 0 has 4 heads
    assert main(["compose", "--model", str(gpt2_dir), "--receiver", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "layer 0" in err


def folded_by_hand(hf, kind: str) -> dict[tuple[int, int, int, int], float]:
    """Every score of a Hugging Face GPT-2 in TransformerLens's default weights, folded here from the checkpoint's own
    tensors (float64) and scored by the D × D definition: ln_1's gain times the rows of c_attn's W_Q, W_K, W_V, each
    head's columns centred over the residual dimension (fold_ln with center_weights), each head's rows of c_proj
    centred over it too (center_writing_weights)."""
    blocks, heads = hf.transformer.h, hf.config.n_head
    D = hf.config.n_embd
    d = D // heads
    ov, qk = {}, {}
    for layer, block in enumerate(blocks):
        gain = block.ln_1.weight.detach().double()
        c_attn = block.attn.c_attn.weight.detach().double()  # Conv1D [D, 3D]: x·W
        c_proj = block.attn.c_proj.weight.detach().double()  # Conv1D [H·d, D]
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            w_q, w_k, w_v = (gain[:, None] * c_attn[:, part * D:(part + 1) * D][:, cols] for part in range(3))
            w_q, w_k, w_v = (w - w.mean(dim=0, keepdim=True) for w in (w_q, w_k, w_v))  # mean over the D rows
            w_o = c_proj[cols, :]
            w_o = w_o - w_o.mean(dim=1, keepdim=True)  # mean over the D columns
            ov[layer, h] = w_v @ w_o
            qk[layer, h] = w_q @ w_k.T
    right = {"q": qk, "k": {key: m.T for key, m in qk.items()}, "v": ov}[kind]
    fro = torch.linalg.matrix_norm
    return {(sl, sh, rl, rh): float(fro(ov[sl, sh] @ right[rl, rh]) / (fro(ov[sl, sh]) * fro(right[rl, rh])))
            for (sl, sh) in ov for (rl, rh) in right if sl < rl}


@pytest.fixture(scope="module")
def gpt2_64(gpt2_model):
    return gpt2_model.cast(torch.float64)


@pytest.mark.numeric
def test_transformerlens_convention_equals_the_weights_folded_by_hand(gpt2_64):
    frame = composition_scores(gpt2_64, convention="transformerlens")
    assert (frame.convention == "transformerlens").all()
    for kind in "qkv":
        part = frame[frame.kind == kind]
        expected = folded_by_hand(gpt2_64.hf, kind)
        assert len(part) == len(expected) == 4 * 4
        for row in part.itertuples():
            key = (row.sender_layer, row.sender_head, row.receiver_layer, row.receiver_head)
            assert abs(row.score - expected[key]) <= F64, (kind, key)


@pytest.mark.numeric
def test_the_conventions_differ_on_layernorm_and_agree_on_rmsnorm(gpt2_64, llama_dir):
    raw = composition_scores(gpt2_64)
    folded = composition_scores(gpt2_64, convention="transformerlens")
    assert (raw.convention == "raw").all()
    gap = (raw.score - folded.score).abs()
    # the tiny random GPT-2 (LayerNorm gains 1 ± 0.1): the largest gap is 0.020, about the random baseline's sd
    assert gap.max() > 0.01 and gap.max() > 0.5 * raw.baseline_sd.iloc[0]
    assert (raw.baseline_mean == folded.baseline_mean).all()  # the same random matrices: only the weights moved
    llama = load(str(llama_dir))
    assert centres(build(gpt2_64)) and not centres(build(llama))
    same = composition_scores(llama), composition_scores(llama, convention="transformerlens")
    assert (same[0].score.to_numpy() == same[1].score.to_numpy()).all()  # RMSNorm does not centre: nothing to fold
    assert conventions(llama)["raw"] == conventions(llama)["transformerlens"]
    assert "same numbers" in convention_said(llama, "transformerlens")
    assert notes(llama, "transformerlens") == notes(llama)
    assert "centring too" in notes(gpt2_64, "transformerlens")[0] and "centring too" not in notes(gpt2_64)[0]


@pytest.mark.parametrize("which", ["bert_dir", "roberta_mlm_dir", "distilbert_mlm_dir"])  # the post-norm encoders
def test_transformerlens_convention_is_refused_on_bert_and_unknown_names(which, request):
    bert = load(str(request.getfixturevalue(which)))
    with pytest.raises(BadOption, match="post-norm"):
        composition_scores(bert, receivers=[(1, 0)], convention="transformerlens")
    assert list(conventions(bert)) == ["raw"] and convention_said(bert).startswith("raw (a post-norm model")
    assert not composition_scores(bert, receivers=[(1, 0)]).score.isna().all()  # raw stays
    assert parse_convention(" TransformerLens ") == "transformerlens"
    with pytest.raises(BadOption, match="raw .* or transformerlens"):
        parse_convention("tl")
