"""QK attribution: the parts of one score sum to the model's own score in every family (float64: to rounding;
fp32: within the fp32 error of the pass's q and k), the summed q and k parts are Hugging Face's own q and k, a
planted induction head's score comes from the previous-token head's output on the key side, and bad cells are
refused in words. Position: a rotary score by frequency band sums to the score and equals Hugging Face's unturned q
and k turned by hand; a planted rotary previous-token head reads as position (high-frequency bands), a planted
content head as content, minilm's story head as position (its position embedding). Signs: a negative score has no
share. The bucketed grid sums to the score and counts every bucket's parts. The words said of these numbers are
tests/explain/test_why.py's; the deprecated words of this module give the same text, with a warning."""

import numpy as np
import pytest
import torch
from checkpoints import (
    gemma_norm_in_input_dtype,
    make_bert,
    make_distilbert,
    make_gemma,
    make_gpt2,
    make_induction,
    make_llama,
    make_modernbert,
    make_neox,
    make_roberta,
)
from numeric import F64, fp32

import probes
from probes.effects.why import BIAS_QK, band_group, qk_attribution
from probes.errors import BadOption, EmptyInput, OutOfRange, UnsupportedModel
from probes.explain import why as words
from probes.hf import forward as hf_forward
from probes.scratch import SplitNetwork, build, modernbert, run_with_hooks
from probes.scratch.llama import inverse_frequencies

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry."
TEXT = "The cat sat on the mat, and the dog watched it."

