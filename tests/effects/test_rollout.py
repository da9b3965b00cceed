"""Attention rollout: identity attention rolls out to the identity; rows sum to 1; two layers by hand."""

import pytest
import torch
from numeric import F64

from probes import runner
from probes.effects import rollout
from probes.tokens import Token
from probes.trace import Trace

pytestmark = pytest.mark.numeric  # rollout is float64: its identities hold to float64 rounding


def _trace(attn):
    n = attn[0].shape[-1]
    tokens = [[Token(str(i), i, i + 1, False) for i in range(n)]]
    return Trace(source="hand", model="hand", tokens=tokens, input_ids=torch.zeros(1, n, dtype=torch.long),
                 attention_mask=torch.ones(1, n, dtype=torch.bool), is_causal=False,
                 hidden_states=[torch.zeros(1, n, 2)] * (len(attn) + 1), attn=attn)


def test_identity_attention_rolls_out_to_the_identity():
    eye = torch.eye(5).expand(1, 3, 5, 5)
    got = rollout.rollout(_trace([eye, eye]))
    assert torch.equal(got, torch.eye(5, dtype=torch.float64).expand(2, 5, 5))


def test_two_layers_by_hand():
    gen = torch.Generator().manual_seed(0)
    attn = [torch.softmax(torch.randn(1, 2, 4, 4, generator=gen, dtype=torch.float64), -1) for _ in range(2)]
    mixed = [0.5 * a[0].mean(0) + 0.5 * torch.eye(4, dtype=torch.float64) for a in attn]  # rows sum to 1 already
    got = rollout.rollout(_trace(attn))
    assert torch.allclose(got[0], mixed[0], atol=F64, rtol=0)
    assert torch.allclose(got[1], mixed[1] @ mixed[0], atol=F64, rtol=0)


def test_every_row_sums_to_one(minilm, smollm2):
    for model in (minilm, smollm2):
        got = rollout.rollout(runner.trace(model, "Xiaoming gave the apple to Xiaohong because she was hungry"))
        assert torch.allclose(got.sum(-1), torch.ones(got.shape[:-1], dtype=torch.float64), atol=F64, rtol=0)
        assert got.shape[0] == model.n_layers
