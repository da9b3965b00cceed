"""The logit lens: its last row is the model's own logits (float64 against Hugging Face, and fp32); a head's direct
effect equals its direct logit attribution; the table's shape; token ids read as they are; encoders refused."""

import pytest
import torch
from checkpoints import gemma_norm_in_input_dtype, make_gemma
from numeric import F64, fp32

import probes
from probes.effects.attribution import logit_attribution
from probes.effects.lens import Lens, logit_lens, stage
from probes.errors import BadOption
from probes.hf import KeepFloat64
from probes.scratch import run_with_hooks

TEXT = "Researchers probe every layer of the model"


def hf_logits(model, text: str) -> torch.Tensor:
    """Hugging Face's own logits of the text ``[L, V]`` (its precision kept: float64 for a float64 copy)."""
    enc = model.encode(text)
    with torch.inference_mode(), KeepFloat64():
        return model.hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask).logits[0]


def last_row(lens: Lens):
    """The lens's last row (after the last layer): positions, token ids, logits, probabilities."""
    last = lens.layers[lens.layers.row == lens.n_layers]
    return (torch.tensor(last.position.values), torch.tensor(last.token_id.values), torch.tensor(last.logit.values),
            torch.tensor(last.probability.values))


@pytest.mark.numeric
@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen3", "phi3", "gemma2", "gemma3", "neox", "olmo2"])
def test_the_last_row_is_the_models_logits_in_float64(family, request):
    # GPT-2 and GPT-NeoX (LayerNorm with a bias) and the RMSNorm decoders (Llama; Qwen3's QK-norm, Phi-3's fused
    # projections): the lens after the last layer is Hugging Face's logits, its top k are Hugging Face's top k, with
    # their softmax probabilities, to float64 rounding
    model = request.getfixturevalue("gpt2_model64") if family == "gpt2" else \
        probes.models.load(str(request.getfixturevalue(f"{family}_dir"))).cast(torch.float64)
    # (Gemma 2: the logits soft-capped, after the sandwich norms; Hugging Face's RMSNorm made to compute in float64)
    lens = logit_lens(model, TEXT, k=5)
    with gemma_norm_in_input_dtype():
        want = hf_logits(model, TEXT)
    assert want.dtype == torch.float64
    pos, ids, logits, probs = last_row(lens)
    assert (ids.view(-1, 5) == want.topk(5, dim=-1).indices).all()
    assert (logits - want[pos, ids]).abs().max() <= F64
    assert (probs - want.softmax(-1)[pos, ids]).abs().max() <= F64


@pytest.mark.numeric
def test_the_last_row_is_the_models_logits_in_fp32(smollm2):
    # fp32: the lens's last row is the same function as the pass's logits, computed on one position's rows at a
    # time: at most a reordering of the D = 576 products of one logit (measured: 0, bit for bit, on this machine)
    text = "Xiaoming gave the apple to Xiaohong because she was"
    lens = logit_lens(smollm2, text, heads=False)
    ran = run_with_hooks(smollm2, smollm2.encode(text))
    assert ran.logits is not None  # a decoder's pass, run to its end
    own = ran.logits[0].double()
    pos, ids, logits, _ = last_row(lens)
    scale = float(own.abs().max())  # ~29
    assert (logits - own[pos, ids]).abs().max() <= fp32(576, scale)
    assert (ids.view(len(lens.tokens), -1)[:, 0] == own.argmax(-1)).all()  # the lens's top token is the prediction


@pytest.mark.numeric
def test_a_heads_direct_effect_is_its_logit_attribution(gpt2_model64):
    # a head's row holds the logits it adds directly (final norm frozen): for its top token at the last position,
    # exactly the head's share in direct logit attribution, to float64 rounding
    lens = logit_lens(gpt2_model64, TEXT, k=3)
    heads = lens.heads
    assert heads is not None  # heads=True, the default
    last = heads[(heads.position == len(lens.tokens) - 1) & (heads["rank"] == 1)]
    for layer, head in ((0, 1), (1, 3)):
        row = last[(last.layer == layer) & (last["head"] == head)].iloc[0]
        share = logit_attribution(gpt2_model64, TEXT, int(row.token_id)).heads[layer, head]
        assert row.logit == pytest.approx(float(share), abs=F64, rel=0)


