"""The Triton FlashAttention kernel against plain attention. Without CUDA it runs under Triton's
interpreter (conftest sets TRITON_INTERPRET=1); with CUDA the same tests run compiled on the GPU."""

import math

import numeric
import pytest
import torch

from probes.scratch import flash
from probes.scratch.attention import allowed_keys, attention, repeat_kv

pytestmark = pytest.mark.numeric
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
    """Attention, step by step, and the natural-log logsumexp, in the inputs' precision (float64 inputs: the
    exact reference)."""
    allowed = allowed_keys(mask, causal, window=window)
    out, _ = attention(q, k, v, allowed)
    k = repeat_kv(k, q.shape[1] // k.shape[1])  # grouped-query: head h reads key/value head h // group
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return out, lse


PLAIN = 4  # the kernel's fp32 error may be this many times plain attention's (measured ≤ 1.6×; see below)


def _assert_real_rows_match(out, lse, q, k, v, mask, causal, window=None, rows=slice(None)):
    """On the real (unpadded) query rows ``rows``: the kernel's output and lse are as close to the float64 truth as
    plain fp32 attention's are (within PLAIN× its error: both sum the same terms in fp32, in other orders). The
    FlashAttention paper's rule for half precision is 2×; fp32's errors are smaller and noisier, hence 4."""
    exact, exact_lse = _reference(q.double(), k.double(), v.double(), mask, causal, window)
    plain, plain_lse = _reference(q, k, v, mask, causal, window)
    real = mask[:, None, :].expand_as(exact_lse)[..., rows]
    err = lambda got, want: (got.cpu().double() - want)[..., rows, :].abs().amax(-1)[real]  # noqa: E731
    lse_err = lambda got: (got.cpu().double() - exact_lse)[..., rows][real].abs()  # noqa: E731
    assert err(out, exact).max() <= PLAIN * err(plain, exact).max() + numeric.fp32(1)
    assert lse_err(lse).max() <= PLAIN * lse_err(plain_lse).max() + numeric.fp32(1)


@pytest.mark.parametrize("n", [1, 7, 64, 65, 130])
@pytest.mark.parametrize("causal", [False, True])
def test_fp32_matches_attention_and_logsumexp(n, causal):
    q, k, v, mask = _inputs(2, 2, n, 64)
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, v)), causal=causal, key_mask=mask.to(DEVICE))
    assert out.dtype == torch.float32 and lse.shape == (2, 2, n)
    _assert_real_rows_match(out, lse, q, k, v, mask, causal)


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n, d", [(65, 64), (130, 128)])
def test_half_precision_passes_flashattention_rule(dtype, causal, n, d):
    """Error against an fp32 reference at most 2× that of plain PyTorch attention in the same dtype."""
    q, k, v, mask = _inputs(2, 2, n, d, seed=1)
    ref, _ = _reference(q, k, v, mask, causal)
    low = (q.to(dtype), k.to(dtype), v.to(dtype))
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
    # e, not 2 (a base-2 lse would be off by a factor ln 2); fp32 exp of a 9-term sum: eps × 9, relative
    assert torch.allclose(torch.exp(lse.cpu()), torch.exp(scores).sum(-1), rtol=numeric.fp32(2 * 9), atol=0)


def test_probabilities_recovered_from_logsumexp():
    q, k, v, mask = _inputs(2, 3, 40, 64)
    _, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), causal=True,
                                   key_mask=mask.to(DEVICE))
    allowed = allowed_keys(mask, True)
    _assert_recovered(q, k, lse, mask, allowed)


