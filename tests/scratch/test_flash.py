"""The Triton FlashAttention kernel against plain attention. Without CUDA it runs under Triton's
interpreter (conftest sets TRITON_INTERPRET=1); with CUDA the same tests run compiled on the GPU."""

import math

import pytest
import torch

from probes.scratch import flash
from probes.scratch.attention import allowed_keys, attention, repeat_kv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LOW = [torch.float16, torch.bfloat16]


def _inputs(b, h, n, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for _ in range(3))
    mask = torch.ones(b, n, dtype=torch.bool)
    if b > 1:
        mask[-1, max(1, n - 3):] = False  # the last item is padded
    return q, k, v, mask


def _gqa_inputs(b, h, h_kv, n, d, seed=0):
    """q with ``h`` heads, k and v with ``h_kv``; the last item is padded."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g)
    k, v = (torch.randn(b, h_kv, n, d, generator=g) for _ in range(2))
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[-1, n - 3:] = False
    return q, k, v, mask


def _reference(q, k, v, mask, causal, window=None):
    """fp32 (or the inputs' precision) attention, step by step, and the natural-log logsumexp."""
    allowed = allowed_keys(mask, causal, window=window)
    out, _ = attention(q, k, v, allowed)
    k = repeat_kv(k, q.shape[1] // k.shape[1])  # grouped-query: head h reads key/value head h // group
    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return out, lse


def _assert_real_rows_match(out, lse, ref, ref_lse, mask):
    """Output and lse within 1e-5 of the reference on the real (unpadded) query rows."""
    rows = mask[:, None, :].expand_as(ref_lse)
    assert torch.allclose(out.cpu()[rows], ref[rows], atol=1e-5, rtol=0)
    assert torch.allclose(lse.cpu()[rows], ref_lse[rows], atol=1e-5, rtol=0)


@pytest.mark.parametrize("n", [1, 7, 64, 65, 130])
@pytest.mark.parametrize("causal", [False, True])
def test_fp32_matches_attention_and_logsumexp(n, causal):
    q, k, v, mask = _inputs(2, 2, n, 64)
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, v)), causal=causal, key_mask=mask.to(DEVICE))
    ref, ref_lse = _reference(q, k, v, mask, causal)
    real = mask[:, None, :, None].expand_as(ref)
    assert out.dtype == torch.float32 and lse.shape == (2, 2, n)
    assert torch.allclose(out.cpu()[real], ref[real], atol=1e-5, rtol=0)
    assert torch.allclose(lse.cpu()[mask[:, None].expand_as(ref_lse)], ref_lse[mask[:, None].expand_as(ref_lse)],
                          atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, d", [(65, 64), (130, 128)])
def test_half_precision_passes_flashattention_rule(dtype, causal, n, d):
    """Error against an fp32 reference at most 2× that of plain PyTorch attention in the same dtype."""
    q, k, v, mask = _inputs(2, 2, n, d, seed=1)
    ref, _ = _reference(q, k, v, mask, causal)
    low = [t.to(dtype) for t in (q, k, v)]
    plain, _ = attention(*low, allowed_keys(mask, causal))
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in low), causal=causal, key_mask=mask.to(DEVICE))
    assert out.dtype == dtype and lse.dtype == torch.float32
    real = mask[:, None, :, None].expand_as(ref)
    err = (out.cpu().float() - ref)[real].abs().max()
    plain_err = (plain.float() - ref)[real].abs().max()
    assert err <= 2 * plain_err, (float(err), float(plain_err))


def test_logsumexp_is_natural_log():
    q, k, v, mask = _inputs(1, 1, 9, 64)
    _, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE))
    scores = (q @ k.transpose(-2, -1)) / 8.0
    assert torch.allclose(torch.exp(lse.cpu()), torch.exp(scores).sum(-1), rtol=1e-5)  # e, not 2


def test_probabilities_recovered_from_logsumexp():
    q, k, v, mask = _inputs(2, 3, 40, 64)
    _, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), causal=True,
                                   key_mask=mask.to(DEVICE))
    allowed = allowed_keys(mask, True)
    _, probs = attention(q, k, v, allowed)
    scores = (q @ k.transpose(-2, -1)) / 8.0
    recovered = torch.exp(scores - lse.cpu()[..., None]).masked_fill(~allowed, 0.0)
    real = mask[:, None, :, None] & mask[:, None, None, :]
    assert torch.allclose(recovered[real.expand_as(probs)], probs[real.expand_as(probs)], atol=1e-6)


def test_small_blocks_odd_head_width_and_empty_rows():
    q, k, v, mask = _inputs(2, 2, 37, 40)
    mask[1] = False  # an item with no real key at all: output 0, lse -inf
    out, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), key_mask=mask.to(DEVICE),
                                     block_m=16, block_n=16)
    ref, _ = _reference(q[:1], k[:1], v[:1], mask[:1], False)
    assert torch.allclose(out.cpu()[:1], ref, atol=1e-5)
    assert torch.all(out.cpu()[1] == 0) and torch.all(torch.isneginf(lse.cpu()[1]))