def test_the_tables_shape(gpt2_model):
    lens = logit_lens(gpt2_model, TEXT, k=4)
    assert lens.heads is not None  # heads=True, the default
    n, layers, heads = len(lens.tokens), gpt2_model.n_layers, gpt2_model.n_heads
    assert lens.stages == ["embeddings"] + [f"after layer {i}" for i in range(layers)] == [stage(r) for r in
                                                                                           range(layers + 1)]
    assert len(lens.layers) == (layers + 1) * n * 4 and len(lens.heads) == layers * heads * n * 4
    assert list(lens.layers.columns) == ["row", "stage", "position", "input", "rank", "token_id", "piece",
                                         "probability", "logit"]
    assert list(lens.heads.columns) == ["layer", "head", "position", "input", "rank", "token_id", "piece", "logit"]
    for _, cell in lens.layers.groupby(["row", "position"]):
        assert list(cell["rank"]) == [1, 2, 3, 4] and cell.logit.is_monotonic_decreasing
        assert cell.probability.is_monotonic_decreasing and 0 < cell.probability.sum() <= 1 + 1e-6
    assert list(lens.layers[lens.layers["rank"] == 1].input[: n]) == lens.tokens
    one_layer = logit_lens(gpt2_model, TEXT, k=4, head_layers=[1]).heads  # the heads of one layer only (cheaper)
    assert one_layer is not None
    assert set(one_layer.layer) == {1}
    assert (one_layer.reset_index(drop=True) == lens.heads[lens.heads.layer == 1].reset_index(drop=True)).all().all()
    tok = gpt2_model.tokenizer
    one = lens.layers.iloc[0]
    assert one.piece == tok.decode([int(one.token_id)])  # readable (a leading space is a space)


def test_token_ids_as_they_are_and_some_positions(gpt2_model):
    ids = gpt2_model.encode(TEXT).input_ids[0].tolist()
    whole = logit_lens(gpt2_model, TEXT, heads=False)
    some = logit_lens(gpt2_model, ids=ids[:4], positions=[3], heads=False)
    assert some.heads is None and some.positions == [3] and set(some.layers.position) == {3}
    want = whole.layers[whole.layers.position == 3].reset_index(drop=True)
    got = some.layers.reset_index(drop=True)
    assert (got.token_id == want.token_id).all()  # causal: the prefix's lens at its last token is the text's
    assert list(got.input) == list(want.input) and got.input[0] == whole.tokens[3]


@pytest.mark.parametrize("fixture", ["bert_mlm_dir", "roberta_mlm_dir", "distilbert_mlm_dir", "modernbert_mlm_dir"])
def test_a_masked_lm_encoder_is_refused_with_advice(fixture, request):
    """An encoder's masked-LM head predicts a masked token from both sides, not the next one: no logit lens."""
    model = probes.load(str(request.getfixturevalue(fixture)))
    assert model.has_lm_head and not model.predicts_tokens
    with pytest.raises(BadOption, match="no language-model head.*pick one, such as smollm2"):
        logit_lens(model, "she was hungry")


def test_refused_with_advice(minilm, gpt2_model):
    with pytest.raises(BadOption, match="no language-model head.*pick one, such as smollm2"):
        logit_lens(minilm, "she was hungry")
    with pytest.raises(BadOption, match="outside the text"):
        logit_lens(gpt2_model, TEXT, positions=[99])
    with pytest.raises(BadOption, match="layer 2 is outside"):
        logit_lens(gpt2_model, TEXT, head_layers=[2])
    with pytest.raises(BadOption, match="k=0"):
        logit_lens(gpt2_model, TEXT, k=0)
    with pytest.raises(probes.EmptyInput):
        logit_lens(gpt2_model, ids=[])


@pytest.mark.numeric
@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_a_gemma_heads_direct_effect_goes_through_its_frozen_post_norm(tmp_path, family):
    # Gemma 2 and 3 without the final cap: a head's row is its write through the post-attention norm frozen at the
    # pass, then the frozen final norm: its logit attribution share, to float64 rounding

    model = probes.models.load(str(make_gemma(tmp_path / "g", family=family, final_logit_softcapping=None)))
    model = model.cast(torch.float64)
    lens = logit_lens(model, TEXT, k=3)
    heads = lens.heads
    assert heads is not None  # heads=True, the default
    last = heads[(heads.position == len(lens.tokens) - 1) & (heads["rank"] == 1)]
    for layer, head in ((0, 1), (2, 3)):
        row = last[(last.layer == layer) & (last["head"] == head)].iloc[0]
        share = logit_attribution(model, TEXT, int(row.token_id)).heads[layer, head]
        assert row.logit == pytest.approx(float(share), abs=F64, rel=0)
