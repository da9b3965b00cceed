"""Multi-head scaled dot-product attention, one named step per line of the formula

    Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k) · V

Inputs are already split into heads: ``q``, ``k``, ``v`` are ``[B, H, L, d_k]``.

Three backends compute it:

* ``eager``: :func:`attention`, the formula step by step; it materialises the probabilities
  (``[B, H, L, L]`` per layer), which is what parity and short inputs use;
* ``sdpa``: torch's fused ``scaled_dot_product_attention`` kernels for the output and the logsumexp
  of each row, so the probabilities can be recovered later;
* ``flash``: our Triton FlashAttention kernel (``flash.py``), which returns output and logsumexp in
  one pass; it needs CUDA (or Triton's interpreter), else the ``sdpa`` backend runs instead and says so.
"""

from __future__ import annotations

import math

import torch

BACKENDS = ("eager", "sdpa", "flash")


def allowed_keys(attention_mask: torch.Tensor, causal: bool, rows: slice | None = None) -> torch.Tensor:
    """Which keys each query may look at: ``[B, 1, r, L]`` bool (``r`` = 1 when no causal mask is needed,
    broadcasting over all query rows; else the query rows ``rows``, default all).

    A key is allowed when it is a real token (not padding) and, for a causal model, not in the future.
    """
    real_keys = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, L]
    if not causal:
        return real_keys
    n = attention_mask.shape[-1]
    query = torch.arange(n, device=attention_mask.device)[rows if rows is not None else slice(None)]
    past_or_present = torch.arange(n, device=attention_mask.device)[None, :] <= query[:, None]  # [r, L]
    return real_keys & past_or_present


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
              scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager backend: ``(output [B, H, L, d_k], probabilities [B, H, L, L])``.

    ``scale`` defaults to 1/√d_k; GPT-2 configs can change it (see ``gpt2.py``). The scaling and the
    mask work in place on the fresh score tensor: the same numbers, two fewer [B, H, L, L] copies.
    """
    d_k = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)

    scores = q @ k.transpose(-2, -1)  # q·kᵀ: one raw score per (query, key)
    scores.mul_(scale)  # ÷ √d_k, so the scores' spread does not grow with the head width
    scores.masked_fill_(~allowed, torch.finfo(scores.dtype).min)  # mask: padding and the future
    probs = torch.softmax(scores, dim=-1)  # softmax over keys: each row sums to 1
    output = probs @ v  # · v: each query's weighted sum of the values
    return output, probs


def by_rows(fn, x: torch.Tensor, chunk: int | None) -> torch.Tensor:
    """Apply a position-wise ``fn`` (the MLP) to ``[B, L, D]`` ``chunk`` positions at a time, so its
    wide hidden layer is never allocated for a whole long input at once (``None``: all at once)."""
    n = x.shape[1]
    if chunk is None or n <= chunk:
        return fn(x)
    return torch.cat([fn(x[:, i:i + chunk]) for i in range(0, n, chunk)], dim=1)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[B, L, H·d]`` -> ``[B, H, L, d]``."""
    b, n, width = x.shape
    return x.view(b, n, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, L, d]`` -> ``[B, L, H·d]``: the heads side by side again, ready for the output projection."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


def row_logsumexp(q: torch.Tensor, k: torch.Tensor, attention_mask: torch.Tensor, causal: bool, scale: float,
                  block: int = 256) -> torch.Tensor:
    """Natural-log logsumexp of each query row's scaled, masked scores, ``[B, H, L]``, computed
    ``block`` rows at a time so the full L×L scores never exist. Rows with no allowed key get −inf."""
    n = q.shape[-2]
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    for start in range(0, n, block):
        rows = slice(start, min(n, start + block))
        scores = (q[..., rows, :] @ k.transpose(-2, -1)).mul_(scale)
        scores.masked_fill_(~allowed_keys(attention_mask, causal, rows), float("-inf"))
        lse[..., rows] = torch.logsumexp(scores.float(), dim=-1)
    return lse


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention_mask: torch.Tensor,
                   causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, str]:
    """torch's fused attention: ``(output, logsumexp [B, H, L], name of the kernel that ran)``.

    On the CPU this calls SDPA's own flash kernel, which hands back the logsumexp it computed anyway.
    On CUDA the FLASH_ATTENTION kernel is pinned when eligible (half precision, no padding), then
    memory-efficient, then math; the logsumexp then comes from :func:`row_logsumexp`.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    padded = not bool(attention_mask.bool().all())
    if q.device.type == "cpu" and q.dtype in (torch.float32, torch.float16, torch.bfloat16):
        bias = None
        if padded:  # additive key mask, broadcast over heads and query rows (causality is the kernel's)
            bias = torch.zeros(attention_mask.shape, dtype=q.dtype, device=q.device)
            bias.masked_fill_(~attention_mask.bool(), torch.finfo(q.dtype).min)
            bias = bias[:, None, None, :]
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=bias, scale=scale)
        return out, lse, "flash_attention_cpu"
    if not padded:
        kwargs = dict(is_causal=causal)  # the kernels' own causal mask, no L×L mask tensor
    else:
        kwargs = dict(attn_mask=allowed_keys(attention_mask, causal))
    last_error = None
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel([backend]):
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, **kwargs)
        except RuntimeError as exc:  # not eligible for this kernel: try the next one
            last_error = exc
            continue
        return out, row_logsumexp(q, k, attention_mask, causal, scale), backend.name.lower()
    raise RuntimeError(f"no scaled_dot_product_attention kernel could run: {last_error}")
