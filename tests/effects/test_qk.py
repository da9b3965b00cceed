"""QK attribution: the parts of one score sum to the model's own score in every family (float64: to rounding;
fp32: within the fp32 error of the pass's q and k), the summed q and k parts are Hugging Face's own q and k, a
planted induction head's score comes from the previous-token head's output on the key side, and bad cells are
refused in words."""

import numpy as np
import pytest
import torch
from numeric import F64, fp32

import probes
from probes.effects.qk import BIAS_QK, qk_attribution
from probes.errors import BadOption, EmptyInput, UnsupportedModel
from probes.hf import forward as hf_forward
from probes.scratch import SplitNetwork, build, outputs
from tests.checkpoints import make_bert, make_gpt2, make_induction, make_llama

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry."
TEXT = "The cat sat on the mat, and the dog watched it."

FAMILIES = {  # a tiny checkpoint of every family, with the options that touch the split
    "gpt2": lambda path: make_gpt2(path, n_layer=3),
    "gpt2-inverse-layer-scale": lambda path: make_gpt2(path, n_layer=3, scale_attn_by_inverse_layer_idx=True),
    "bert": lambda path: make_bert(path, num_hidden_layers=3),
    "bert-causal": lambda path: make_bert(path, num_hidden_layers=3, is_decoder=True),
    "llama": lambda path: make_llama(path, num_hidden_layers=3),
    "llama-dynamic-rope": lambda path: make_llama(path, num_hidden_layers=3, rope_parameters={
        "rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}),
    "llama-biases": lambda path: make_llama(path, num_hidden_layers=3, attention_bias=True, mlp_bias=True),
    "mistral": lambda path: make_llama(path, family="mistral", num_hidden_layers=3, sliding_window=4),
    "qwen2": lambda path: make_llama(path, family="qwen2", num_hidden_layers=3),
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
    got = outputs(model, enc, logits=False, keep_z=True, keep_inputs=True)
    reference = hf_forward(model, enc)
    positions = torch.tensor([3, 6])
    for layer in range(model.n_layers):
        parts = net.residual_parts(layer, enc.input_ids, enc.token_type_ids, got.inputs, got.z, positions,
                                   torch.float64)
        stacked = torch.stack(list(parts.values()))
        x = got.inputs[layer][0, positions]
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
    model = probes.load(str(path)).cast(torch.float64)
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
def test_grid_frame_and_words(minilm64):
    why = qk_attribution(minilm64, SHE, 1, 2, 10, 7)
    grid = why.grid(4)
    assert set(grid.query_part) == set(why.side("query").abs().nlargest(4).index) | {"other parts"}
    assert len(grid) == 25 and grid.contribution.sum() == pytest.approx(why.score, abs=1e-9 * why.bound, rel=0)
    frame = why.frame()
    assert frame.contribution.abs().is_monotonic_decreasing
    assert frame.contribution.sum() == pytest.approx(why.score, abs=1e-9 * why.bound, rel=0)
    assert np.allclose(frame.share, frame.contribution / why.score, rtol=0, atol=F64)
    row = why.top(1).iloc[0]
    line = why.sentence(row)
    assert line.startswith("key 'xiao': ") and " × query 'she': " in line and line.endswith(f"of the score "
                                                                                           f"{why.score:.3g}")
    assert BIAS_QK in why.parts  # BERT's projections have biases: a part of their own


def test_cells_the_head_gives_no_score_are_refused(tiny):
    model = tiny
    n = int(model.encode(TEXT).attention_mask.sum())
    with pytest.raises(BadOption, match="layer 9 does not exist"):
        qk_attribution(model, TEXT, 9, 0, 1, 0)
    with pytest.raises(BadOption, match="head 99 does not exist"):
        qk_attribution(model, TEXT, 0, 99, 1, 0)
    with pytest.raises(BadOption, match=f"outside the text's {n} tokens"):
        qk_attribution(model, TEXT, 0, 0, n, 0)
    with pytest.raises(EmptyInput):
        qk_attribution(model, "  ", 0, 0, 0, 0)
    if build(model).causal:
        with pytest.raises(BadOption, match="after the query: a causal model"):
            qk_attribution(model, TEXT, 0, 0, 2, 5)
    if model.family.window(model.config, 0):
        with pytest.raises(BadOption, match="sliding window of 4"):
            qk_attribution(model, TEXT, 0, 0, 9, 2)


def test_a_model_the_scratch_path_does_not_cover_is_refused(neox_dir):
    with pytest.raises(UnsupportedModel):
        qk_attribution(probes.load(str(neox_dir)), TEXT, 0, 0, 1, 0)


@pytest.mark.numeric
def test_senders_on_text_sum_the_split_of_the_cells_the_head_weighs_most(tmp_path, minilm64):
    from probes.effects.qk import senders_on_text

    # one cell: each sender's totals are that cell's side totals (float64: the same sums in another order)
    got = senders_on_text(minilm64, SHE, 2, 3, cells=1)
    cell = qk_attribution(minilm64, SHE, 2, 3, *top_cell(minilm64, SHE, 2, 3))
    for row in got.itertuples():
        side = cell.side("query" if row.kind == "q" else "key")[f"head {row.sender_layer}.{row.sender_head}"]
        assert row.contribution == pytest.approx(side, abs=1e-9 * cell.bound, rel=0)
    assert len(got) == 2 * 2 * 12  # every head of layers 0 and 1, on both sides
    # the planted circuit: the induction head's scores come from the previous-token head, on the key side
    path, text = make_induction(tmp_path / "induction")
    planted = senders_on_text(probes.load(str(path)).cast(torch.float64), text, 1, 0, cells=5)
    best = planted.loc[planted.contribution.abs().idxmax()]
    assert (best.sender_layer, best.sender_head, best.kind) == (0, 0, "k") and best.share > 0.9
    with pytest.raises(BadOption, match="no earlier heads"):
        senders_on_text(minilm64, SHE, 0, 0)


def top_cell(model, text, layer, head):
    """The (query, key) cell head layer.head weighs most, the first token left out as a key and as a query."""
    weights = probes.run(model, text).attention(layer, head).double()
    weights[:, 0] = 0.0
    weights[0] = 0.0
    flat = int(weights.flatten().argmax())
    return flat // weights.shape[1], flat % weights.shape[1]
