"""The rules of attention every pass shares: which keys a query may see, grouped key/value heads, one
logsumexp per query row, and what the probabilities of every head take in memory.

The floor below :mod:`probes.trace`, :mod:`probes.hf` and :mod:`probes.scratch` (nothing here runs a model):

* :class:`Spec`: one layer's attention rule besides q, k and v (scale, causal, sliding window);
* :func:`allowed_keys` / :func:`additive_mask`: the key mask, as booleans or as numbers to add to the scores.
  A key is allowed when it is a real token (not padding), for a decoder not in the future, and with a
  sliding window of ``w`` fewer than ``w`` positions from the query (:func:`in_window`): for a decoder one of the
  ``w`` most recent positions (as Mistral and Qwen2 define it), for an encoder up to ``w − 1`` positions on either
  side (ModernBERT's local layers, ``w`` = local_attention / 2 + 1);
* :func:`repeat_kv` / :func:`group_of`: **grouped-query attention**. With ``H_kv < H`` key/value heads, the
  query heads come in ``H / H_kv`` consecutive groups and query head ``h`` reads key/value head
  ``h // group`` (``H_kv = 1`` is multi-query attention, ``H_kv = H`` plain multi-head attention);
* :func:`row_logsumexp`: the logsumexp of each query row's scaled, masked scores, from which a lazy Trace
  recovers any head's probabilities exactly;
* :func:`attention_bytes` / :func:`probability_bytes`: layers × B × H × L² × 4, the size every producer
  compares with its ``attention_budget``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .precision import upcast, working_dtype


@dataclass(frozen=True)
class Spec:
    """One layer's attention rule, besides q, k and v: what q·kᵀ is multiplied by, whether the future
    is masked, the sliding window (``None``: every key; else ``w``: the keys fewer than ``w`` positions from the
    query, :func:`in_window`, on the side a causal layer sees or on both sides in an encoder) and the logit
    soft-cap (Gemma 2's ``attn_logit_softcapping``; ``None``: none): a score s = q·kᵀ·scale becomes
    cap·tanh(s / cap), before the mask, so every score lies in (−cap, cap)."""

    scale: float
    causal: bool
    window: int | None = None
    softcap: float | None = None


def soft_cap(scores: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap·tanh(scores / cap), in place (``cap`` None: ``scores`` as they are): Gemma 2's soft-capping, the same
    three steps, in the same order, as Hugging Face's eager attention."""
    if cap is None:
        return scores
    return scores.div_(cap).tanh_().mul_(cap)


def in_window(query: torch.Tensor, key: torch.Tensor, window: int) -> torch.Tensor:
    """Whether each key position is inside a sliding window of ``window`` around each query position: fewer than
    ``window`` positions away, |query − key| < w. One rule for both kinds of window: under a causal mask only the
    past side is left, the query and the ``w − 1`` positions before it (Mistral, Qwen2, Gemma 2: ``w`` =
    ``sliding_window``); an encoder sees ``w − 1`` positions on either side, a symmetric window (ModernBERT: ``w`` =
    local_attention / 2 + 1, as Hugging Face's flash path counts it, for |query − key| ≤ local_attention / 2)."""
    return (query - key).abs() < window


def allowed_keys(attention_mask: torch.Tensor, causal: bool, rows: slice | None = None,
                 window: int | None = None) -> torch.Tensor:
    """Which keys each query may look at: ``[B, 1, r, L]`` bool (``r`` = 1 when neither a causal mask nor
    a window is needed, broadcasting over all query rows; else the query rows ``rows``, default all).

    A key is allowed when it is a real token (not padding), for a causal model not in the future, and
    with a sliding window of ``w`` fewer than ``w`` positions from the query (:func:`in_window`: not more than
    ``w − 1`` positions before it in a causal model, nor after it in an encoder).
    """
    real_keys = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, L]
    if not causal and window is None:
        return real_keys
    n = attention_mask.shape[-1]
    query = torch.arange(n, device=attention_mask.device)[rows if rows is not None else slice(None)][:, None]
    key = torch.arange(n, device=attention_mask.device)[None, :]
    visible = key <= query if causal else torch.ones(1, 1, dtype=torch.bool, device=key.device)  # the past
    if window is not None:
        visible = visible & in_window(query, key, window)  # inside the window: fewer than w positions away
    return real_keys & visible


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The key mask as numbers to add to the scores: 0 where a key is allowed, the dtype's lowest value
    where it is not (after softmax its weight is exactly 0)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)


def repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """Grouped-query attention: ``[..., H_kv, L, d]`` -> ``[..., H_kv·group, L, d]``, key/value head j repeated
    for the ``group`` query heads that read it (query head h reads key/value head h // group)."""
    if group == 1:
        return x
    *lead, h_kv, n, d = x.shape
    return x.unsqueeze(-3).expand(*lead, h_kv, group, n, d).reshape(*lead, h_kv * group, n, d)


def group_of(q: torch.Tensor, k: torch.Tensor) -> int:
    """How many query heads share each key/value head."""
    h, h_kv = q.shape[1], k.shape[1]
    if h % h_kv:
        raise ValueError(f"{h} query heads cannot share {h_kv} key/value heads evenly")
    return h // h_kv


def attention_bytes(model, enc) -> int:
    """What every layer's and head's probabilities of this batch take in fp32: layers × B × H × L² × 4 (what
    ``attention_budget`` is compared with, by both producers)."""
    return probability_bytes(model, *enc.input_ids.shape)


def probability_bytes(model, batch: int, length: int) -> int:
    """fp32 probabilities of every layer and head for ``batch`` sequences of ``length`` tokens."""
    return model.n_layers * batch * model.n_heads * length * length * 4


def row_logsumexp(q: torch.Tensor, k: torch.Tensor, attention_mask: torch.Tensor, spec: Spec,
                  block: int = 256) -> torch.Tensor:
    """Natural-log logsumexp of each query row's scaled (soft-capped, where ``spec.softcap``), masked scores,
    ``[B, H, L]``, computed ``block`` rows at a time so the full L×L scores never exist. Rows with no allowed key get
    −inf."""
    n = q.shape[-2]
    k = repeat_kv(k, group_of(q, k))
    lse = torch.empty(q.shape[:-1], dtype=working_dtype(q.dtype), device=q.device)  # fp32, or float64 for float64
    for start in range(0, n, block):
        rows = slice(start, min(n, start + block))
        scores = soft_cap((q[..., rows, :] @ k.transpose(-2, -1)).mul_(spec.scale), spec.softcap)
        scores.masked_fill_(~allowed_keys(attention_mask, spec.causal, rows, spec.window), float("-inf"))
        lse[..., rows] = torch.logsumexp(upcast(scores), dim=-1)
    return lse
