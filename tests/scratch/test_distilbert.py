"""What is DistilBERT's own (BERT's network under DistilBERT's names, no token types; its parity against Hugging Face,
option by option, the masked-LM head included, and its refusals are the conformance suite's:
``test_conformance.py``, with how a pair is encoded): sinusoidal positions are the table Hugging Face reads."""

import pytest
import torch
from scratch.conformance import built
from transformers.models.distilbert.modeling_distilbert import create_sinusoidal_embeddings

from probes.scratch.distilbert import DistilBert

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_sinusoidal_positions_are_the_table_hugging_face_reads(family_model):
    model = family_model("distilbert", "sinusoidal-masked-lm")
    table = model.hf.get_position_embeddings().weight
    expected = create_sinusoidal_embeddings(table.shape[0], table.shape[1], torch.empty_like(table))
    assert torch.equal(table, expected)  # sin/cos, not learned: what the network reads
    assert torch.equal(built(model, DistilBert).position, table)
