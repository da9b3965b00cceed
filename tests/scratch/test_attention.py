import math

import pytest
import torch
from numeric import F64, fp32

from probes.scratch.attention import allowed_keys, attention, merge_heads, split_heads


@pytest.mark.numeric
def test_attention_follows_the_formula_step_by_step():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64) for _ in range(3))
    allowed = allowed_keys(torch.ones(1, 5), causal=False)
    out, probs = attention(q, k, v, allowed)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(8)
    expected = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
    assert torch.allclose(probs, expected, atol=F64, rtol=0)
    assert torch.allclose(out, expected @ v, atol=F64, rtol=0)


@pytest.mark.numeric
def test_masks_hide_padding_and_the_future():
    mask = torch.tensor([[1, 1, 1, 0]])
    allowed = allowed_keys(mask, causal=True)
    q = k = v = torch.randn(1, 1, 4, 4)
    _, probs = attention(q, k, v, allowed)
    assert torch.all(probs[0, 0, :3, 3] == 0)
    assert torch.all(torch.triu(probs[0, 0, :3, :3], diagonal=1) == 0)
    assert torch.allclose(probs.sum(-1), torch.ones(1, 1, 4), atol=fp32(4), rtol=0)  # 4 fp32 terms summed


def test_split_and_merge_heads_round_trip():
    x = torch.randn(2, 3, 12)
    assert torch.equal(merge_heads(split_heads(x, 4)), x)
    assert split_heads(x, 4).shape == (2, 4, 3, 3)
