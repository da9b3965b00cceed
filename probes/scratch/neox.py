"""GPT-NeoX (Pythia), from scratch: rotary positions (:mod:`probes.scratch.llama`'s code) on a LayerNorm body with
biases, a fused q/k/v interleaved by head, and a parallel residual.

    x = embed_in[token]                                   (no position table: positions are rotations)
    for each layer:   qkv = LayerNorm₁(x)·W_qkv + b       (one matrix; its outputs per head: q_h | k_h | v_h)
                      q, k = rotate(q, position), rotate(k, position)   (the first r = partial_rotary_factor·d)
                      a = attention(q, k, v)·W_o + b_o
                      parallel:   x = x + a + GELU(LayerNorm₂(x)·W_in + b_in)·W_out + b_out
                      sequential: x = x + a;  x = x + GELU(LayerNorm₂(x)·W_in + b_in)·W_out + b_out
    x = LayerNorm(x);  logits = x·W_lmᵀ       (Pythia's untied ``embed_out``, ``lm_head`` in transformers 5)

The fused ``query_key_value`` is not q's rows, then k's, then v's (as Phi-3's is): its 3·H·d outputs are H groups of
3·d, head h's q, k and v side by side. The pass multiplies by the fused matrix and cuts each head's group in three,
as Hugging Face does, so the two agree bit for bit; the readers that take a layer's maps apart (QK attribution,
composition) read q's, k's and v's rows gathered from every head's group.

``use_parallel_residual`` (Pythia's default): the attention and the MLP both read the layer's input, and the layer
adds both writes at once; without it the MLP reads the residual after the attention's write, as in GPT-2. Either way
the stream is only ever added to, so the MLP's write is what the layer added less the attention's (the split QK
attribution makes, :meth:`~probes.scratch.prenorm.PreNormDecoder.residual_parts`). ``rotary_pct`` (or
``partial_rotary_factor``; Pythia's 0.25) turns only the first r numbers of each head, pairs (i, i + r/2).
Other ``rope_type``s (linear, dynamic, …) are refused by name.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from ..attention_math import Spec
from ..errors import UnsupportedModel
from ..precision import working_dtype
from . import llama
from .activations import ACTIVATIONS
from .attention import by_rows, merge_heads, split_heads
from .family import QKV, Family
from .weights import Weights

ROPE_TYPES = ("default",)


def check_config(config, name: str) -> None:
    """Refuse, by name, every GPT-NeoX option this file does not implement."""
    llama.check_config(config, name, title="GPT-NeoX", rope_types=ROPE_TYPES, partial_rotary=True)
    if getattr(config, "add_cross_attention", False):
        raise UnsupportedModel(f"{name!r}: add_cross_attention=True is not implemented by the from-scratch GPT-NeoX")


def layer_norm(x: torch.Tensor, norm: tuple[torch.Tensor, torch.Tensor], eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), *norm, eps)


class Layer:
    def __init__(self, w: Weights, i: int, config):
        p = f"layers.{i}."
        linear = lambda key: (w[p + key + ".weight"], w.get(p + key + ".bias"))  # noqa: E731
        self.n_heads = self.n_kv_heads = config.num_attention_heads
        self.ln_attn = (w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"])
        self.ln_mlp = (w[p + "post_attention_layernorm.weight"], w[p + "post_attention_layernorm.bias"])
        self.qkv_proj = linear("attention.query_key_value")
        self.o_proj = linear("attention.dense")
        self.fc_in, self.fc_out = linear("mlp.dense_h_to_4h"), linear("mlp.dense_4h_to_h")
        # the fused matrix's rows gathered by kind: [H·3·d, D] -> q's, k's, v's rows [H·d, D] each (copies)
        weight, bias = self.qkv_proj
        self.d = weight.shape[0] // (3 * self.n_heads)
        by_kind = lambda t: t.view(self.n_heads, 3, self.d, *t.shape[1:]).unbind(1)  # noqa: E731
        weights = [t.reshape(self.n_heads * self.d, -1) for t in by_kind(weight)]
        biases = [t.reshape(-1) for t in by_kind(bias)] if bias is not None else [None] * 3
        self.q_proj, self.k_proj, self.v_proj = zip(weights, biases, strict=True)
        self.parallel = config.use_parallel_residual
        self.eps = config.layer_norm_eps
        self.act = ACTIVATIONS[config.hidden_act]
        self.index = i
        self.spec = Spec(llama.attention_scale(config, i), causal=True)

    def project(self, h: torch.Tensor) -> QKV:
        """q, k, v ``[B, H, L, d]`` of the normed input ``h``, before the rotation: one product, each head's group
        of 3·d outputs cut in three (q_h | k_h | v_h), as Hugging Face's ``view`` and ``chunk`` do."""
        qkv = F.linear(h, *self.qkv_proj).view(*h.shape[:-1], self.n_heads, 3 * self.d).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        return q, k, v

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> QKV:
        q, k, v = self.project(layer_norm(x, self.ln_attn, self.eps))
        return llama.rotate(q, cos, sin), llama.rotate(k, cos, sin), v

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.act(F.linear(h, *self.fc_in)), *self.fc_out)

    def __call__(self, x, via, cos, sin, chunk=None):
        i = self.index
        z = via.attend(i, *self.qkv(x, cos, sin), self.spec)
        a = via.at("attn_out", i, F.linear(merge_heads(z), *self.o_proj))
        if self.parallel:  # both read x; the layer adds both writes (in Hugging Face's order: mlp + attn + x)
            m = via.at("mlp_out", i, by_rows(self.mlp, layer_norm(x, self.ln_mlp, self.eps), chunk))
            return m + a + x
        x = a + x  # sequential: x + attention, then x + MLP
        return via.at("mlp_out", i, by_rows(self.mlp, layer_norm(x, self.ln_mlp, self.eps), chunk)) + x


