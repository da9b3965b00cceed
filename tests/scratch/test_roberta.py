"""The from-scratch RoBERTa (BERT's network, positions counted from the padding index) against Hugging Face: shapes,
padding on either side, sentence pairs, the LM head, XLM-RoBERTa and CamemBERT, each config option, the lazy
backends, the float64 proof and the refusals."""

import json
from dataclasses import replace

import pytest
import torch
from checkpoints import make_roberta
from numeric import F64

import probes
from probes import hf, parity, scratch
from probes.errors import InputTooLong, UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES
from probes.scratch.bert import Bert
from probes.scratch.roberta import Roberta
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "小明把苹果给了小红", "Short."]
PAIRS = ["She was hungry.", "因为她饿了", "And a much longer second sentence than the first one."]


def _load(tmp_path, **options):
    return probes.load(str(make_roberta(tmp_path / "m", **options)))


def _compare(model, enc, backend="eager"):
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


def _parity(model, texts=TEXTS, pairs=None):
    """The fp32 report (what the app shows), bit-identical to Hugging Face in eager, after proving the same input in
    float64 (≤ 1e-10) on eager and sdpa."""
    for m in (model.cast(torch.float64), model):
        enc = m.encode(texts, pairs)
        for backend in ("eager", "sdpa"):
            report = _compare(m, enc, backend)
            assert report.passed and (m is model or report.proven), (backend, report.to_text())
    report = _compare(model, model.encode(texts, pairs))
    assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
    assert report.qkv_max_abs_diff == 0 and report.logits_max_abs_diff in (None, 0.0)
    return report


@pytest.mark.parametrize("shape", [
    dict(num_hidden_layers=1, num_attention_heads=1, hidden_size=16, intermediate_size=32),
    dict(num_hidden_layers=3, num_attention_heads=6, hidden_size=48, intermediate_size=40),
])
def test_shapes_pass_parity_with_padding_and_pairs(tmp_path, shape):
    report = _parity(_load(tmp_path, **shape), pairs=PAIRS)
    assert len(report.per_layer) == shape["num_hidden_layers"]
    assert report.logits_max_abs_diff is None  # a RobertaModel has no LM head


def test_pairs_are_joined_by_separators_without_token_types(roberta_mlm_dir):
    model = probes.load(str(roberta_mlm_dir))
    assert model.family.name == "roberta" and model.family.pairs and not model.family.token_types
    enc = model.encode("first sentence", "second sentence")
    assert enc.token_type_ids is None  # RoBERTa's tokenizer gives none: every token reads token type 0
    tok = model.tokenizer
    ids = enc.input_ids[0].tolist()
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert [tok.sep_token_id] * 2 in [ids[i:i + 2] for i in range(len(ids) - 1)]  # "</s></s>" between the two


def test_masked_lm_head_reads_gelu_whatever_hidden_act_says(tmp_path):
    """RobertaLMHead applies exact GELU, not hidden_act: with relu layers, the head still matches."""
    report = _parity(_load(tmp_path, masked_lm=True, hidden_act="relu"), pairs=PAIRS)
    assert report.logits_max_abs_diff == 0


@pytest.mark.parametrize("option", [
    dict(hidden_act="gelu_new"),
    dict(layer_norm_eps=1e-2),
    dict(is_decoder=True),
    dict(pad_token_id=0),  # positions from 1 (a padding row at 0)
    dict(pad_token_id=3, masked_lm=True),  # positions from 4
    dict(type_vocab_size=2),  # a second token type the tokenizer never gives
    dict(model_type="xlm-roberta", masked_lm=True),
    dict(model_type="camembert", pad_token_id=0),
])
def test_implemented_options_are_bit_identical_and_proven(tmp_path, option):
    model = _load(tmp_path, **option)
    assert model.family.name == "roberta"
    _parity(model)


def test_positions_count_from_the_padding_index_and_padding_reads_its_row(tmp_path):
    model = _load(tmp_path, pad_token_id=3)
    enc = model.encode(["one two three four", "one"])
    n = int(enc.attention_mask[1].sum())
    got = scratch.build(model).position_ids(enc.input_ids)
    assert got[0].tolist() == list(range(4, 4 + enc.input_ids.shape[1]))
    assert got[1].tolist() == list(range(4, 4 + n)) + [3] * (enc.input_ids.shape[1] - n)
    assert torch.equal(got, RobertaEmbeddings.create_position_ids_from_input_ids(enc.input_ids, 3))  # HF's count


