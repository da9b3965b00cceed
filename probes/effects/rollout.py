"""Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

Raw weights of one layer say little about how information flows through all of them. Rollout follows it:
each layer's attention, averaged over heads, is mixed half and half with the identity (the residual
connection carries every token on to itself), rows renormalised, and the layers multiplied:

    Â_l = ½·mean_h A_l + ½·I        (rows renormalised)
    rollout_l = Â_l · Â_(l−1) ⋯ Â_0

Row i of ``rollout_l`` says how much of what token i holds after layer l came from each input token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..seam import reader

if TYPE_CHECKING:
    from ..seam import TraceLike


def mixed(trace: TraceLike, layer: int, item: int = 0) -> torch.Tensor:
    """Â_l over the real tokens of one item, ``[n, n]`` float64."""
    a = trace.attention(layer, None, item).double().mean(0)
    a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    return a / a.sum(-1, keepdim=True)


@reader
def rollout(trace: TraceLike, item: int = 0, upto: int | None = None) -> torch.Tensor:
    """``rollout_l`` for every layer l up to ``upto`` (default: all): ``[layers, n, n]`` float64, on the CPU.
    Every row sums to 1."""
    last = trace.n_layers - 1 if upto is None else upto
    out, flow = [], None
    with torch.inference_mode():
        for layer in range(last + 1):
            step = mixed(trace, layer, item).cpu()
            flow = step if flow is None else step @ flow
            out.append(flow)
    return torch.stack(out)