class GPTNeoX(llama.Llama):
    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "gpt_neox"):
        self.check(config, name)
        w = Weights(state_dict, strip="gpt_neox.", ignore_suffixes=("rotary_emb.inv_freq", "attention.bias",
                                                                     "attention.masked_bias"))
        self.config = config
        self.embed = w["embed_in.weight"]
        self.layers = [Layer(w, i, config) for i in range(config.num_hidden_layers)]
        self.ln_f = (w["final_layer_norm.weight"], w["final_layer_norm.bias"])
        self.eps = config.layer_norm_eps
        self.lm_head = w.get("lm_head.weight")  # Pythia's embed_out (transformers 5 names it lm_head); None: bare model
        w.check_all_used(name)

    @staticmethod
    def check(config, name: str) -> None:
        check_config(config, name)

    def rotary(self, length: int, device: torch.device | str = "cpu",
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return llama.rotary_tables(self.config, length, device, working_dtype(self.embed.dtype))

    def projected_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k of each part before the rotation: the LayerNorm with its σ frozen at ``x`` (each part centred on
        its own: centring is linear), the q and k rows of the fused matrix without their biases; the last entry is
        the constant, the norm's bias through them plus their biases."""
        lay, dt = self.layers[layer], parts.dtype
        g, b = (t.to(dt) for t in lay.ln_attn)
        sigma = torch.sqrt(x.to(dt).var(-1, unbiased=False, keepdim=True) + lay.eps)
        h = torch.cat([(parts - parts.mean(-1, keepdim=True)) / sigma * g, b.expand(1, *parts.shape[1:])])
        q, k = F.linear(h, lay.q_proj[0].to(dt)), F.linear(h, lay.k_proj[0].to(dt))
        for out, bias in ((q, lay.q_proj[1]), (k, lay.k_proj[1])):
            if bias is not None:
                out[-1] += bias.to(dt)
        return split_heads(q, lay.n_heads), split_heads(k, lay.n_heads)

    def head_weights(self, layer: int):
        """W_Q, W_K, W_V ``[H, D, d]`` gathered from the fused matrix, LayerNorm₁'s gain folded into their rows; no
        biases, no centring, no rotation (see :meth:`probes.scratch.family.SplitNetwork.head_weights`)."""
        lay = self.layers[layer]
        split = lambda w: (lay.ln_attn[0][:, None] * w.t()).reshape(w.shape[1], lay.n_heads, -1).transpose(0, 1)  # noqa: E731
        return split(lay.q_proj[0]), split(lay.k_proj[0]), split(lay.v_proj[0])

    def normed(self, x):
        return layer_norm(x, self.ln_f, self.eps)

    def final_norm(self, x: torch.Tensor):
        """The final LayerNorm with its σ frozen at ``x``: (c − mean(c)) ÷ σ(x) · g for any part c, plus its bias."""
        sigma = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps)
        weight, bias = self.ln_f
        return (lambda c: (c - c.mean(-1, keepdim=True)) / sigma * weight), bias


def capture(hf, config, cap) -> None:
    """The Hugging Face view's q, k, v: each layer's ``query_key_value`` output cut per head as GPT-NeoX's attention
    cuts it, q and k turned by the model's own tables and ``apply_rotary_pos_emb``."""
    heads = config.num_attention_heads
    for layer in hf.base_model.layers:
        attn = layer.attention
        raw: dict[str, torch.Tensor] = {}

        def cut(_m, _i, out, raw=raw):
            qkv = out.view(*out.shape[:-1], heads, -1).transpose(1, 2)
            raw.update(zip("qkv", qkv.chunk(3, dim=-1), strict=True))

        def rotated(module, _args, kwargs, _out, raw=raw):
            cos, sin = kwargs["position_embeddings"]
            q, k = sys.modules[type(module).__module__].apply_rotary_pos_emb(raw["q"], raw["k"], cos, sin)
            cap.q.append(q)
            cap.k.append(k)
            cap.v.append(raw["v"])
            cap.rotary = (cos, sin)

        cap.hook(attn.query_key_value, cut)
        cap.hook(attn, rotated, with_kwargs=True)


FAMILIES = (
    Family(name="gpt_neox", title="GPT-NeoX", model_types=("gpt_neox",), hf_class=llama.hf_class, network=GPTNeoX,
           check=check_config, capture=capture, scale=llama.attention_scale, positions="rotary",
           implemented="LayerNorm with biases (`layer_norm_eps`), the fused `query_key_value` (q, k and v "
                       "side by side per head), `attention_bias`, rotary positions (`rope_theta`) over "
                       "`rotary_pct` / `partial_rotary_factor` of each head, `use_parallel_residual` (True and "
                       "False), GELU MLP (`hidden_act`), untied `embed_out` or tied embeddings",
           refused="other `rope_type`s (linear, dynamic, …), rotary parameters per layer type, other activations, "
                   "`add_cross_attention`",
           examples=("EleutherAI/pythia-70m",)),
)
