"""The from-scratch DistilBERT (BERT's network under DistilBERT's names, no token types) against Hugging Face: shapes,
padding, sentence pairs, the masked-LM head, sinusoidal positions, each config option, the lazy backends, the
float64 proof and the refusals."""

import pytest
import torch
from checkpoints import make_distilbert
from numeric import F64

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES
from probes.scratch.distilbert import DistilBert
from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "小明把苹果给了小红", "Short."]
PAIRS = ["She was hungry.", "因为她饿了", "And a much longer second sentence than the first one."]


def _load(tmp_path, **options):
    return probes.load(str(make_distilbert(tmp_path / "m", **options)))


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
    dict(n_layers=1, n_heads=1, dim=16, hidden_dim=32),
    dict(n_layers=3, n_heads=6, dim=48, hidden_dim=40),
])
def test_shapes_pass_parity_with_padding_and_pairs(tmp_path, shape):
    report = _parity(_load(tmp_path, **shape), pairs=PAIRS)
    assert len(report.per_layer) == shape["n_layers"]
    assert report.logits_max_abs_diff is None  # a DistilBertModel has no LM head


def test_masked_lm_head(distilbert_mlm_dir):
    report = _parity(probes.load(str(distilbert_mlm_dir)), pairs=PAIRS)
    assert report.logits_max_abs_diff == 0


def test_pairs_have_separators_and_no_token_types(distilbert_mlm_dir):
    model = probes.load(str(distilbert_mlm_dir))
    assert model.family.name == "distilbert" and model.family.pairs and not model.family.token_types
    enc = model.encode("first sentence", "second sentence")
    assert enc.token_type_ids is None  # DistilBertModel takes none
    assert enc.input_ids[0].tolist().count(model.tokenizer.sep_token_id) == 2
    assert not model.is_causal and not scratch.build(model).causal


@pytest.mark.parametrize("option", [
    dict(activation="relu", masked_lm=True),  # the layers' and the head's
    dict(activation="gelu_new"),
    dict(sinusoidal_pos_embds=True, masked_lm=True),
])
def test_implemented_options_are_bit_identical_and_proven(tmp_path, option):
    _parity(_load(tmp_path, **option), pairs=PAIRS)


def test_sinusoidal_positions_are_the_table_hugging_face_reads(tmp_path):
    model = _load(tmp_path, sinusoidal_pos_embds=True)
    table = model.hf.get_position_embeddings().weight
    expected = create_sinusoidal_embeddings(table.shape[0], table.shape[1], torch.empty_like(table))
    assert torch.equal(table, expected)  # sin/cos, not learned: what the network reads
    assert torch.equal(scratch.build(model).position, table)


def test_the_lazy_backends_recover_the_same_attention(distilbert_mlm_dir):
    model = probes.load(str(distilbert_mlm_dir))
    enc = model.encode(TEXTS, PAIRS)
    for backend in ("sdpa", "flash"):
        report = _compare(model, enc, backend)
        assert report.passed, report.to_text()
        assert report.candidate == f"scratch/{backend}" and 0 < report.attention_max_abs_diff
    proof = _compare(model.cast(torch.float64), enc, "sdpa")
    assert proof.proven and proof.attention_max_abs_diff <= F64
    assert proof.hidden_max_rel_diff <= F64 and proof.logits_max_rel_diff <= FLOAT64_TOLERANCES["logits"]


def test_unimplemented_activation_is_refused_by_name(tmp_path):
    model = _load(tmp_path, activation="gelu_10")  # Hugging Face has it (clipped GELU); activations.py does not
    with pytest.raises(UnsupportedModel, match="activation='gelu_10'"):
        scratch.build(model)
    assert "DistilBERT" in model.scratch_problem
    assert hf.forward(model, model.encode("the Hugging Face view still works")).attn is not None


def test_a_weight_the_network_would_not_use_is_refused(distilbert_mlm_dir):
    model = probes.load(str(distilbert_mlm_dir))
    weights = dict(model.hf.state_dict(), **{"distilbert.embeddings.token_type_embeddings.weight": torch.zeros(2, 32)})
    with pytest.raises(UnsupportedModel, match="token_type_embeddings"):
        DistilBert(weights, model.config, "extra")