FAMILIES = {  # a tiny checkpoint of every family, with the options that touch the split
    "gpt2": lambda path: make_gpt2(path, n_layer=3),
    "gpt2-inverse-layer-scale": lambda path: make_gpt2(path, n_layer=3, scale_attn_by_inverse_layer_idx=True),
    "bert": lambda path: make_bert(path, num_hidden_layers=3),
    "bert-causal": lambda path: make_bert(path, num_hidden_layers=3, is_decoder=True),
    "roberta": lambda path: make_roberta(path, num_hidden_layers=3, pad_token_id=3),  # positions from 4
    "distilbert": lambda path: make_distilbert(path, n_layers=3),  # no token-type part
    "llama": lambda path: make_llama(path, num_hidden_layers=3),
    "llama-dynamic-rope": lambda path: make_llama(path, num_hidden_layers=3, rope_parameters={
        "rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
    "llama-biases": lambda path: make_llama(path, num_hidden_layers=3, attention_bias=True, mlp_bias=True),
    "mistral": lambda path: make_llama(path, family="mistral", num_hidden_layers=3, sliding_window=4),
    "qwen2": lambda path: make_llama(path, family="qwen2", num_hidden_layers=3),
    # QK-norm (frozen at each head's own q and k), with biases before it and a window on layers 1 and 2
    "qwen3": lambda path: make_llama(path, family="qwen3", num_hidden_layers=3, attention_bias=True,
                                     use_sliding_window=True, sliding_window=4, max_window_layers=1),
    # the fused projections' blocks, and a partial rotary: half of each head turns, the rest is one band of its own
    "phi3": lambda path: make_llama(path, family="phi3", num_hidden_layers=3, sliding_window=4,
                                    partial_rotary_factor=0.5),
    # sandwich norms (the post-attention norm frozen at the pass's scale), soft-capped scores (the split is of the
    # pre-cap score), local and global layers, scaled embeddings
    "gemma2": lambda path: make_gemma(path, sliding_window=4),
    # Gemma 2's body with QK-norm (frozen at each head's own q and k) and a rotary table per layer type (local θ
    # 10,000; global θ 1,000,000 with linear factor 8): each layer's bands are read from its own table
    "gemma3": lambda path: make_gemma(path, family="gemma3", sliding_window=4),
    # LayerNorm before the fused q/k/v (interleaved by head), a quarter of each head turned; the parallel residual
    # (the MLP reads the layer's input beside the attention) and the sequential one
    # no norm before the attention, QK-norm over the whole projection, the attention's write normed after W_O
    "olmo2": lambda path: make_llama(path, family="olmo2", num_hidden_layers=3, attention_bias=True),
    "gpt_neox": lambda path: make_neox(path, num_hidden_layers=3),
    "gpt_neox-sequential": lambda path: make_neox(path, num_hidden_layers=3, use_parallel_residual=False,
                                                  attention_bias=False),
    # pre-norm with LayerNorms (none before layer 0's attention: the embeddings' norm), a θ per layer type, layers 1
    # and 2 local (keys up to 4 away on either side), every optional bias
    "modernbert": lambda path: make_modernbert(path, local_attention=8, norm_bias=True, attention_bias=True,
                                               mlp_bias=True),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def tiny(request, tmp_path_factory):
    return probes.load(str(FAMILIES[request.param](tmp_path_factory.mktemp(request.param) / "m")))


def cells(model):
    """A few (layer, head, query, key) cells every family allows: the key at or before the query, within a
    window of 4."""
    n = int(model.encode(TEXT).attention_mask.sum())
    return [(2, 1, n - 1, n - 3), (1, model.n_heads - 1, 5, 5), (2, 0, 6, 3)]


@pytest.mark.numeric
def test_the_parts_sum_to_the_score_in_float64_in_every_family(tiny):
    model = tiny.cast(torch.float64)
    assert isinstance(build(model), SplitNetwork)
    for layer, head, query, key in cells(model):
        why = qk_attribution(model, TEXT, layer, head, query, key)
        assert why.delta <= 1e-9 * why.bound, (layer, head, query, key)
        assert abs(why.score) > 1e-3 * why.bound  # a score worth splitting, not a zero
        # both sides hold every earlier head and MLP, and the sides' totals are the score too
        earlier = {f"head {i}.{h}" for i in range(layer) for h in range(model.n_heads)} | {f"MLP {i}" for i in
                                                                                              range(layer)}
        assert earlier <= set(why.parts) and "token embedding" in why.parts
        assert why.side("query").sum() == pytest.approx(why.score, abs=1e-9 * why.bound, rel=0)
        assert why.side("key").sum() == pytest.approx(why.score, abs=1e-9 * why.bound, rel=0)


@pytest.mark.numeric
def test_the_summed_parts_are_hugging_faces_own_q_and_k(tiny):
    # float64: the residual parts sum to the layer's input, and their q and k parts to Hugging Face's q and k
    model = tiny.cast(torch.float64)
    net, enc = build(model), model.encode(TEXT)
    assert isinstance(net, SplitNetwork)  # every family here splits its q and k
    got = run_with_hooks(model, enc, logits=False, keep=["resid_pre", "attn.z"])
    inputs, zs = got.each("resid_pre"), got.each("attn.z")
    with gemma_norm_in_input_dtype():  # Gemma's HF RMSNorm computes in fp32 whatever the dtype: in float64 here
        reference = hf_forward(model, enc)
    assert reference.q is not None and reference.k is not None  # Hugging Face's eager pass keeps them
    positions = torch.tensor([3, 6])
    for layer in range(model.n_layers):
        parts = net.residual_parts(layer, enc.input_ids, enc.token_type_ids, inputs, zs, positions,
                                   torch.float64)
        stacked = torch.stack(list(parts.values()))
        x = inputs[layer][0, positions]
        assert (stacked.sum(0) - x).abs().max() <= F64 * max(1.0, float(x.abs().max()))
        q, k = net.qk_parts(layer, stacked, x, positions, enc.input_ids.shape[1])
        for mine, theirs in ((q.sum(0), reference.q[layer][0][:, positions]),
                             (k.sum(0), reference.k[layer][0][:, positions])):
            assert (mine - theirs).abs().max() <= F64 * max(1.0, float(theirs.abs().max()))


@pytest.mark.numeric
def test_fp32_parts_sum_to_the_fp32_score(tiny):
    # the split runs in float64 from the fp32 pass's activations; the model's own score is its fp32 q·k: they
    # differ by the fp32 rounding of q and k, each a sum over the hidden size of terms up to the score's scale
    for layer, head, query, key in cells(tiny):
        why = qk_attribution(tiny, TEXT, layer, head, query, key)
        assert why.delta <= fp32(tiny.config.hidden_size, why.bound)


@pytest.mark.numeric
def test_on_minilm_and_smollm2_within_1e_4_in_fp32_and_1e_9_in_float64(minilm, minilm64, smollm2):
    smollm64 = smollm2.cast(torch.float64)
    for model, model64, cell in ((minilm, minilm64, (1, 2, 10, 7)), (smollm2, smollm64, (18, 6, 11, 7))):
        why = qk_attribution(model, SHE, *cell)
        # fp32: as above, the fp32 rounding of q and k (hidden size 384 or 576: ≤ 7e-5 of the scale)
        assert why.delta <= min(1e-4, fp32(model.config.hidden_size)) * why.bound
        why64 = qk_attribution(model64, SHE, *cell)
        assert why64.delta <= 1e-9 * why64.bound
        # the same cell, one fp32 pass apart: the score moves by its fp32 rounding only
        assert why64.score == pytest.approx(why.score, abs=fp32(model.config.hidden_size, why.bound), rel=0)
    assert (why64.tokens[11], why64.tokens[7]) == (" she", " Xia")  # smollm2's byte-level pieces, readable
    # minilm's story cell: "she" (token 10) on the first piece of "Xiaohong" (7), head 1.2
    story = qk_attribution(minilm64, SHE, 1, 2, 10, 7)
    assert (story.tokens[10], story.tokens[7]) == ("she", "xiao")
    assert 0 < story.weight < 1 and story.score == pytest.approx(story.total, abs=1e-9 * story.bound, rel=0)


@pytest.mark.numeric
def test_a_planted_induction_head_is_explained_by_the_previous_token_head(tmp_path):
    path, text = make_induction(tmp_path / "induction")
    model = probes.models.load(str(path)).cast(torch.float64)
    ids = model.encode(text).input_ids[0].tolist()
    query = 7  # the second occurrence of token 1 …
    key = ids.index(ids[query]) + 1  # … and the token that followed its first occurrence
    assert ids[query] == ids[1] and key == 2
    why = qk_attribution(model, text, 1, 0, query, key)
    assert why.weight > 0.9  # the induction head looks there
    key_side = why.side("key")
    assert key_side["head 0.0"] >= 0.8 * why.score  # the key is found through what head 0.0 wrote into it
    assert why.side("query")["token embedding"] >= 0.8 * why.score  # …by the query's own token
    top = why.top(1).iloc[0]
    assert (top.query_part, top.key_part) == ("token embedding", "head 0.0")
    # the previous-token head itself: its key side is the position embedding
    prev = qk_attribution(model, text, 0, 0, query, query - 1)
    assert prev.weight > 0.9 and prev.side("key")["position embedding"] >= 0.8 * prev.score


@pytest.mark.numeric
def test_grid_and_frame(minilm64):
    why = qk_attribution(minilm64, SHE, 1, 2, 10, 7)
    grid = why.grid(4)
    # buckets: the three embeddings, layer 0's heads (none big enough to be named), MLP 0, the biases (both kinds)
    assert list(dict.fromkeys(grid.query_part)) == ["token embedding", "position embedding", "token-type embedding",
                                                    "heads of layer 0", "MLP 0", "biases"]
    assert len(grid) == 36 and grid.contribution.sum() == pytest.approx(why.score, abs=1e-9 * why.bound, rel=0)
    frame = why.frame()
    assert frame.contribution.abs().is_monotonic_decreasing
    assert frame.contribution.sum() == pytest.approx(why.score, abs=1e-9 * why.bound, rel=0)
    assert np.allclose(frame.share, frame.contribution / why.score, rtol=0, atol=F64)  # a positive score: shares
    assert BIAS_QK in why.parts  # BERT's projections have biases: a part of their own


def unturned(model, text: str, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's own q and k of layer ``layer`` (its own pass, float64 kept) turned back by its own rotary
    tables, the inverse of ``x·cos + rotate_half(x)·sin``: q ``[H, n, d]``, k ``[H_kv, n, d]`` before the turn (the
    tables r wide: a partial rotary turned the first r numbers only, the rest are as they were)."""
    reference = hf_forward(model, model.encode(text))
    tables = reference.rotary_of(layer)
    assert tables is not None and reference.q is not None and reference.k is not None  # a rotary model's, eager
    cos, sin = (t[0] for t in tables)  # [n, r]: the layer's own (ModernBERT's θ differ)
    r = cos.shape[-1]

    def back(x):
        half = r // 2
        turned = x[..., :r] * cos - torch.cat((-x[..., half:r], x[..., :half]), dim=-1) * sin
        return torch.cat((turned, x[..., r:]), dim=-1)

    return back(reference.q[layer][0]), back(reference.k[layer][0])


@pytest.mark.numeric
def test_rotary_bands_sum_to_the_score_and_equal_the_turn_by_hand(tiny):
    # float64: band b's term is scale · q_b · R(θ_b·(j − i)) · k_b with Hugging Face's unturned q and k and the
    # model's own θ_b (computed in fp32, as Hugging Face does); its content the same without the turn
    model = tiny.cast(torch.float64)
    n = int(model.encode(TEXT).attention_mask.sum())
    for layer, head, query, key in cells(model):
        why = qk_attribution(model, TEXT, layer, head, query, key)
        if model.family.positions != "rotary":  # a learned position table: position is a part, no bands
            assert why.bands is None and why.band_table().empty and why.band_groups().empty
            continue
        bands = why.band_table()
        assert bands.contribution.sum() == pytest.approx(why.score, abs=F64 * why.bound, rel=0)
        assert (bands.content + bands.position).sum() == pytest.approx(why.score, abs=F64 * why.bound, rel=0)
        q, k = unturned(model, TEXT, layer)
        q_i, k_j = q[head, query], k[head // (model.n_heads // model.n_kv_heads), key]
        config, params = rope_of(model, layer)
        omega = inverse_frequencies(config, n, params).double()
        half, r = len(omega), 2 * len(omega)  # r: the turned width (the head's, or less: a partial rotary)
        angle = omega * (key - query)  # k turned by θ_b·(j − i) against an unturned q
        turned = (k_j[:half] * angle.cos() - k_j[half:r] * angle.sin(),
                  k_j[:half] * angle.sin() + k_j[half:r] * angle.cos())
        scale = model.family.scale(model.config, layer)
        by_hand = scale * (q_i[:half] * turned[0] + q_i[half:r] * turned[1])
        content = scale * (q_i[:half] * k_j[:half] + q_i[half:r] * k_j[half:r])
        if r < len(q_i):  # a partial rotary: the numbers past r never turn, one band of their own, all content
            still = scale * (q_i[r:] @ k_j[r:])
            by_hand, content = torch.cat((by_hand, still[None])), torch.cat((content, still[None]))
            omega = torch.cat((omega, omega.new_zeros(1)))
            assert bands.group.iloc[-1] == "unrotated" and bands.position.iloc[-1] == 0
        assert np.abs(bands.contribution.to_numpy() - by_hand.numpy()).max() <= F64 * why.bound
        assert np.abs(bands.content.to_numpy() - content.numpy()).max() <= F64 * why.bound
        assert np.abs(bands.frequency.to_numpy() - omega.numpy()).max() <= F64
        assert list(bands.group) == [band_group(float(w), n - 1) for w in omega]
        content_sum, position = why.position_split()
        assert content_sum == pytest.approx(float(content.sum()), abs=F64 * why.bound, rel=0)
        assert groups_sum(why) == pytest.approx(why.score, abs=F64 * why.bound, rel=0)


def rope_of(model, layer: int) -> tuple:
    """The config as the rotary code reads it for layer ``layer``, and the rotary parameters the layer turns by: the
    model's config and None (its own parameters, one table for every layer); ModernBERT's (a θ per layer type) as its
    layer type's config; Gemma 3's config with its layer type's parameters (``rope_parameters`` keyed by type)."""
    if model.family.name == "modernbert":
        return modernbert.rope_config(model.config, model.config.layer_types[layer]), None
    if model.family.name == "gemma3":
        return model.config, model.config.rope_parameters[model.config.layer_types[layer]]
    return model.config, None


def groups_sum(why) -> float:
    return float(why.band_groups().contribution.sum())


@pytest.mark.numeric
def test_a_planted_rotary_previous_token_head_reads_as_position_from_high_frequency_bands(planted_rotary):
    model, text = planted_rotary
    previous = qk_attribution(model, text, 0, 0, 9, 8)  # head 0.0: constant q and k, only the turn tells keys apart
    assert previous.weight > 0.9
    content, position = previous.position_split()
    assert position > abs(content) and content < 0  # the offset-0 score is below zero: position makes it
    reading = previous.position_reading()
    assert (reading.content, reading.position, reading.score, reading.offset) == (content, position, previous.score, 1)
    assert reading.leads == "position" and reading.through is not None
    assert (reading.through.group, reading.through.bands) == ("high", (0,))
    groups = previous.band_groups().set_index("group")
    assert groups.loc["high", "position"] > 0.5 * position
    assert abs(groups.loc["low", "position"]) <= 1e-3 * abs(position)  # bands 9–15 barely turn over 11 tokens
    # head 0.1 matches the token in the slow bands: the repeat of token 3 at 9 finds its first occurrence
    match = qk_attribution(model, text, 0, 1, 9, 3)
    assert match.weight > 0.4
    content, position = match.position_split()
    assert content > 100 * abs(position) and match.position_reading().leads == "content"


@pytest.mark.numeric
def test_minilm_story_head_reads_as_position_through_its_position_embedding(minilm64):
    why = qk_attribution(minilm64, SHE, 1, 2, 10, 7)
    content, position = why.position_split()
    side = why.side("query")["position embedding"] + why.side("key")["position embedding"]
    p = why.parts.index("position embedding")
    assert position == pytest.approx(side - why.matrix[p, p], abs=F64 * why.bound, rel=0)  # its terms, either side
    assert content + position == pytest.approx(why.score, abs=1e-9 * why.bound, rel=0)
    reading = why.position_reading()
    assert reading.leads == "position" and reading.through is None  # a learned table: no band group to go through


@pytest.mark.numeric
def test_a_negative_score_has_no_share(minilm64):
    why = qk_attribution(minilm64, SHE, 1, 2, 10, 2)  # "she" on "##ming": a negative score
    assert why.score < 0
    assert why.frame().share.isna().all()  # a share of a negative score would flip every term's sign
    assert why.band_groups().empty and why.frame().contribution.sum() == pytest.approx(why.score, abs=F64 * why.bound,
                                                                                        rel=0)


@pytest.mark.numeric
def test_the_bucketed_grid_sums_to_the_score_and_counts_each_buckets_parts(minilm64, planted_rotary, smollm2):
    model, text = planted_rotary
    for why in (qk_attribution(minilm64, SHE, 1, 2, 10, 7), qk_attribution(minilm64, SHE, 4, 0, 10, 2),
                qk_attribution(model, text, 1, 1, 9, 3), qk_attribution(smollm2, SHE, 15, 7, 11, 9)):
        grid, buckets, reading = why.grid(3), why.buckets(3), why.grid_reading(3)
        assert grid.contribution.sum() == pytest.approx(why.total, abs=F64 * why.bound, rel=0)
        assert buckets.query_total.sum() == pytest.approx(why.total, abs=F64 * why.bound, rel=0)
        assert buckets.parts.sum() == len(why.parts) and "other parts" not in set(grid.query_part)
        assert [vars(b) for b in reading.buckets] == buckets.to_dict("records")  # the records are the table's rows
        for row in buckets.itertuples():  # each bucket's largest part, on the side it is largest on
            assert row.largest_total == why.side(row.largest_side)[row.largest]
            members = grid[(grid.query_part == row.bucket)]
            assert members.query_parts.iloc[0] == row.parts
        big = grid.loc[grid.contribution.abs().idxmax()]
        assert (reading.largest_query, reading.largest_key, reading.largest_contribution) == \
            (big.query_part, big.key_part, big.contribution)
        named = grid[(grid.query_parts == 1) & (grid.key_parts == 1)].contribution.sum()
        assert why.named_total(3) == pytest.approx(named, abs=F64 * why.bound, rel=0) == reading.named_total
    # smollm2 (30 layers): heads and MLPs in bands of 8 layers; 15.7's biggest lump today was "other parts × other
    # parts", more than the whole score: now every bucket is named and counted
    assert {"heads of layers 0–7", "heads of layers 8–14", "MLPs of layers 0–7", "MLPs of layers 8–14"} <= \
        set(why.buckets(3).bucket)
    assert why.buckets(3).set_index("bucket").parts["heads of layers 0–7"] == 72


TALKS = "The president called for new talks with Iran."  # smollm2's previous-token head 16.0 on " talks" → " new"


@pytest.mark.numeric
def test_smollm2_previous_token_head_reads_as_position_and_its_story_head_as_content(smollm2):
    tokens = [t.text for t in smollm2.encode(TALKS).tokens[0]]
    query = tokens.index(" talks")
    why = qk_attribution(smollm2, TALKS, 16, 0, query, query - 1)
    assert why.tokens[query - 1] == " new" and why.weight > 0.5
    content, position = why.position_split()
    assert position > why.score > 0 > content
    reading = why.position_reading()
    assert reading.leads == "position" and reading.offset == 1 and reading.through is not None
    assert reading.through.bands == (0,)
    # fp32: the bands sum to the pass's score exactly (the same float64 products), and to the model's own fp32 score
    # within the fp32 rounding of its q and k (as the parts do: hidden size 576)
    bands = why.band_table()
    assert bands.contribution.sum() == pytest.approx(why.score, abs=F64 * why.bound, rel=0)
    q, k, _ = probes.run(smollm2, TALKS).qkv(16, 0)
    own = float(q[query] @ k[query - 1]) * smollm2.family.scale(smollm2.config, 16)
    assert bands.contribution.sum() == pytest.approx(own, abs=fp32(smollm2.config.hidden_size, why.bound), rel=0)
    story = qk_attribution(smollm2, SHE, 15, 7, 11, 9)  # " she" on "ong": content leads, position adds
    content, position = story.position_split()
    assert content > position > 0 and story.position_reading().leads == "content"


def test_cells_the_head_gives_no_score_are_refused(tiny):
    model = tiny
    n = int(model.encode(TEXT).attention_mask.sum())
    with pytest.raises(BadOption, match="layer 9 is outside"):
        qk_attribution(model, TEXT, 9, 0, 1, 0)
    with pytest.raises(BadOption, match="head 99 is outside"):
        qk_attribution(model, TEXT, 0, 99, 1, 0)
    with pytest.raises(BadOption, match=f"outside the text's {n} tokens"):
        qk_attribution(model, TEXT, 0, 0, n, 0)
    with pytest.raises(EmptyInput):
        qk_attribution(model, "  ", 0, 0, 0, 0)
    if build(model).causal:
        with pytest.raises(OutOfRange, match="after the query: a causal model"):
            qk_attribution(model, TEXT, 0, 0, 2, 5)
    if model.family.window(model.config, 0):  # (the causal families': keys 6–9 are within 4 of query 9)
        with pytest.raises(OutOfRange, match="sliding window of 4 tokens, so head 0.0 gives it no score: pick a key "
                           "from token 6 to 9"):
            qk_attribution(model, TEXT, 0, 0, 9, 2)


def test_a_model_the_scratch_path_does_not_cover_is_refused(opt_dir):
    with pytest.raises(UnsupportedModel):
        qk_attribution(probes.load(str(opt_dir)), TEXT, 0, 0, 1, 0)


@pytest.mark.numeric
def test_senders_on_text_sum_the_split_of_the_cells_the_head_weighs_most(tmp_path, minilm64):
    from probes.effects.why import senders_on_text

    # one cell: each sender's totals are that cell's side totals (float64: the same sums in another order)
    got = senders_on_text(minilm64, SHE, 2, 3, cells=1)
    cell = qk_attribution(minilm64, SHE, 2, 3, *top_cell(minilm64, SHE, 2, 3))
    for row in got.itertuples():
        side = cell.side("query" if row.kind == "q" else "key")[f"head {row.sender_layer}.{row.sender_head}"]
        assert row.contribution == pytest.approx(side, abs=1e-9 * cell.bound, rel=0)
    assert len(got) == 2 * 2 * 12  # every head of layers 0 and 1, on both sides
    # the planted circuit: the induction head's scores come from the previous-token head, on the key side
    path, text = make_induction(tmp_path / "induction")
    planted = senders_on_text(probes.models.load(str(path)).cast(torch.float64), text, 1, 0, cells=5)
    best = planted.loc[planted.contribution.abs().idxmax()]
    assert (best.sender_layer, best.sender_head, best.kind) == (0, 0, "k") and best.share > 0.9
    with pytest.raises(BadOption, match="in layer 0: no head writes before it"):
        senders_on_text(minilm64, SHE, 0, 0)


def top_cell(model, text, layer, head):
    """The (query, key) cell head layer.head weighs most, the first token left out as a key and as a query."""
    weights = probes.run(model, text).attention(layer, head).double()
    weights[:, 0] = 0.0
    weights[0] = 0.0
    flat = int(weights.flatten().argmax())
    return flat // weights.shape[1], flat % weights.shape[1]


def test_the_words_that_moved_still_answer_here_for_a_release_with_a_warning(minilm):
    # QKAttribution.reading() and friends (docs/head-effects.md named them): probes.explain.why's text, and a
    # DeprecationWarning naming the new call; so do the module's old functions
    import probes.effects.why as numbers

    why = qk_attribution(minilm, SHE, 1, 2, 10, 7)
    row = why.top(1).iloc[0]
    for old, new, call in [
        (lambda: why.reading(), words.reading(why), r"reading\(why\)"),
        (lambda: why.effect(row.contribution), words.pushes(row.contribution, why.score),
         r"pushes\(value, why\.score\)"),
        (lambda: why.effect(-1.5, amount=False), words.pushes(-1.5, why.score, amount=False), "pushes"),
        (lambda: why.grid_caption(2), words.grid_caption(why, 2), r"grid_caption\(why, n\)"),
        (lambda: why.sentence(row), words.sentence(why, row), r"sentence\(why, row\)"),
        (lambda: numbers.pushes(-0.5, 4.83), "pushes the score down by 0.5 (-10% of 4.83)", "pushes"),
        (lambda: numbers.percent(-0.0003), "-0.03%", "percent"),
        (lambda: numbers.describe("head 0.7"), "the output of head 0.7", "describe"),
        (lambda: numbers.GROUPS, words.GROUPS, "GROUPS"),
    ]:
        with pytest.warns(DeprecationWarning, match=rf"is deprecated: use probes\.explain\.why\.{call}"):
            assert old() == new
    with pytest.raises(AttributeError, match="has no attribute 'sentences'"):
        numbers.sentences  # noqa: B018 (only the names that moved answer)


def test_cell_after_cell_of_one_head_reads_its_kept_pass_with_the_same_numbers(smollm2, monkeypatch):
    """A person clicks cell after cell of one head: the pass up to its layer runs once, and each split is the one a
    fresh pass gives (numbers and band table alike); another head, text or model runs its own pass."""
    from probes.effects import why

    monkeypatch.setattr(why, "_kept_pass", [])
    passes = []
    run = why._head_pass

    def counted(model, text, layer, head, *rest):
        passes.append((id(model), text, layer, head))
        return run(model, text, layer, head, *rest)

    monkeypatch.setattr(why, "_head_pass", counted)
    first, second = qk_attribution(smollm2, SHE, 15, 7, 11, 9), qk_attribution(smollm2, SHE, 15, 7, 8, 2)
    assert len(passes) == 1
    monkeypatch.setattr(why, "_kept_pass", [])  # a fresh pass for the second cell: the same numbers
    fresh = qk_attribution(smollm2, SHE, 15, 7, 8, 2)
    assert len(passes) == 2
    assert second.parts == fresh.parts and np.array_equal(second.matrix, fresh.matrix)
    assert second.bands is not None and fresh.bands is not None
    assert (second.score, second.weight) == (fresh.score, fresh.weight) and second.bands.equals(fresh.bands)
    assert first.score != second.score
    qk_attribution(smollm2, SHE, 15, 6, 11, 9)  # another head
    qk_attribution(smollm2, SHE + " Then she slept.", 15, 6, 11, 9)  # another text
    assert len(passes) == 4