def _assert_recovered(q, k, lse, mask, allowed):
    """exp(q·kᵀ·scale − lse) from the kernel's lse: the probabilities, as close to the float64 truth as plain fp32
    attention's (within PLAIN× its error)."""
    k = repeat_kv(k, q.shape[1] // k.shape[1])
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    recovered = torch.exp(scores - lse.cpu()[..., None]).masked_fill(~allowed, 0.0)
    _, plain = attention(q, k, k, allowed)
    _, exact = attention(q.double(), k.double(), k.double(), allowed)
    real = (mask[:, None, :, None] & mask[:, None, None, :]).expand_as(exact)
    err = lambda p: (p.double() - exact)[real].abs().max()  # noqa: E731
    assert err(recovered) <= PLAIN * err(plain) + numeric.fp32(1)


def test_small_blocks_odd_head_width_and_empty_rows():
    q, k, v, mask = _inputs(2, 2, 37, 40)
    mask[1] = False  # an item with no real key at all: output 0, lse -inf
    out, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), key_mask=mask.to(DEVICE),
                                     block_m=16, block_n=16)
    _assert_real_rows_match(out[:1], lse[:1], q[:1], k[:1], v[:1], mask[:1], False)
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
    _assert_real_rows_match(out, lse, q, k, v, mask, causal)


@pytest.mark.parametrize("h_kv", [9, 3, 1], ids=lambda g: f"h_kv{g}")  # groups of 1, 3 and 9 query heads
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [37, 70])
def test_grouped_query_matches_attention_and_logsumexp(h_kv, causal, n):
    q, k, v, mask = _gqa_inputs(2, 9, h_kv, n, 16, seed=3)
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, v)), causal=causal, key_mask=mask.to(DEVICE))
    assert out.shape == q.shape and lse.shape == (2, 9, n)
    _assert_real_rows_match(out, lse, q, k, v, mask, causal)


@pytest.mark.parametrize("window", [2, 5, 16])  # 2: the first row's window starts on a block's last key
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("blocks", [(16, 16), (None, None)], ids=["blocks16", "default_blocks"])
def test_sliding_window_matches_attention(window, causal, blocks):
    q, k, v, mask = _gqa_inputs(2, 6, 2, 70, 16, seed=4)
    mask[1, :9] = False  # padded on both sides: with a causal window, its first rows see no real key
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, v)), causal=causal, key_mask=mask.to(DEVICE),
                                     window=window, block_m=blocks[0], block_n=blocks[1])
    _assert_real_rows_match(out, lse, q, k, v, mask, causal, window)
    empty = ~allowed_keys(mask, causal, window=window).any(-1).expand_as(lse)  # rows with no allowed key
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
    later = 48 if block == 16 else 64  # the first query block whose window lies wholly after key 31
    assert torch.all(torch.isnan(out.cpu()[:, :, :16]))  # early rows do read the poisoned values
    _assert_real_rows_match(out, lse, q, k, v, mask, True, window, rows=slice(later, None))


@pytest.mark.parametrize("window", [5, 17])
def test_an_encoders_window_skips_blocks_after_it(window):
    """Without the causal mask the window reaches forward too (ModernBERT's local layers): values from key 48 on are
    NaN, so a query block whose window ends before key 48 must never load them, and matches plain attention."""
    q, k, v, mask = _gqa_inputs(1, 4, 2, 70, 16, seed=7)
    mask[:] = True
    poisoned = v.clone()
    poisoned[:, :, 48:] = float("nan")
    out, lse = flash.flash_attention(*(t.to(DEVICE) for t in (q, k, poisoned)), causal=False,
                                     key_mask=mask.to(DEVICE), window=window, block_m=16, block_n=16)
    clean = 32  # the query blocks (of 16) whose window ends before key 48: without the skip they would read NaN
    assert torch.all(torch.isnan(out.cpu()[:, :, 48:]))  # late rows do read the poisoned values
    _assert_real_rows_match(out, lse, q, k, v, mask, False, window, rows=slice(0, clean))
    _, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), causal=False, key_mask=mask.to(DEVICE),
                                   window=window, block_m=16, block_n=16)
    _assert_recovered(q, k, lse, mask, allowed_keys(mask, False, window=window))


def test_probabilities_recovered_with_window_and_grouped_heads():
    q, k, v, mask = _gqa_inputs(2, 4, 2, 40, 16, seed=6)
    _, lse = flash.flash_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), causal=True, key_mask=mask.to(DEVICE),
                                   window=7, block_m=16, block_n=16)
    _assert_recovered(q, k, lse, mask, allowed_keys(mask, True, window=7))


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