def test_bad_inputs_are_refused():
    q, k, v, _ = _inputs(1, 1, 4, 64)
    with pytest.raises(ValueError, match="fp16, bf16, fp32"):
        flash.flash_attention(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match="same length"):
        flash.flash_attention(q, k[:, :, :2], v[:, :, :2], causal=True)


@pytest.mark.parametrize("causal", [False, True])
def test_fp32_head_width_128(causal):
    q, k, v, mask = _inputs(2, 2, 130, 128, seed=2)
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, v)), causal=causal, key_mask=mask.to(DEVICE))
    ref, ref_lse = _reference(q, k, v, mask, causal)
    real = mask[:, None, :, None].expand_as(ref)
    assert torch.allclose(out.cpu()[real], ref[real], atol=1e-5, rtol=0)
    assert torch.allclose(lse.cpu(), ref_lse, atol=1e-5)


@pytest.mark.parametrize("h_kv", [9, 3, 1], ids=lambda g: f"h_kv{g}")  # groups of 1, 3 and 9 query heads
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [37, 70])
def test_grouped_query_matches_attention_and_logsumexp(h_kv, causal, n):
    q, k, v, mask = _gqa_inputs(2, 9, h_kv, n, 16, seed=3)
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, v)), causal=causal, key_mask=mask.to(DEVICE))
    assert out.shape == q.shape and lse.shape == (2, 9, n)
    ref, ref_lse = _reference(q, k, v, mask, causal)
    _assert_real_rows_match(out, lse, ref, ref_lse, mask)


@pytest.mark.parametrize("window", [2, 5, 16])  # 2: the first row's window starts on a block's last key
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("blocks", [(16, 16), (None, None)], ids=["blocks16", "default_blocks"])
def test_sliding_window_matches_attention(window, causal, blocks):
    q, k, v, mask = _gqa_inputs(2, 6, 2, 70, 16, seed=4)
    mask[1, :9] = False  # padded on both sides: with a causal window, its first rows see no real key
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, v)), causal=causal, key_mask=mask.to(DEVICE),
                                     window=window, block_m=blocks[0], block_n=blocks[1])
    ref, ref_lse = _reference(q, k, v, mask, causal, window)
    _assert_real_rows_match(out, lse, ref, ref_lse, mask)
    empty = ~allowed_keys(mask, causal, window=window).any(-1).expand_as(ref_lse)  # rows with no allowed key
    assert bool(empty.any()) or not causal
    assert torch.all(out.cpu()[empty] == 0) and torch.all(torch.isneginf(lse.cpu()[empty]))


@pytest.mark.parametrize("window", [5, 16, 17])  # 17: with blocks of 16, skipping one block more
@pytest.mark.parametrize("block", [16, 32])
def test_sliding_window_skips_blocks_before_it(window, block):
    """Values before key 32 are NaN: a query block whose window starts at or after key 32 must never
    load them (a masked key still multiplies its value by 0, and 0 · NaN is NaN)."""
    q, k, v, mask = _gqa_inputs(1, 4, 2, 70, 16, seed=5)
    poisoned = v.clone()
    poisoned[:, :, :32] = float("nan")
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, poisoned)), causal=True,
                                     key_mask=mask.to(DEVICE), window=window, block_m=block, block_n=block)
    ref, ref_lse = _reference(q, k, v, mask, True, window)
    later = 48 if block == 16 else 64  # the first query block whose window lies wholly after key 31
    assert torch.all(torch.isnan(out.cpu()[:, :, :16]))  # early rows do read the poisoned values
    assert torch.allclose(out.cpu()[:, :, later:], ref[:, :, later:], atol=1e-5, rtol=0)
    assert torch.allclose(lse.cpu()[:, :, later:], ref_lse[:, :, later:], atol=1e-5, rtol=0)


def test_probabilities_recovered_with_window_and_grouped_heads():
    q, k, v, mask = _gqa_inputs(2, 4, 2, 40, 16, seed=6)
    _, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), causal=True, key_mask=mask.to(DEVICE),
                                   window=7, block_m=16, block_n=16)
    allowed = allowed_keys(mask, True, window=7)
    _, probs = attention(q, k, v, allowed)
    scores = (q @ repeat_kv(k, 2).transpose(-2, -1)) / 4.0
    recovered = torch.exp(scores - lse.cpu()[..., None]).masked_fill(~allowed, 0.0)
    real = (mask[:, None, :, None] & mask[:, None, None, :]).expand_as(probs)
    assert torch.allclose(recovered[real], probs[real], atol=1e-6)


def test_bad_heads_and_window_are_refused():
    q, k, v, _ = _gqa_inputs(1, 4, 3, 8, 16)
    with pytest.raises(ValueError, match="H_kv must divide H"):
        flash.flash_attention(q, k, v)
    q, k, v, _ = _gqa_inputs(1, 4, 2, 8, 16)
    for window in (0, -3):
        with pytest.raises(ValueError, match="sliding window"):
            flash.flash_attention(q, k, v, causal=True, window=window)
    with pytest.raises(ValueError, match="batch and head width"):
        flash.flash_attention(q, k[:, :, :, :8], v[:, :, :, :8])
