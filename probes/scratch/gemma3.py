"""Gemma 3 (text), from scratch: Gemma 2's body (:mod:`probes.scratch.gemma`'s code: sandwich norms, embeddings × √D,
``query_pre_attn_scalar``, soft-caps where set, local and global layers) with QK-norm and a rotary table per layer
type.

    x = embed[token] · √D                     (√D rounded to fp32, then to the embedding's dtype, as HF's buffer)
    for each layer (type t: sliding_attention = local, full_attention = global):
        h = RMSNorm₁(x)                                    (every RMSNorm: x ÷ rms(x) · (1 + w), in fp32)
        q, k, v = h·W_q, h·W_k, h·W_v
        q, k = RMSNorm_q(q_h), RMSNorm_k(k_h) for each head h    (QK-norm: over each head's d numbers, gain 1 + w)
        q, k = rotate_t(q), rotate_t(k)         (the table of the layer's type: ω_i = θ_t^(−2i/d) ÷ factor_t)
        s = q·kᵀ · query_pre_attn_scalar^−½           (no score cap: attn_logit_softcapping is refused, see below)
        s = s + mask                            (local layers: a sliding window; global: causal only)
        x = x + RMSNorm₂(softmax(s)·v·W_o)       (post_attention_layernorm: after the attention)
        x = x + RMSNorm₄(MLP(RMSNorm₃(x)))       (pre_ and post_feedforward_layernorm; gelu-tanh GeGLU)
    x = RMSNorm(x);  logits = x·Eᵀ;  logits = cap·tanh(logits / cap)     (final_logit_softcapping, if set)

What is new against Gemma 2. *QK-norm* (as Qwen3's, with Gemma's gain 1 + w and its fp32 norm) scales each head's q
and k to an rms of 1 times a learned gain before the rotation, which bounds the scores; the released models drop
Gemma 2's soft-caps for it (both are None there). A config that sets ``final_logit_softcapping`` is honoured; one that
sets ``attn_logit_softcapping`` is refused at load (:func:`refuse_at_load`): transformers' Gemma 3 reads it but never
applies it, so neither path would compute what such a checkpoint was trained with. *Rotary parameters per
layer type*: ``rope_parameters`` is a dict keyed by ``sliding_attention`` and ``full_attention``, each with its own
``rope_theta`` (10,000 local, 1,000,000 global in the releases) and ``rope_type`` (``default``, or ``linear`` with a
``factor``, 8 on the released global layers: positions squeezed, the same as every ω_i divided by the factor), so a
local and a global layer turn the same position by different angles. The KV lab, whose cache slots do not implement
a model's own sliding window, reads a text no longer than the local layers' window and refuses a longer one by name.

What it changes for the readers. The network's tables differ by layer (:meth:`Gemma3.rotary` takes the layer, as
the :class:`~probes.scratch.family.RotaryNetwork` accessor does, and hands back its type's): the Trace keeps a list of
each layer's pair (scratch and Hugging Face alike; ``Trace.rotary_of(layer)`` reads it), the Q/K/V explanation turns
q back by its layer's, QK attribution's bands read its layer's, and the layer loop computes each type's table once a
pass and hands each layer its own (:meth:`Gemma3.at`, :meth:`Gemma3.for_layer`), so generation with a KV cache and
the KV lab turn every new token by its layer's angles. QK attribution (:meth:`Gemma3.projected_parts`) freezes each
head's QK-norm at the rms of the pass's own q (and k) at that position, as Qwen3's: the parts still sum to the pass's
own q and k. Composition scores fold QK-norm's gain into W_Q's and W_K's columns (:meth:`Gemma3.head_weights`) and
leave its scale out, as every norm's. Everything else (the post-attention norm frozen at the pass for a head's write,
the final soft-cap) is Gemma 2's.

Hugging Face's Gemma RMSNorm computes in fp32 whatever the dtype, so the float64 proof against its own code is refused
by name (``float64_refused``) and made instead with that norm in float64, as for Gemma 2. The multimodal ``gemma3``
model type (Gemma3ForConditionalGeneration, a vision tower before the text) has no record, and the loader refuses it
by name (:func:`probes.models.refuse_multimodal`: the Hugging Face view cannot read it either).
"""

