"""FlashAttention forward in Triton, written from scratch: the output and the logsumexp, never the
L×L matrix.

For each block of query rows the kernel walks over the keys block by block, keeping per row a running
maximum ``m``, a running sum ``l`` of exp(score − m) and an fp32 accumulator of exp(score − m)·v
(the "online softmax"): when a new block raises the maximum, what was summed so far is rescaled by
exp(m_old − m_new). At the end ``output = acc / l`` and ``lse = m + log(l)``, the natural-log
logsumexp of each row's scaled, masked scores. From q, k and lse any probability is recovered exactly
as ``P = exp(q·kᵀ·scale − lse)`` (``Trace.attention`` does that for a lazy trace).

Grouped-query attention: ``k`` and ``v`` may have fewer heads than ``q`` (``H_kv`` dividing ``H``); query
head ``h`` reads key/value head ``h // (H / H_kv)``, an index inside the kernel (k and v are never
repeated in memory). ``H_kv = 1`` is multi-query attention, ``H_kv = H`` plain multi-head attention.

Masks: causal (key after query), key padding (a ``[B, L]`` mask of real tokens) and a sliding window
of ``w``: keys fewer than ``w`` positions from the query (``in_window`` in ``probes.attention_math``), so with the
causal mask the query itself and the ``w − 1`` positions before it, and without it (an encoder: ModernBERT's local
layers) ``w − 1`` positions on either side. Key blocks wholly before the window of every row of a query block are
skipped, as are blocks wholly in the future under the causal mask, or wholly after the window without it. A row
whose keys are all masked gets output 0 and lse −inf. Any sequence length works (boundary blocks are masked); any
head width up to 256 (padded to a power of two inside the kernel); fp16, bf16 and fp32 inputs (fp32 uses IEEE
products, not TF32). On a machine without CUDA the kernel runs only under Triton's interpreter
(``TRITON_INTERPRET=1``), which is how the tests exercise it.
"""

from __future__ import annotations

import math
import os

import torch

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def interpreting() -> bool:
    """Is Triton's CPU interpreter switched on (``TRITON_INTERPRET=1``)?"""
    return os.environ.get("TRITON_INTERPRET") == "1"


