"""Multi-head scaled dot-product attention, one named step per line of the formula

    Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k) · V

Inputs are already split into heads: ``q``, ``k``, ``v`` are ``[B, H, L, d_k]``.
"""

from __future__ import annotations

import math

import torch

BACKENDS = ("eager",)


def allowed_keys(attention_mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Which keys each query may look at: ``[B, 1, L, L]`` bool.

    A key is allowed when it is a real token (not padding) and, for a causal model, not in the future.
    """
    real_keys = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, L]
    if not causal:
        return real_keys
    n = attention_mask.shape[-1]
    past_or_present = torch.ones(n, n, dtype=torch.bool, device=attention_mask.device).tril()
    return real_keys & past_or_present


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
              scale: float | None = None, backend: str = "eager") -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(output [B, H, L, d_k], probabilities [B, H, L, L])``.

    ``scale`` defaults to 1/√d_k; GPT-2 configs can change it (see ``gpt2.py``). The scaling and the
    mask work in place on the fresh score tensor: the same numbers, two L×L copies fewer per head.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    d_k = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)

    scores = q @ k.transpose(-2, -1)  # q·kᵀ: one raw score per (query, key)
    scores.mul_(scale)  # ÷ √d_k, so the scores' spread does not grow with the head width
    scores.masked_fill_(~allowed, torch.finfo(scores.dtype).min)  # mask: padding and the future
    probs = torch.softmax(scores, dim=-1)  # softmax over keys: each row sums to 1
    output = probs @ v  # · v: each query's weighted sum of the values
    return output, probs


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``[B, L, H·d]`` -> ``[B, H, L, d]``."""
    b, n, width = x.shape
    return x.view(b, n, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, L, d]`` -> ``[B, L, H·d]``: the heads side by side again, ready for the output projection."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)
