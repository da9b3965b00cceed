"""What is BERT's own (its parity against Hugging Face, option by option, with and without sentence pairs, a decoder
BERT causal, how a pair is encoded, and its refusals are the conformance suite's: ``test_conformance.py``): token
types matter."""

import pytest
import torch

import probes
from probes import hf, parity, scratch

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_token_types_matter(bert_dir):
    """Sentence pairs use token-type embeddings: dropping them changes the scratch result."""
    model = probes.load(str(bert_dir))
    enc = model.encode("first sentence", "second sentence")
    assert enc.token_type_ids is not None and enc.token_type_ids.sum() > 0
    reference = hf.forward(model, enc)
    assert parity.compare(reference, scratch.forward(model, enc)).passed
    enc.token_type_ids = torch.zeros_like(enc.token_type_ids)
    assert not parity.compare(reference, scratch.forward(model, enc)).passed
