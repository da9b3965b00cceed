"""Multi-head scaled dot-product attention, one named step per line of the formula

    Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k) · V

Inputs are already split into heads: ``q`` is ``[B, H, L, d_k]``; ``k`` and ``v`` are ``[B, H_kv, L, d_k]``
where ``H_kv`` divides ``H`` (grouped-query attention). The rules every pass shares (which keys a query may
see, grouped key/value heads, one logsumexp per row: :class:`~probes.attention_math.Spec`,
:func:`~probes.attention_math.allowed_keys`, :func:`~probes.attention_math.repeat_kv`,
:func:`~probes.attention_math.row_logsumexp`) live one floor down, in :mod:`probes.attention_math`, because the
Hugging Face producer and the Trace use them too.

The backends, one visible table (:data:`BACKENDS`; the CLI, the app's URL state and its sidebar
read its keys):

* ``eager``: :func:`attention`, the formula step by step; it materialises the probabilities
  (``[B, H, L, L]`` per layer), which is what parity and short inputs use;
* ``sdpa``: torch's fused ``scaled_dot_product_attention`` kernels for the output and the logsumexp
  of each row, so the probabilities can be recovered later;
* ``flash``: our Triton FlashAttention kernel (``flash.py``), which returns output and logsumexp in
  one pass; it needs CUDA (or Triton's interpreter), else the ``sdpa`` backend runs instead and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..attention_math import Spec, additive_mask, allowed_keys, group_of, repeat_kv, row_logsumexp, soft_cap
from ..errors import BadOption
from . import flash as flash_kernel


@dataclass
class Attended:
    """What a backend hands back for one layer: the output ``[B, H, L, d]`` and either every
    probability (``probs``, eager) or the logsumexp of each row (``lse``, the lazy backends)."""

    output: torch.Tensor
    probs: torch.Tensor | None = None
    lse: torch.Tensor | None = None
    kernel: str = ""


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
              scale: float | None = None, scores_hook: Callable[[torch.Tensor], torch.Tensor] | None = None,
              pattern_hook: Callable[[torch.Tensor], torch.Tensor] | None = None,
              softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The eager backend: ``(output [B, H, L, d_k], probabilities [B, H, L, L])``.

    ``allowed`` is the key mask (:func:`allowed_keys`), or the same already turned into numbers to add
    (:func:`additive_mask`, which a forward pass builds once for all its layers). ``scale`` defaults to
    1/√d_k; GPT-2 configs can change it (see ``gpt2.py``). The scaling and the mask work in place on the
    fresh score tensor, and the softmax writes over the scores: the same numbers, three fewer [B, H, L, L]
    tensors; the mask is ``[B, 1, L, L]``, broadcast over the heads, cheaper than filling every head's
    scores.

    ``scores_hook``, ``pattern_hook``: the hook points ``attn.scores`` and ``attn.pattern``
    (:mod:`probes.scratch.hooks`), each ``x -> the x to go on with``; where the scores are hooked the softmax gets a
    tensor of its own (a hook may keep the scores). ``softcap`` (Gemma 2): the scaled scores become
    cap·tanh(s / cap) before the mask, as in Hugging Face; the ``attn.scores`` point sees them after the cap and the
    mask.
    """
    d_k = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)

    group = group_of(q, k)
    k, v = repeat_kv(k, group), repeat_kv(v, group)  # grouped-query: head h reads key/value head h // group
    scores = q @ k.transpose(-2, -1)  # q·kᵀ: one raw score per (query, key)
    scores.mul_(scale)  # ÷ √d_k, so the scores' spread does not grow with the head width
    scores = soft_cap(scores, softcap)  # Gemma 2: cap·tanh(s / cap), every score inside (−cap, cap)
    mask = allowed if allowed.is_floating_point() else additive_mask(allowed, scores.dtype)
    scores.add_(mask)  # mask: padding, the future, outside the window (0 where allowed, the lowest value where not)
    if scores_hook is not None:
        scores = scores_hook(scores)
    if torch.is_grad_enabled() or scores_hook is not None:  # autograd (head gates) or a hook keeps the scores:
        probs = torch.softmax(scores, dim=-1)  # the softmax gets its own tensor
    else:
        probs = torch.softmax(scores, dim=-1, dtype=scores.dtype, out=scores)  # softmax over keys: rows sum to 1
    if pattern_hook is not None:
        probs = pattern_hook(probs)
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


# -- the backends: (q, k, v, attention_mask [B, L], spec, allowed=None) -> Attended; only eager reads a
# prebuilt `allowed` (the others take it to keep one signature)

