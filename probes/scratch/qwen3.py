"""Qwen3, from scratch: Qwen2's body (:mod:`probes.scratch.llama`'s code) with QK-norm.

    h = RMSNorm(x)
    q, k, v = h·W_q, h·W_k, h·W_v                          (biases with ``attention_bias``; none in Qwen3's releases)
    q, k = RMSNorm_q(q_h), RMSNorm_k(k_h) for each head h   (QK-norm: over each head's d numbers, one gain of d)
    q, k = rotate(q, position), rotate(k, position)
    x = x + attention(q, k, v)·W_o  …                       (the rest as in Llama)

QK-norm scales every head's q and k to an rms of 1 (times a learned gain) before the rotation, so a score q·k is
bounded by the gains whatever the residual stream holds: the logits of the softmax cannot grow without bound.

What it changes for the readers. QK attribution (:meth:`Qwen3.qk_parts`) freezes each head's QK-norm at the rms of
the pass's own q (and k) at that position, as the layer's RMSNorm is frozen at the full input's: each part's q is
q(part) ÷ rms(q) · g_q, linear in the parts, so the parts still sum to the pass's own q and k. Composition scores
(:meth:`Qwen3.head_weights`) are read from the weights alone: QK-norm's gain g_q (g_k) is folded into the columns
of W_Q (W_K); its scale, 1 ÷ rms of the head's own q, depends on the input and is left out, like every norm's scale.
Sliding windows follow Qwen2 (``use_sliding_window``, ``max_window_layers``, ``layer_types``).
"""

from __future__ import annotations

from functools import partial

import torch

from . import llama
from .attention import split_heads
from .family import QKV, Capture, Family
from .weights import Weights


class Layer(llama.Layer):
    def read_weights(self, w: Weights, p: str) -> None:
        super().read_weights(w, p)
        self.q_norm = w[p + "self_attn.q_norm.weight"]  # [d]: one gain, shared by every head
        self.k_norm = w[p + "self_attn.k_norm.weight"]

    def project(self, h: torch.Tensor) -> QKV:
        q, k, v = super().project(h)
        q, k = llama.rms_norm(q, self.q_norm, self.eps), llama.rms_norm(k, self.k_norm, self.eps)  # QK-norm, per head
        return q, k, v


class Qwen3(llama.Llama):
    layer_class = Layer

    @staticmethod
    def check(config, name: str) -> None:
        llama.check_config(config, name, title="Qwen3")

    def projected_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k of each part before the rotation (:meth:`~probes.scratch.llama.Llama.qk_parts`): the RMSNorm
        frozen at ``x``, the projections, then each head's QK-norm frozen at the rms of the whole q (k) there (the
        sum of every part's and the biases'): q(part) ÷ rms(q) · g_q, so the parts sum to the pass's own q (k)."""
        q, k = super().projected_parts(layer, parts, x)
        lay = self.layers[layer]
        return self.frozen(q, lay.q_norm, lay.eps), self.frozen(k, lay.k_norm, lay.eps)

    @staticmethod
    def frozen(parts: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
        """Each head's RMSNorm with its scale frozen at the whole's: ``parts`` ``[P + 1, heads, n, d]`` sum to the
        head's vector, whose 1 ÷ √(mean(square) + ε) scales every part."""
        scale = torch.rsqrt(parts.sum(0).pow(2).mean(-1, keepdim=True) + eps)  # [heads, n, 1]
        return gain.to(parts.dtype) * (parts * scale)

    def head_weights(self, layer: int):
        """As :meth:`probes.scratch.llama.Llama.head_weights`, with QK-norm's gains folded into the columns of W_Q
        and W_K; its scale (1 ÷ the rms of each head's own q and k) depends on the input and is left out."""
        w_q, w_k, w_v = super().head_weights(layer)
        lay = self.layers[layer]
        return w_q * lay.q_norm, w_k * lay.k_norm, w_v


def catch_normed(attn, config, cap: Capture, raw: dict[str, torch.Tensor]) -> None:
    """q and k as QK-norm hands them on (``[B, L, H, d]``, turned to ``[B, H, L, d]``), v from v_proj."""
    for key in "qk":
        cap.hook(getattr(attn, f"{key}_norm"), lambda _m, _i, out, key=key: raw.__setitem__(key, out.transpose(1, 2)))
    cap.hook(attn.v_proj, lambda _m, _i, out: raw.__setitem__("v", split_heads(out, llama.kv_heads(config))))


FAMILIES = (
    Family(name="qwen3", title="Qwen3", model_types=("qwen3",), hf_class=llama.hf_class,
           network=partial(Qwen3, window=llama.qwen2_window), check=Qwen3.check,
           capture=partial(llama.capture, catch=catch_normed), scale=llama.attention_scale, kv_heads=llama.kv_heads,
           head_dim=llama.head_dim, window=llama.qwen2_window, positions="rotary",
           implemented="as Qwen2 (`attention_bias`, `use_sliding_window` with `sliding_window`, `max_window_layers`, "
                       "`layer_types`), plus QK-norm (`q_norm`, `k_norm`: an RMSNorm over each head's q and k before "
                       "the rotation)",
           refused="other `rope_type`s (yarn, longrope, …), `partial_rotary_factor` < 1, rotary parameters per "
                   "layer type, other activations",
           examples=("Qwen/Qwen3-0.6B",)),
)
