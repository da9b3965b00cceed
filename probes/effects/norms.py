"""Value-weighted attention norms (Kobayashi et al. 2020, "Attention is not only a weight").

A head's output at query i is Σ_j α_ij·f(x_j), where f(x_j) = v_j·W_O[h] is what key j's value vector becomes
once the output projection's slice for this head (W_O[h], ``[d, D]``) maps it into the residual stream
(v_j already holds the value bias b_V). The weight α_ij alone can be large on a token whose transformed value
is tiny; the norm ‖α_ij·f(x_j)‖ = α_ij·‖f(x_j)‖ measures what key j actually contributes to query i.

Read from a Trace (its attention and v) and the from-scratch network's output projection, for every family
the scratch path covers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import UnsupportedModel
from ..precision import upcast
from ..scratch import build
from ..seam import reader

if TYPE_CHECKING:
    from ..models import LocalModel
    from ..trace import Trace


def value_lengths(trace: Trace, model: LocalModel, layer: int, item: int = 0) -> torch.Tensor:
    """‖f(x_j)‖ = ‖v_j·W_O[h]‖ for every head h and real token j of one item: ``[H, n]`` (fp32, float64 for a
    float64 model)."""
    if model.family is None:
        raise UnsupportedModel(f"{model.name}: value-weighted norms need the output projection of a family the "
                               "from-scratch path covers; attention weights still work")
    weight, _bias = build(model).head_out(layer)  # [H, d, D]
    _q, _k, v = trace.layer_qkv(layer)  # v [B, H_kv, L, d]
    idx = trace.valid(item)
    with torch.inference_mode():
        heads = torch.arange(trace.n_heads, device=v.device) // trace.group  # the key/value head each reads
        values = upcast(v[item][heads][:, idx])  # [H, n, d]
        return torch.linalg.vector_norm(values @ upcast(weight).to(values.device), dim=-1)  # [H, n]


@reader
def value_norms(trace: Trace, model: LocalModel, layer: int, head: int | None = None, item: int = 0,
                rows: slice | list[int] | None = None) -> torch.Tensor:
    """‖α_ij·f(x_j)‖ of one head ``[r, n]`` (or every head ``[H, r, n]``), rows and columns as
    :meth:`Trace.attention` gives them."""
    lengths = value_lengths(trace, model, layer, item)
    weights = upcast(trace.attention(layer, head, item, rows))
    with torch.inference_mode():
        scale = lengths[head] if head is not None else lengths[:, None, :]
        return weights * scale.to(weights.device)


@reader
def query_norms(trace: Trace, model: LocalModel, query: int, keys: list[int], item: int = 0):
    """Every layer × head's value-weighted norm from one query token on some key tokens (a word's pieces: the
    vectors α_ij·f(x_j) summed over them before the length is taken), ``[layers, heads]`` numpy float64."""
    import numpy as np

    if model.family is None:
        raise UnsupportedModel(f"{model.name}: value-weighted norms need the output projection of a family the "
                               "from-scratch path covers; attention weights still work")
    net = build(model)
    idx = trace.valid(item)
    out = np.zeros((trace.n_layers, trace.n_heads))
    with torch.inference_mode():
        for layer in range(trace.n_layers):
            weight, _bias = net.head_out(layer)  # [H, d, D]
            v = trace.layer_qkv(layer)[2]
            heads = torch.arange(trace.n_heads, device=v.device) // trace.group
            values = upcast(v[item][heads][:, idx[keys]])  # [H, k, d]
            alpha = upcast(trace.attention(layer, None, item, [query])[:, 0, keys])  # [H, k]
            written = (alpha[..., None] * values).sum(1)  # [H, d]: Σ_j α_ij·v_j over the key's pieces
            out[layer] = torch.linalg.vector_norm(
                torch.einsum("hd,hdD->hD", written, upcast(weight).to(written.device)), dim=-1).double().cpu().numpy()
    return out