def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention_mask: torch.Tensor, spec: Spec,
          allowed: torch.Tensor | None = None) -> Attended:
    """The formula step by step (:func:`attention`); ``allowed`` (the key mask, or its additive form) may
    be passed in when the caller already built it for an earlier layer with the same rule."""
    if allowed is None:
        allowed = allowed_keys(attention_mask, spec.causal, window=spec.window)
    out, probs = attention(q, k, v, allowed, scale=spec.scale, softcap=spec.softcap)
    return Attended(out, probs=probs, kernel="eager")


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention_mask: torch.Tensor, spec: Spec,
         allowed: torch.Tensor | None = None) -> Attended:
    """torch's fused attention, with the logsumexp of each row beside the output.

    On the CPU this calls SDPA's own flash kernel, which hands back the logsumexp it computed anyway.
    On CUDA the FLASH_ATTENTION kernel is pinned when eligible (half precision, no padding, no window),
    then memory-efficient, then math; the logsumexp then comes from :func:`row_logsumexp`. Grouped
    key/value heads are repeated for their query heads first (no fused kernel here takes them as they
    are); a sliding window is passed as a mask.

    No fused kernel can soft-cap its scores (Gemma 2's ``attn_logit_softcapping``): a soft-capped layer runs the
    formula (:func:`attention`, the cap applied after the scale and before the mask: one layer's L×L scores exist
    for the moment it runs) and keeps only the logsumexp of each row (:func:`row_logsumexp`, capped likewise), kernel
    ``softcap_math``.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if spec.softcap is not None:  # torch's fused kernels have no soft-cap: the formula, then one logsumexp a row
        allowed = allowed_keys(attention_mask, spec.causal, window=spec.window)
        out, _probs = attention(q, k, v, allowed, scale=spec.scale, softcap=spec.softcap)
        return Attended(out, lse=row_logsumexp(q, k, attention_mask, spec), kernel="softcap_math")

    group = group_of(q, k)
    kr, vr = repeat_kv(k, group), repeat_kv(v, group)
    padded = not bool(attention_mask.bool().all())
    if q.device.type == "cpu" and q.dtype in (torch.float32, torch.float16, torch.bfloat16):
        bias = None
        if padded or spec.window is not None:  # additive mask: padding and the window; causality is the kernel's
            keep = allowed_keys(attention_mask, False, window=spec.window)
            bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device)
            bias.masked_fill_(~keep, torch.finfo(q.dtype).min)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, kr, vr, 0.0, spec.causal, attn_mask=bias, scale=spec.scale)
        return Attended(out, lse=lse, kernel="flash_attention_cpu")
    if not padded and spec.window is None:
        kwargs: dict[str, Any] = dict(is_causal=spec.causal)  # the kernels' own causal mask, no L×L mask tensor
    else:
        kwargs = dict(attn_mask=allowed_keys(attention_mask, spec.causal, window=spec.window))
    last_error = None
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel([backend]):
                out = torch.nn.functional.scaled_dot_product_attention(q, kr, vr, scale=spec.scale, **kwargs)
        except RuntimeError as exc:  # not eligible for this kernel: try the next one
            last_error = exc
            continue
        return Attended(out, lse=row_logsumexp(q, k, attention_mask, spec), kernel=backend.name.lower())
    raise RuntimeError(f"no scaled_dot_product_attention kernel could run: {last_error}")


def flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention_mask: torch.Tensor, spec: Spec,
          allowed: torch.Tensor | None = None) -> Attended:
    """Our Triton FlashAttention kernel (grouped key/value heads and the window handled inside it). It has no
    soft-cap: a soft-capped layer (Gemma 2) runs :func:`sdpa`'s formula instead (kernel ``softcap_math``)."""
    if spec.softcap is not None:
        return sdpa(q, k, v, attention_mask, spec)
    out, lse = flash_kernel.flash_attention(q, k, v, causal=spec.causal, key_mask=attention_mask, scale=spec.scale,
                                            window=spec.window)
    return Attended(out, lse=lse, kernel="flash")


BACKENDS = {"eager": eager, "sdpa": sdpa, "flash": flash}


FLOAT64_BACKENDS = ("eager", "sdpa")  # the Triton kernel computes in fp32, fp16 and bf16 only


def resolve_backend(backend: str, device: torch.device | str = "cpu",
                    dtype: torch.dtype = torch.float32) -> tuple[str, str]:
    """The backend that will run for the one asked for, and a note when they differ. A float64 pass (the
    proof) refuses ``flash``: running sdpa in its place would prove another kernel than the one asked for."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    if dtype == torch.float64 and backend not in FLOAT64_BACKENDS:
        raise BadOption(f"the {backend} backend (our Triton FlashAttention kernel) computes in fp32, fp16 and bf16 "
                        f"only, so it cannot be proven in float64: prove {' or '.join(FLOAT64_BACKENDS)} in float64, "
                        f"and check {backend} in float32")
    if backend == "flash" and not (flash_kernel.available() and (torch.device(device).type == "cuda"
                                                                  or flash_kernel.interpreting())):
        return "sdpa", "flash needs CUDA and Triton; ran sdpa instead (same attention, torch's fused kernel)"
    return backend, ""
