"""Phi-3, from scratch: Llama's body (:mod:`probes.scratch.llama`'s code) with fused projections.

    h = RMSNorm(x)
    q | k | v = h·W_qkv                       (one matrix: q's H·d outputs, then k's and v's H_kv·d each)
    q, k = rotate(q, position), rotate(k, position)       (the first r = partial_rotary_factor·d numbers of a head)
    x = x + attention(q, k, v)·W_o
    h = RMSNorm(x)
    gate | up = h·W_gate_up                   (one matrix: the gate's outputs, then the up projection's)
    x = x + (silu(gate) ⊙ up)·W_down

The fused matrices compute what Llama's separate ones do (q_proj, k_proj and v_proj are row blocks of
``qkv_proj``): the pass multiplies by the fused matrix and splits the result, as Hugging Face does, so the two agree
bit for bit; the readers that take a layer's maps apart (QK attribution, composition) read the blocks as q_proj,
k_proj and v_proj. ``partial_rotary_factor`` < 1 turns only the first r numbers of each head (pairs (i, i + r/2))
and passes the rest unturned; ``sliding_window`` masks keys further back on every layer, as in Mistral.
Long-context rotary scaling (``rope_type`` longrope, Phi-3-mini-128k's and Phi-3.5's, which also scales cos and
sin) is refused by name.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from . import llama
from .attention import split_heads
from .family import QKV, Capture, Family
from .weights import Weights

ROPE_TYPES = ("default",)  # Phi-3's config accepts default and longrope only


class Layer(llama.Layer):
    def read_weights(self, w: Weights, p: str) -> None:
        linear = lambda key: (w[p + key + ".weight"], w.get(p + key + ".bias"))  # noqa: E731
        self.qkv_proj, self.o_proj = linear("self_attn.qkv_proj"), linear("self_attn.o_proj")
        self.gate_up_proj, self.down_proj = linear("mlp.gate_up_proj"), linear("mlp.down_proj")
        # the fused matrix's blocks, as views: the separate maps QK attribution and composition read
        weight, bias = self.qkv_proj
        d = weight.shape[0] // (self.n_heads + 2 * self.n_kv_heads)
        self.widths = [self.n_heads * d, self.n_kv_heads * d, self.n_kv_heads * d]
        blocks = zip(weight.split(self.widths), bias.split(self.widths) if bias is not None else (None,) * 3,
                     strict=True)
        self.q_proj, self.k_proj, self.v_proj = blocks

    def project(self, h: torch.Tensor) -> QKV:
        q, k, v = F.linear(h, *self.qkv_proj).split(self.widths, dim=-1)  # one product, split: q | k | v
        return split_heads(q, self.n_heads), split_heads(k, self.n_kv_heads), split_heads(v, self.n_kv_heads)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(h, *self.gate_up_proj).chunk(2, dim=-1)  # one product, split: gate | up
        return F.linear(up * self.act(gate), *self.down_proj)  # SwiGLU


class Phi3(llama.Llama):
    layer_class = Layer

    @staticmethod
    def check(config, name: str) -> None:
        llama.check_config(config, name, title="Phi-3", rope_types=ROPE_TYPES, partial_rotary=True)


def catch_fused(attn, config, cap: Capture, raw: dict[str, torch.Tensor]) -> None:
    """q, k and v as Phi-3's attention cuts them out of its qkv_proj's output."""
    heads, groups, d = config.num_attention_heads, llama.kv_heads(config), llama.head_dim(config)
    widths = [heads * d, groups * d, groups * d]

    def split(_m, _i, out):
        q, k, v = out.split(widths, dim=-1)
        raw.update(q=split_heads(q, heads), k=split_heads(k, groups), v=split_heads(v, groups))

    cap.hook(attn.qkv_proj, split)


FAMILIES = (
    Family(name="phi3", title="Phi-3", model_types=("phi3",), hf_class=llama.hf_class,
           network=partial(Phi3, window=llama.mistral_window), check=Phi3.check,
           capture=partial(llama.capture, catch=catch_fused), scale=llama.attention_scale, kv_heads=llama.kv_heads,
           head_dim=llama.head_dim, window=llama.mistral_window, positions="rotary",
           implemented="as Llama (RMSNorm, rotary positions with `rope_theta`, grouped-query attention, SwiGLU "
                       "MLP, tied or untied embeddings, `rms_norm_eps`), with the fused `qkv_proj` (q, k and v in one "
                       "matrix) and `gate_up_proj` (the SwiGLU's gate and up), `sliding_window` (as Mistral) and "
                       "`partial_rotary_factor` (the first dimensions of each head turn, the rest pass unturned)",
           refused="`rope_type` longrope (Phi-3-mini-128k, Phi-3.5: it also scales cos and sin; Phi-3's config "
                   "accepts no other), rotary parameters per layer type, other activations",
           examples=()),  # Phi-3-mini is 3.8 billion parameters (15 GB in fp32): typed by hub id, not offered
)