def left_padded(enc):
    """The same batch with each row's padding moved to its left."""
    ids, mask = enc.input_ids.clone(), enc.attention_mask.clone()
    tokens = []
    for b in range(ids.shape[0]):
        pad = int((mask[b] == 0).sum())
        ids[b], mask[b] = ids[b].roll(pad), mask[b].roll(pad)
        tokens.append(enc.tokens[b][-pad:] + enc.tokens[b][:-pad] if pad else enc.tokens[b])
    return replace(enc, input_ids=ids, attention_mask=mask, tokens=tokens)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_on_either_side_keeps_the_positions(tmp_path, side):
    """Hugging Face counts positions from the ids: a left-padded row's first token is still padding_idx + 1. Each
    row equals the row alone (float64: the batch sums in another order than one row)."""
    model = _load(tmp_path, masked_lm=True).cast(torch.float64)
    enc = model.encode(TEXTS)
    enc = left_padded(enc) if side == "left" else enc
    assert _compare(model, enc).proven and _compare(model, enc, "sdpa").proven
    batched = scratch.forward(model, enc)
    for b, text in enumerate(TEXTS):
        alone = scratch.forward(model, model.encode(text))
        real = enc.attention_mask[b].bool()
        assert torch.allclose(batched.hidden_states[-1][b, real], alone.hidden_states[-1][0], atol=F64, rtol=0)


def test_positions_from_zero_would_fail_parity(tmp_path, monkeypatch):
    """BERT's positions (0, 1, 2, …) on a RoBERTa are caught: the offset is what the parity sees."""
    model = _load(tmp_path).cast(torch.float64)
    enc = model.encode(TEXTS)
    monkeypatch.setattr(Roberta, "position_ids", Bert.position_ids)
    model._scratch = None
    assert not _compare(model, enc).passed


def test_the_lazy_backends_recover_the_same_attention(roberta_mlm_dir):
    model = probes.load(str(roberta_mlm_dir))
    enc = left_padded(model.encode(TEXTS, PAIRS))
    for backend in ("sdpa", "flash"):
        report = _compare(model, enc, backend)
        assert report.passed, report.to_text()
        assert report.candidate == f"scratch/{backend}" and 0 < report.attention_max_abs_diff
    proof = _compare(model.cast(torch.float64), enc, "sdpa")
    assert proof.proven and proof.attention_max_abs_diff <= F64
    assert proof.hidden_max_rel_diff <= F64 and proof.logits_max_rel_diff <= FLOAT64_TOLERANCES["logits"]


def test_the_context_is_the_positions_after_the_padding_index(tmp_path):
    """64 + pad + 1 rows hold 64 positions: a longer text is refused (or cut to 64), never an index error."""
    model = _load(tmp_path, masked_lm=True)
    assert model.max_tokens == 64
    long = "the cat sat on the mat " * 20
    with pytest.raises(InputTooLong):
        model.encode(long)
    enc = model.encode(long, truncate=True)
    assert enc.input_ids.shape[1] == 64 and enc.truncated
    assert _compare(model, enc).passed


def test_a_decoder_roberta_is_causal(tmp_path):
    model = _load(tmp_path, is_decoder=True)
    trace = scratch.forward(model, model.encode("a causal roberta"))
    assert trace.is_causal and model.is_causal
    assert torch.all(torch.triu(trace.attention(1), diagonal=1) == 0)


@pytest.mark.parametrize("option, named", [
    (dict(hidden_act="gelu_10"), "hidden_act='gelu_10'"),
    (dict(is_decoder=True, add_cross_attention=True), "add_cross_attention"),
])
def test_unimplemented_options_are_refused_by_name(tmp_path, option, named):
    model = _load(tmp_path, **option)
    with pytest.raises(UnsupportedModel, match=named):
        scratch.build(model)
    assert model.scratch_problem and "RoBERTa" in model.scratch_problem


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def test_no_padding_index_is_refused_by_name(tmp_path):
    path = make_roberta(tmp_path / "m")
    _edit_config(path, pad_token_id=None)
    with pytest.raises(UnsupportedModel, match="pad_token_id=None"):
        scratch.build(probes.load(str(path)))


def test_relative_positions_are_refused_at_load(tmp_path):
    path = make_roberta(tmp_path / "m")
    _edit_config(path, position_embedding_type="relative_key_query")
    with pytest.raises(UnsupportedModel, match="position_embedding_type='relative_key_query'"):
        probes.load(str(path))


def test_a_weight_the_network_would_not_use_is_refused(roberta_mlm_dir):
    model = probes.load(str(roberta_mlm_dir))
    weights = dict(model.hf.state_dict(), **{"roberta.encoder.layer.0.attention.self.distance_embedding.weight":
                                                 torch.zeros(3, 3)})
    with pytest.raises(UnsupportedModel, match="distance_embedding"):
        Roberta(weights, model.config, "extra")