from __future__ import annotations

from functools import partial

import torch

from ..errors import UnsupportedModel
from ..precision import working_dtype
from . import gemma, llama
from .attention import split_heads
from .family import QKV, Capture, Family
from .qwen3 import Qwen3
from .weights import Weights

ROPE_TYPES = ("default", "linear")


def refuse_at_load(config, name: str) -> None:
    """Options that transformers itself ignores, so that even the Hugging Face view would be wrong: Gemma 3's
    attention never passes ``attn_logit_softcapping`` to its attention function (5.24), so a config that sets it is
    run uncapped by Hugging Face (None in every release)."""
    if getattr(config, "attn_logit_softcapping", None) is not None:
        raise UnsupportedModel(f"{name!r} sets attn_logit_softcapping={config.attn_logit_softcapping}, which "
                               "transformers' Gemma 3 ignores (its attention never applies the cap), so neither path "
                               "would compute what the checkpoint was trained with")


def check(config, name: str) -> None:
    """Refuse by name what the code below does not implement: Gemma 2's list, less rotary parameters per layer type
    (implemented here: ``default`` and ``linear`` on each type), plus ``attention_bias`` (the post-attention norm of a
    head's write is frozen without an output bias; no Gemma 3 has one) and :func:`refuse_at_load`'s."""
    refuse_at_load(config, name)
    gemma.check(config, name, title="Gemma 3", per_layer_rope=True, rope_types=ROPE_TYPES)
    if getattr(config, "attention_bias", False):
        raise UnsupportedModel(f"{name!r}: attention_bias is not implemented by the from-scratch Gemma 3 (its readers "
                               "freeze the post-attention norm of the heads' writes without an output bias; no "
                               "released Gemma 3 has biases); the Hugging Face view still works")


def layer_type(config, layer: int) -> str:
    """``sliding_attention`` (local) or ``full_attention`` (global): which rotary table and mask the layer uses."""
    return config.layer_types[layer]


class Layer(gemma.Layer):
    def __init__(self, w: Weights, i: int, config, window: int | None):
        super().__init__(w, i, config, window)
        self.kind = layer_type(config, i)  # its rotary table's key (Gemma3.for_layer)

    def read_weights(self, w: Weights, p: str) -> None:
        super().read_weights(w, p)
        self.q_norm = gemma.gain(w[p + "self_attn.q_norm.weight"])  # [d]: 1 + w, one gain shared by every head
        self.k_norm = gemma.gain(w[p + "self_attn.k_norm.weight"])

    def project(self, h: torch.Tensor) -> QKV:
        q, k, v = super().project(h)
        eps = self.eps
        return gemma.gemma_norm(q, self.q_norm, eps), gemma.gemma_norm(k, self.k_norm, eps), v  # QK-norm, per head


