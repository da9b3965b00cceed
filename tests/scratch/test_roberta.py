"""What is RoBERTa's own (BERT's network, positions counted from the padding index; its parity against Hugging Face,
option by option, on left- and right-padded batches with and without pairs, XLM-RoBERTa and CamemBERT included, and
its refusals are the conformance suite's: ``test_conformance.py``): pairs joined by two separators, positions from
the padding index on either side, the context after it, no padding index refused."""

import json

import pytest
import torch
from checkpoints import make_roberta
from numeric import F64
from scratch.conformance import ENCODER_TEXTS, built, compare, left_padded, load
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings

import probes
from probes import scratch
from probes.errors import InputTooLong, UnsupportedModel
from probes.scratch.bert import Bert
from probes.scratch.roberta import Roberta

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_pairs_are_joined_by_two_separators(family_model):
    """``<s> A </s></s> B </s>`` (the conformance suite counts the separators and sees no token types)."""
    model = family_model("roberta", "masked-lm")
    sep = model.tokenizer.sep_token_id
    ids = model.encode("first sentence", "second sentence").input_ids[0].tolist()
    assert [sep] * 2 in [ids[i:i + 2] for i in range(len(ids) - 1)]


def test_positions_count_from_the_padding_index_and_padding_reads_its_row(family_model):
    model = family_model("roberta", "pad-3-masked-lm")
    enc = model.encode(["one two three four", "one"])
    n = int(enc.attention_mask[1].sum())
    got = built(model, Roberta).position_ids(enc.input_ids)
    assert got[0].tolist() == list(range(4, 4 + enc.input_ids.shape[1]))
    assert got[1].tolist() == list(range(4, 4 + n)) + [3] * (enc.input_ids.shape[1] - n)
    assert torch.equal(got, RobertaEmbeddings.create_position_ids_from_input_ids(enc.input_ids, 3))  # HF's count


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_on_either_side_keeps_the_positions(family_model, side):
    """Hugging Face counts positions from the ids: a left-padded row's first token is still padding_idx + 1. Each
    row equals the row alone (float64: the batch sums in another order than one row)."""
    model = family_model("roberta", "masked-lm").cast(torch.float64)
    enc = model.encode(list(ENCODER_TEXTS))
    enc = left_padded(enc) if side == "left" else enc
    assert compare(model, enc).proven and compare(model, enc, "sdpa").proven
    batched = scratch.forward(model, enc)
    for b, text in enumerate(ENCODER_TEXTS):
        alone = scratch.forward(model, model.encode(text))
        real = enc.attention_mask[b].bool()
        assert torch.allclose(batched.hidden_states[-1][b, real], alone.hidden_states[-1][0], atol=F64, rtol=0)


def test_positions_from_zero_would_fail_parity(tmp_path, monkeypatch):
    """BERT's positions (0, 1, 2, …) on a RoBERTa are caught: the offset is what the parity sees."""
    model = load("roberta", tmp_path).cast(torch.float64)
    enc = model.encode(list(ENCODER_TEXTS))
    monkeypatch.setattr(Roberta, "position_ids", Bert.position_ids)
    model._scratch = None
    assert not compare(model, enc).passed


def test_the_context_is_the_positions_after_the_padding_index(family_model):
    """64 + pad + 1 rows hold 64 positions: a longer text is refused (or cut to 64), never an index error."""
    model = family_model("roberta", "masked-lm")
    assert model.max_tokens == 64
    long = "the cat sat on the mat " * 20
    with pytest.raises(InputTooLong):
        model.encode(long)
    enc = model.encode(long, truncate=True)
    assert enc.input_ids.shape[1] == 64 and enc.truncated
    assert compare(model, enc).passed


def test_no_padding_index_is_refused_by_name(tmp_path):
    path = make_roberta(tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "pad_token_id": None}))
    with pytest.raises(UnsupportedModel, match="pad_token_id=None"):
        scratch.build(probes.load(str(path)))
