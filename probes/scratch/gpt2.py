"""GPT-2, from scratch, over the weights of a Hugging Face checkpoint.

    x = wte[token] + wpe[position]
    for each block:   x = x + attn(ln_1(x))        (pre-LayerNorm)
                      x = x + mlp(ln_2(x))
    x = ln_f(x);  logits = x · wteᵀ

GPT-2 stores its linear layers as ``Conv1D``: the weight is ``[in, out]`` (the transpose of
``nn.Linear``), so a layer is ``x @ W + b``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention_math import Spec
from ..errors import UnsupportedModel
from .activations import ACTIVATIONS
from .attention import by_rows, merge_heads, split_heads
from .family import Capture, Family
from .prenorm import PreNormDecoder
from .weights import Weights


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight).view(*x.shape[:-1], weight.shape[-1])


def check_config(config, name: str) -> None:
    """Refuse, by name, every GPT-2 option this file does not implement."""
    if config.activation_function not in ACTIVATIONS:
        raise UnsupportedModel(
            f"{name!r}: activation_function={config.activation_function!r} is not implemented by the "
            f"from-scratch GPT-2 (it has {', '.join(sorted(ACTIVATIONS))})"
        )
    if getattr(config, "add_cross_attention", False):
        raise UnsupportedModel(f"{name!r}: add_cross_attention=True (an encoder-decoder GPT-2) is not supported")


def attention_scale(config, layer: int) -> float:
    """What block ``layer`` multiplies q·kᵀ by: 1/√d_k unless the config turns it off, and ÷ (layer + 1)
    if it asks (``scale_attn_by_inverse_layer_idx``)."""
    scale = (config.n_embd // config.n_head) ** -0.5 if config.scale_attn_weights else 1.0
    if config.scale_attn_by_inverse_layer_idx:
        scale /= float(layer + 1)
    return scale


class Block:
    def __init__(self, w: Weights, i: int, config):
        p = f"h.{i}."
        self.ln_1 = (w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        self.c_attn = (w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"])
        self.c_proj = (w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        self.ln_2 = (w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        self.c_fc = (w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"])
        self.mlp_proj = (w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
        self.n_heads = config.n_head
        self.width = config.n_embd
        self.eps = config.layer_norm_epsilon
        self.act = ACTIVATIONS[config.activation_function]
        self.index = i
        self.spec = Spec(attention_scale(config, i), causal=True)
        # reorder_and_upcast_attn computes the scores in fp32 with the scale folded into the matmul:
        # we always run in fp32, so it is the same attention (only rounding order differs)

    def qkv(self, x):
        """q, k, v ``[B, H, L, d]`` of this block, from its input (the residual stream)."""
        h = F.layer_norm(x, (self.width,), *self.ln_1, self.eps)
        q, k, v = conv1d(h, *self.c_attn).split(self.width, dim=-1)
        return tuple(split_heads(t, self.n_heads) for t in (q, k, v))

    def mlp(self, h):
        return conv1d(self.act(conv1d(h, *self.c_fc)), *self.mlp_proj)

    def __call__(self, x, via, chunk=None):
        i = self.index
        z = via.attend(i, *self.qkv(x), self.spec)
        x = x + via.at("attn_out", i, conv1d(merge_heads(z), *self.c_proj))  # x + attention: the residual
        h = F.layer_norm(x, (self.width,), *self.ln_2, self.eps)
        return x + via.at("mlp_out", i, by_rows(self.mlp, h, chunk))  # x + MLP: the residual


class GPT2(PreNormDecoder):
    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "gpt2"):
        check_config(config, name)
        w = Weights(state_dict, strip="transformer.", ignore_suffixes=("attn.bias", "attn.masked_bias"))
        self.wte = w["wte.weight"]
        self.wpe = w["wpe.weight"]
        self.blocks = [Block(w, i, config) for i in range(config.n_layer)]
        self.layers = self.blocks  # the same list, under the name the layer loop and the Protocol read
        self.ln_f = (w["ln_f.weight"], w["ln_f.bias"])
        self.eps = config.layer_norm_epsilon
        self.width = config.n_embd
        self.lm_head = w.get("lm_head.weight")  # tied to wte in every released GPT-2
        if self.lm_head is None:
            self.lm_head = self.wte
        w.check_all_used(name)

    def embeddings(self, input_ids, token_type_ids, start):
        positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)
        x = self.wte[input_ids] + self.wpe[positions][None]
        if token_type_ids is not None:  # GPT-2 reuses the token embeddings for token types
            x = x + self.wte[token_type_ids]
        return x

    def embedding_parts(self, input_ids, token_type_ids, positions):
        """The embeddings of item 0 at ``positions`` as the parts :meth:`embeddings` adds: ``{name: [n, D]}``."""
        parts = {"token embedding": self.wte[input_ids[0, positions]], "position embedding": self.wpe[positions]}
        if token_type_ids is not None:
            parts["token-type embedding"] = self.wte[token_type_ids[0, positions]]
        return parts

    def qk_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor, positions: torch.Tensor, length: int):
        """q and k of block ``layer`` for each part of its input: ln_1 with its σ frozen at ``x`` (each part centred
        on its own: centring is linear) and c_attn without its bias; the last entry is the constant, ln_1's bias
        through c_attn plus c_attn's bias (see :meth:`probes.scratch.family.SplitNetwork.qk_parts`)."""
        block, dt = self.blocks[layer], parts.dtype
        g, b = (t.to(dt) for t in block.ln_1)
        sigma = torch.sqrt(x.to(dt).var(-1, unbiased=False, keepdim=True) + self.eps)
        h = torch.cat([(parts - parts.mean(-1, keepdim=True)) / sigma * g, b.expand(1, *parts.shape[1:])])
        weight, bias = (t.to(dt) for t in block.c_attn)
        q, k, _ = (h @ weight).split(self.width, dim=-1)
        q_bias, k_bias, _ = bias.split(self.width)
        q[-1] += q_bias
        k[-1] += k_bias
        return split_heads(q, block.n_heads), split_heads(k, block.n_heads)

    def head_weights(self, layer: int):
        """Block ``layer``'s W_Q, W_K, W_V ``[H, D, d]`` from c_attn (Conv1D: x·W already), ln_1's gain folded into
        their rows; no biases, no centring (see :meth:`probes.scratch.family.SplitNetwork.head_weights`)."""
        block = self.blocks[layer]
        weight = block.ln_1[0][:, None] * block.c_attn[0]  # [D, 3D]: row i scaled by the gain of dim i
        return tuple(w.view(self.width, block.n_heads, -1).transpose(0, 1) for w in weight.split(self.width, dim=-1))

    def normed(self, x):
        return F.layer_norm(x, (self.width,), *self.ln_f, self.eps)

    def head_out(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Block ``layer``'s output projection split by head: ``W_O`` ``[H, d, D]`` (head h writes z_h·W_O[h]
        into the residual stream) and the bias added once for all heads."""
        weight, bias = self.blocks[layer].c_proj  # Conv1D: [H·d, D] already
        return weight.view(self.blocks[layer].n_heads, -1, weight.shape[-1]), bias

    def final_norm(self, x: torch.Tensor):
        """The final LayerNorm with its scale frozen at ``x`` (the residual before it): a linear map of any part
        c of the residual, (c − mean(c)) ÷ σ(x) · g, whose sum over the parts plus the bias is the normed x."""
        sigma = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps)
        weight, bias = self.ln_f
        return (lambda c: (c - c.mean(-1, keepdim=True)) / sigma * weight), bias


def capture(hf, config, cap: Capture) -> None:
    """The Hugging Face view's q, k, v: the output of each block's ``c_attn``, split in three."""
    def grab(_module, _inp, out):
        for name, t in zip("qkv", out.split(config.hidden_size, dim=2), strict=True):
            getattr(cap, name).append(split_heads(t, config.num_attention_heads))

    for block in hf.base_model.h:
        cap.hook(block.attn.c_attn, grab)


FAMILIES = (Family(
    name="gpt2", title="GPT-2", model_types=("gpt2",), hf_class=lambda config: "GPT2LMHeadModel",
    network=GPT2, check=check_config, capture=capture, scale=attention_scale,
    implemented="`scale_attn_weights`, `scale_attn_by_inverse_layer_idx`, `reorder_and_upcast_attn` (same math in "
                "fp32), `activation_function` (every name in `activations.py`), `n_inner`, `layer_norm_epsilon`",
    refused="other activations, `add_cross_attention`",
    examples=("gpt2", "distilgpt2", "gpt2-medium"),
    float64_refused=lambda config: ("reorder_and_upcast_attn=True: Hugging Face's GPT-2 then computes its scores in "
                                    "float32 by design" if getattr(config, "reorder_and_upcast_attn", False) else None),
),)