def available() -> bool:
    """Can the kernel run here? On CUDA, or on the CPU under ``TRITON_INTERPRET=1``."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available() or interpreting()


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def flash_forward(
        Q, K, V, Out, LSE, KEEP,
        sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod, slb, slh, slm, smb, smn,
        H, M, N, D, GROUP, WINDOW, qk_scale,
        CAUSAL: tl.constexpr, HAS_KEEP: tl.constexpr, HAS_WINDOW: tl.constexpr, PRECISION: tl.constexpr,
        UPCAST: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        start_m = tl.program_id(0)
        bh = tl.program_id(1)
        b = bh // H
        h = bh % H
        hk = h // GROUP  # grouped-query: the key/value head this query head reads
        rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, BLOCK_D)
        q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + dims[None, :] * sqd,
                    mask=(rows[:, None] < M) & (dims[None, :] < D), other=0.0)
        if UPCAST:  # exact: every bf16 value is an fp32 value; the products then accumulate in fp32
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max, in log2 units
        l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(score - m_i)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # running sum of exp2(score - m_i) · v
        start = 0
        if HAS_WINDOW:  # blocks wholly before the window of the block's first row are skipped
            start = tl.maximum(start_m * BLOCK_M - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
        end = N
        if CAUSAL:
            end = tl.minimum(N, (start_m + 1) * BLOCK_M)  # blocks wholly in the future are skipped
        elif HAS_WINDOW:  # an encoder's window reaches forward too: blocks wholly after it are skipped
            end = tl.minimum(N, (start_m + 1) * BLOCK_M + WINDOW - 1)
        for start_n in range(start, end, BLOCK_N):
            cols = start_n + tl.arange(0, BLOCK_N)
            kt = tl.load(K + b * skb + hk * skh + cols[None, :] * skn + dims[:, None] * skd,
                         mask=(cols[None, :] < N) & (dims[:, None] < D), other=0.0)
            if UPCAST:
                kt = kt.to(tl.float32)
            s = tl.dot(q, kt, input_precision=PRECISION) * qk_scale  # q·kᵀ ÷ √d_k, times log2(e)
            allowed = (cols[None, :] < N) & (rows[:, None] >= 0)
            if CAUSAL:
                allowed = allowed & (cols[None, :] <= rows[:, None])
            if HAS_WINDOW:
                allowed = allowed & (cols[None, :] > rows[:, None] - WINDOW)  # fewer than WINDOW positions back
                if not CAUSAL:
                    allowed = allowed & (cols[None, :] < rows[:, None] + WINDOW)  # … nor ahead (an encoder)
            if HAS_KEEP:
                keep = tl.load(KEEP + b * smb + cols * smn, mask=cols < N, other=0)
                allowed = allowed & (keep[None, :] != 0)
            s = tl.where(allowed, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing allowed yet
            p = tl.exp2(s - m_safe[:, None])
            alpha = tl.exp2(m_i - m_safe)  # rescales what was summed under the old maximum
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + b * svb + hk * svh + cols[:, None] * svn + dims[None, :] * svd,
                        mask=(cols[:, None] < N) & (dims[None, :] < D), other=0.0)
            p_v = p.to(V.dtype.element_ty)  # probabilities rounded to the input dtype, as on the GPU
            if UPCAST:
                p_v = p_v.to(tl.float32)
                v = v.to(tl.float32)
            acc = acc * alpha[:, None] + tl.dot(p_v, v, input_precision=PRECISION)
            m_i = m_new
        empty = l_i == 0.0
        out = acc / tl.where(empty, 1.0, l_i)[:, None]
        lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
        tl.store(Out + b * sob + h * soh + rows[:, None] * som + dims[None, :] * sod, out.to(Out.dtype.element_ty),
                 mask=(rows[:, None] < M) & (dims[None, :] < D))
        tl.store(LSE + b * slb + h * slh + rows * slm, lse, mask=rows < M)

    # on the GPU the block shape is tuned per (length, head width); the interpreter takes one shape
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=st)
               for bm, bn, w, st in [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 32, 4, 4),
                                     (64, 64, 4, 3), (64, 128, 4, 3)]]
    key = ["M", "N", "D", "GROUP", "WINDOW", "CAUSAL", "HAS_KEEP", "HAS_WINDOW"]  # retuned when any changes
    tuned = triton.autotune(configs=configs, key=key)(flash_forward)
    _KERNEL = {"fixed": flash_forward, "tuned": tuned}
    return _KERNEL


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    key_mask: torch.Tensor | None = None, scale: float | None = None, window: int | None = None,
                    block_m: int | None = None, block_n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention forward. ``q``: ``[B, H, M, D]``, ``k``/``v``: ``[B, H_kv, N, D]`` with ``H_kv``
    dividing ``H`` (same dtype, one of fp16, bf16, fp32); ``key_mask``: ``[B, N]``, nonzero for real keys;
    ``window``: a sliding window of that many positions (the query and the ``window − 1`` before it; without
    ``causal``, the ``window − 1`` after it too).
    Returns ``(output [B, H, M, D]`` in the input dtype, ``lse [B, H, M]`` fp32, natural log).
    ``block_m``/``block_n`` fix the tile shape (on CUDA it is otherwise autotuned)."""
    if not available():
        raise RuntimeError("the Triton kernel needs CUDA (or TRITON_INTERPRET=1 for the CPU interpreter)")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one of fp16, bf16, fp32 (got {q.dtype}, {k.dtype}, {v.dtype})")
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"q must be [B, H, M, D] and k, v one [B, H_kv, N, D] shape (got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)})")
    b, h, m, d = q.shape
    h_kv, n = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k and v must have q's batch and head width (got {tuple(k.shape)} for q {tuple(q.shape)})")
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"{h} query heads cannot share {h_kv} key/value heads evenly: H_kv must divide H")
    if d > 256:
        raise ValueError(f"head width {d} is over the kernel's 256")
    if causal and m != n:
        raise ValueError("causal attention here is self-attention: queries and keys must have the same length")
    if window is not None:
        if window < 1:
            raise ValueError(f"a sliding window must hold at least one position (got {window})")
        if m != n:
            raise ValueError("a sliding window here is self-attention: queries and keys must have the same length")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    lse = torch.empty((b, h, m), dtype=torch.float32, device=q.device)
    keep = key_mask.to(torch.int32).contiguous() if key_mask is not None else torch.ones(1, 1, dtype=torch.int32,
                                                                                          device=q.device)
    block_d = max(16, 1 << (d - 1).bit_length())
    # Triton's CPU interpreter gets tl.dot on bf16 wrong, so there the bf16 values are widened to fp32
    # first (exactly) and multiplied in IEEE fp32: the same sums a GPU forms with fp32 accumulation
    upcast = q.dtype == torch.bfloat16 and not q.is_cuda
    precision = "ieee" if q.dtype == torch.float32 or upcast else "tf32"
    args = (q, k, v, out, lse, keep,
            *q.stride(), *k.stride(), *v.stride(), *out.stride(), *lse.stride(), *keep.stride(),
            h, m, n, d, h // h_kv, min(window, n) if window is not None else n, scale * LOG2E)
    flags = dict(CAUSAL=causal, HAS_KEEP=key_mask is not None, HAS_WINDOW=window is not None, PRECISION=precision,
                 UPCAST=upcast, BLOCK_D=block_d)
    if q.is_cuda and block_m is None and block_n is None:
        _kernel()["tuned"][lambda meta: (math.ceil(m / meta["BLOCK_M"]), b * h)](*args, **flags)
    else:
        block_m, block_n = block_m or (64 if q.is_cuda else 32), block_n or (64 if q.is_cuda else 32)
        _kernel()["fixed"][(math.ceil(m / block_m), b * h)](*args, **flags, BLOCK_M=block_m, BLOCK_N=block_n)
    return out, lse