class Gemma3(gemma.Gemma2):
    layer_class: type[llama.Layer] = Layer
    title = "Gemma 3"
    layers: list[Layer]

    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "gemma3"):
        super().__init__(state_dict, config, name)
        self.rope = gemma.rope_by_type(config, name, self.title)  # {layer type: its rotary parameters}

    @staticmethod
    def check(config, name: str) -> None:
        check(config, name)

    def rotary(self, length: int, device: torch.device | str = "cpu",
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[1, length, d]`` of layer ``layer`` (:class:`~probes.scratch.family.RotaryNetwork`): its
        layer type's table, in the network's working dtype (a local and a global layer turn by different angles)."""
        return llama.rotary_tables(self.config, length, device, working_dtype(self.embed.dtype),
                                   self.rope[self.layers[layer].kind])

    def tables_by_type(self, length: int,
                       device: torch.device | str = "cpu") -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """cos and sin ``[1, length, d]`` of each layer type in the network, computed once a pass (by the first
        layer of each type: every layer of a type turns by the same table)."""
        first = {layer.kind: i for i, layer in reversed(list(enumerate(self.layers)))}
        return {kind: self.rotary(length, device, i) for kind, i in first.items()}

    def at(self, start, length, device):
        """Every layer type's cos and sin for positions start..start+length−1, by type (:meth:`for_layer` hands each
        layer its own)."""
        return ({kind: (cos[:, start:], sin[:, start:])
                 for kind, (cos, sin) in self.tables_by_type(start + length, device).items()},)

    def for_layer(self, at: tuple, layer: int) -> tuple:
        (tables,) = at
        return tables[self.layers[layer].kind]

    def projected_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k of each part before the rotation (:meth:`~probes.scratch.llama.Llama.qk_parts`): the RMSNorm
        frozen at ``x``, the projections, then each head's QK-norm frozen at the rms of the whole q (k) there:
        q(part) ÷ rms(q) · (1 + w_q), so the parts sum to the pass's own q (k)."""
        q, k = super().projected_parts(layer, parts, x)
        lay = self.layers[layer]
        return Qwen3.frozen(q, lay.q_norm, lay.eps), Qwen3.frozen(k, lay.k_norm, lay.eps)

    def head_weights(self, layer: int):
        """As :meth:`probes.scratch.llama.Llama.head_weights`, with QK-norm's gains 1 + w folded into the columns of
        W_Q and W_K; its scale (1 ÷ the rms of each head's own q and k) depends on the input and is left out."""
        w_q, w_k, w_v = super().head_weights(layer)
        lay = self.layers[layer]
        return w_q * lay.q_norm.to(w_q.dtype), w_k * lay.k_norm.to(w_k.dtype), w_v


def catch_normed(attn, config, cap: Capture, raw: dict[str, torch.Tensor]) -> None:
    """q and k as QK-norm hands them on (already ``[B, H, L, d]``: Gemma 3 norms after splitting the heads), v from
    v_proj."""
    for key in "qk":
        cap.hook(getattr(attn, f"{key}_norm"), lambda _m, _i, out, key=key: raw.__setitem__(key, out))
    cap.hook(attn.v_proj, lambda _m, _i, out: raw.__setitem__("v", split_heads(out, llama.kv_heads(config))))


FAMILIES = (
    Family(name="gemma3", title="Gemma 3", model_types=("gemma3_text",), hf_class=llama.hf_class, network=Gemma3,
           check=Gemma3.check, capture=partial(llama.capture, catch=catch_normed, per_layer=True),
           scale=gemma.attention_scale, kv_heads=llama.kv_heads, head_dim=llama.head_dim, window=gemma.window,
           softcap=gemma.attn_softcap, positions="rotary", float64_refused=gemma.float64_refused,
           refuse_at_load=refuse_at_load,
           implemented="as Gemma 2 (sandwich RMSNorms with (1 + w) in fp32, embeddings × √D, "
                       "`query_pre_attn_scalar`, `final_logit_softcapping` where set, "
                       "`layer_types` with `sliding_window`, grouped-query attention, `head_dim` ≠ hidden / heads, "
                       "GeGLU MLP, tied embeddings), plus QK-norm (`q_norm`, `k_norm`: a Gemma RMSNorm over each "
                       "head's q and k before the rotation) and rotary parameters per layer type (`rope_parameters` "
                       "keyed by `sliding_attention` and `full_attention`, each its own `rope_theta`; `rope_type` "
                       "default or linear)",
           refused="`attn_logit_softcapping` (at load: transformers' Gemma 3 ignores it, so neither path would be "
                   "right), other `rope_type`s (yarn, llama3, …), `partial_rotary_factor` < 1, `attention_bias`, "
                   "`use_bidirectional_attention`, other activations; the multimodal `gemma3` model type (a vision "
                   "tower beside the text: refused at load, neither view reads it); direct logit attribution with "
                   "`final_logit_softcapping` on; the float64 proof against HF's own code (its RMSNorm computes in "
                   "fp32: proven instead with that norm in float64)",
           examples=()),  # gemma-3-1b is 1 billion parameters and gated: typed by hub id
)
