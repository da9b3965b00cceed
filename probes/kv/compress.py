"""A prompt compressed once, as kvpress (NVIDIA) compresses it: after the prompt's full pass, each layer keeps the
``n_kept`` keys of each key/value head that a press scores highest; the rest leave the cache before decoding starts.

The scores come from a Trace's attention, so they are the same whether the Trace holds every probability (eager) or
recovers them from one logsumexp per row (the lazy ``sdpa`` and ``flash`` backends). The presses, as kvpress 0.5.5
scores them (``benchmarks/kvpress_check.py`` compares the kept tokens with kvpress itself):

    streaming_llm        the first ``n_sink`` keys and the last ones (every other score 0)
    snapkv               the last ``window`` queries' attention over the keys before them, averaged over those
                         queries, smoothed by a mean over 5 neighbours (zero-padded at the ends), averaged over the
                         query heads of each key/value head; the window's own keys always kept
    tova                 the last query's attention over the keys before it, averaged over every query head of the
                         layer (one set for the layer); the last key always kept
    observed_attention   the attention each key received, summed over the queries and divided by how many queries
                         can see it (n − position), averaged over the query heads of each key/value head (H2O's
                         accumulated attention, on the prompt)

``n_kept = max(1, int(n × (1 − ratio)))`` keys per head; ties go as ``torch.topk`` breaks them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import BadOption
from ..seam import reader
from .policies import POOL


@dataclass(frozen=True)
class Press:
    """One press: ``score(trace, layer, n, kv_heads, group, n_sink, window, ratio)`` one layer's scores ``[H_kv, n]``
    (higher: kept), and ``refuse(n, n_sink, window)`` why a prompt of ``n`` tokens is too short for it (None: it is
    not)."""

    score: Callable[..., torch.Tensor]
    refuse: Callable[[int, int, int], str | None] = lambda n, n_sink, window: None


def _streaming_llm(trace, layer: int, n: int, kv_heads: int, group: int, n_sink: int, window: int,
                   ratio: float) -> torch.Tensor:
    pruned = n - int(n * (1 - ratio))
    out = torch.ones(kv_heads, n, dtype=torch.float64)
    out[:, n_sink:n_sink + pruned] = 0
    return out


def _snapkv(trace, layer: int, n: int, kv_heads: int, group: int, n_sink: int, window: int,
            ratio: float) -> torch.Tensor:
    a = trace.attention(layer, rows=slice(n - window, n)).double()[..., : n - window]  # [H, w, n − w]
    pooled = F.avg_pool1d(a.mean(1)[:, None], kernel_size=POOL, stride=1, padding=POOL // 2)[:, 0]
    per_kv = pooled.view(kv_heads, group, -1).mean(1)
    return F.pad(per_kv, (0, window), value=float(per_kv.max()) + 1)


def _tova(trace, layer: int, n: int, kv_heads: int, group: int, n_sink: int, window: int,
          ratio: float) -> torch.Tensor:
    a = trace.attention(layer, rows=slice(n - 1, n)).double()[:, 0, : n - 1]  # [H, n − 1]
    per_layer = a.mean(0, keepdim=True).expand(kv_heads, -1)
    return F.pad(per_layer, (0, 1), value=float(per_layer.max()) + 1)


def _observed_attention(trace, layer: int, n: int, kv_heads: int, group: int, n_sink: int, window: int,
                        ratio: float) -> torch.Tensor:
    a = trace.attention(layer).double()  # [H, n, n]
    received = a.sum(1) / torch.arange(n, 0, -1, dtype=torch.float64)
    return received.view(kv_heads, group, n).mean(1)


PRESSES = {  # name -> its press, in the order the module's table lists them
    "streaming_llm": Press(_streaming_llm, lambda n, n_sink, window: None if n > n_sink else (
        f"the prompt is {n} tokens: StreamingLLM needs more than its {n_sink} sinks")),
    "snapkv": Press(_snapkv, lambda n, n_sink, window: None if n > window else (
        f"SnapKV's observation window is {window} queries and the prompt is {n} tokens: give a longer prompt or a "
        "smaller window")),
    "tova": Press(_tova),
    "observed_attention": Press(_observed_attention),
}


def n_kept(n: int, ratio: float) -> int:
    """How many keys each head keeps of ``n`` at a compression ``ratio`` (the share removed), as kvpress counts."""
    return max(1, int(n * (1 - ratio)))


def scores(trace, layer: int, press: str, *, n_sink: int = 4, window: int = 64, ratio: float = 0.5) -> torch.Tensor:
    """One layer's press scores ``[H_kv, n]`` over the ``n`` real tokens of item 0 (higher: kept)."""
    if press not in PRESSES:
        raise BadOption(f"unknown press {press!r}: choose one of {', '.join(PRESSES)}")
    n = len(trace.valid(0))
    kv_heads = trace.n_kv_heads or trace.n_heads
    return PRESSES[press].score(trace, layer, n, kv_heads, trace.n_heads // kv_heads, n_sink, window, ratio)


@reader
def compress(trace, press: str, ratio: float, *, n_sink: int = 4, window: int = 64) -> list[list[list[int]]]:
    """The token positions each key/value head of each layer keeps, ``kept[layer][head]`` sorted, when the prompt
    of ``trace`` (a decoder's; item 0) is compressed by ``press`` at ``ratio`` (the share removed, 0 ≤ ratio < 1)."""
    if not 0 <= ratio < 1:
        raise BadOption(f"the compression ratio is the share of keys removed: from 0 up to (not including) 1, not "
                        f"{ratio}")
    if not trace.is_causal:
        raise BadOption("prompt compression keeps a decoder's KV cache: this trace is an encoder's")
    n = len(trace.valid(0))
    refused = PRESSES[press].refuse(n, n_sink, window) if press in PRESSES else None
    if refused is not None:
        raise BadOption(refused)
    keep = n_kept(n, ratio)
    out = []
    for layer in range(trace.n_layers):
        s = scores(trace, layer, press, n_sink=n_sink, window=window, ratio=ratio)
        out.append([sorted(int(i) for i in row) for row in s.topk(keep, dim=-1).indices])
    return out
