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


@pytest.mark.numeric
@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_a_window_is_one_sided_in_a_decoder_and_symmetric_in_an_encoder(window):
    """A window of w keeps the keys fewer than w positions from the query: in a decoder the query and the w − 1
    before it (Mistral), in an encoder w − 1 on either side (ModernBERT's local layers). Outside, the weights are
    exactly 0; every row sums to 1; padding stays masked."""
    n = 9
    mask = torch.tensor([[1] * (n - 2) + [0, 0]])
    q, k, v = (torch.randn(1, 2, n, 4, generator=torch.Generator().manual_seed(i)) for i in range(3))
    query, key = torch.arange(n)[:, None], torch.arange(n)[None, :]
    for causal, inside in ((True, (key <= query) & (key > query - window)), (False, (key - query).abs() < window)):
        allowed = allowed_keys(mask, causal, window=window)
        expected = inside & mask.bool()[0][None, :]
        assert torch.equal(allowed[0, 0], expected)
        _, probs = attention(q, k, v, allowed)
        real = probs[0][:, : n - 2]  # the real queries' rows (a padding query's row may have no key to see)
        assert (real[:, ~expected[: n - 2]] == 0).all() and (real[:, expected[: n - 2]] > 0).all()
        assert torch.allclose(probs.sum(-1), torch.ones(1, 2, n), atol=fp32(n), rtol=0)
    assert torch.equal(allowed_keys(mask, False, rows=slice(3, 5), window=window)[0, 0], expected[3:5])


def test_split_and_merge_heads_round_trip():
    x = torch.randn(2, 3, 12)
    assert torch.equal(merge_heads(split_heads(x, 4)), x)
    assert split_heads(x, 4).shape == (2, 4, 3, 3)
