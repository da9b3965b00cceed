"""The from-scratch BERT against Hugging Face: shapes, padding, sentence pairs, the masked-LM head and
each config option."""

import pytest
import torch

import probes
from checkpoints import make_bert
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "小明把苹果给了小红", "Short."]
PAIRS = ["She was hungry.", "因为她饿了", "And a much longer second sentence than the first one."]


def _parity(path, texts=TEXTS, pairs=None):
    """The fp32 report (what the app shows), after proving the same input in float64 (≤ 1e-10)."""
    model = probes.load(str(path))
    for m in (model.cast(torch.float64), model):
        enc = m.encode(texts, pairs)
        report = parity.compare(hf.forward(m, enc), scratch.forward(m, enc))
        assert report.passed and (m is model or report.proven), report.to_text()
    return report


@pytest.mark.parametrize("shape", [
    dict(num_hidden_layers=1, num_attention_heads=1, hidden_size=16, intermediate_size=32),
    dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=64),
    dict(num_hidden_layers=3, num_attention_heads=6, hidden_size=48, intermediate_size=40),
])
def test_shapes_pass_parity_with_padding_and_pairs(tmp_path, shape):
    report = _parity(make_bert(tmp_path / "m", **shape), pairs=PAIRS)
    assert report.passed, report.to_text()
    assert len(report.per_layer) == shape["num_hidden_layers"]
    assert report.logits_max_abs_diff is None  # a BertModel has no LM head


def test_token_types_matter(bert_dir):
    """Sentence pairs use token-type embeddings: dropping them changes the scratch result."""
    model = probes.load(str(bert_dir))
    enc = model.encode("first sentence", "second sentence")
    assert enc.token_type_ids is not None and enc.token_type_ids.sum() > 0
    reference = hf.forward(model, enc)
    assert parity.compare(reference, scratch.forward(model, enc)).passed
    enc.token_type_ids = torch.zeros_like(enc.token_type_ids)
    assert not parity.compare(reference, scratch.forward(model, enc)).passed


def test_masked_lm_head(bert_mlm_dir):
    report = _parity(bert_mlm_dir, pairs=PAIRS)
    assert report.passed, report.to_text()
    assert report.logits_max_abs_diff is not None


@pytest.mark.parametrize("option", [
    dict(hidden_act="gelu_new"),
    dict(hidden_act="relu"),
    dict(hidden_act="silu"),
    dict(layer_norm_eps=1e-2),
    dict(is_decoder=True),
])
def test_implemented_options_pass_parity(tmp_path, option):
    report = _parity(make_bert(tmp_path / "m", **option))
    assert report.passed, report.to_text()


def test_decoder_bert_is_causal(tmp_path):
    model = probes.load(str(make_bert(tmp_path / "m", is_decoder=True)))
    trace = scratch.forward(model, model.encode("a causal bert"))
    assert trace.is_causal and model.is_causal
    assert torch.all(torch.triu(trace.attention(1), diagonal=1) == 0)


@pytest.mark.parametrize("option, named", [
    (dict(hidden_act="gelu_10"), "hidden_act='gelu_10'"),
    (dict(is_decoder=True, add_cross_attention=True), "add_cross_attention"),
])
def test_unimplemented_options_are_refused_by_name(tmp_path, option, named):
    model = probes.load(str(make_bert(tmp_path / "m", **option)))
    with pytest.raises(UnsupportedModel, match=named):
        scratch.build(model)


def test_relative_positions_are_refused_at_load(tmp_path):
    """transformers 5 ignores position_embedding_type, so neither path would be right: refuse."""
    path = make_bert(tmp_path / "m")
    import json

    cfg = json.loads((path / "config.json").read_text())
    cfg["position_embedding_type"] = "relative_key"
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModel, match="position_embedding_type='relative_key'"):
        probes.load(str(path))
