"""OLMo 2, from scratch: Llama's rotary body (:mod:`probes.scratch.llama`'s code) with its norms after the sublayers
and QK-norm over the whole projection.

    x = embed[token]
    for each layer:   q, k, v = x·W_q, x·W_k, x·W_v           (no norm before the attention: it reads the raw residual)
                      q, k = RMSNorm_q(q), RMSNorm_k(k)       (QK-norm over all H·d (H_kv·d) numbers, before the split)
                      q, k = rotate(q, position), rotate(k, position)
                      x = x + RMSNorm_attn(attention(q, k, v)·W_o)          (the norm after the sublayer)
                      x = x + RMSNorm_mlp((silu(x·W_gate) ⊙ x·W_up)·W_down)
    x = RMSNorm(x);  logits = x·W_lmᵀ

Unlike Qwen3's QK-norm (one gain of d numbers, each head normed alone), OLMo 2's normalises q as one vector of H·d
numbers, so a head's q depends on every head's projection. Its RMSNorm multiplies the gain before casting back
(Llama's after): the same numbers in fp32 and float64.

What it changes for the readers. **A head's write is before the post norm.** ``head_out`` is W_O by head, and
z_h·W_O[h] (the ``attn.result`` point, the value-weighted norms) is head h's share of the attention's output
*before* ``post_attention_layernorm``: the norm is not linear, so the attention's write into the residual (the
``attn_out`` point) is not the sum of the heads' writes and the bias. QK attribution freezes that norm at the rms of
the attention's own output there (:meth:`Olmo2.residual_parts`: head h's part is g ⊙ z_h·W_O[h] ÷ rms, and the parts
sum to the write); the features that add z_h·W_O[h] to the residual or read it through the final norm as the head's
direct effect (direct logit attribution, path patching, the logit lens's head rows) refuse by name
(``post_attention_norm``, :func:`~probes.scratch.family.require_head_writes`). QK attribution freezes QK-norm at the
rms of the pass's whole q (k) there; composition scores fold QK-norm's gain into W_Q's and W_K's columns and leave
out its scale and the post-attention norm (gain and scale), like every norm's scale.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from . import llama
from .attention import by_rows, merge_heads, split_heads
from .family import QKV, Capture, Family
from .weights import Weights


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """OLMo 2's RMSNorm: the gain multiplies the fp32 normed x before the cast back (Llama's multiplies after)."""
    h = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
    return (weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)


class Layer(llama.Layer):
    def __init__(self, w: Weights, i: int, config, window):
        p = f"layers.{i}."
        self.n_heads, self.n_kv_heads = config.num_attention_heads, llama.kv_heads(config)
        self.load(w, p)
        self.q_norm, self.k_norm = w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"]  # [H·d]
        self.post_attn = w[p + "post_attention_layernorm.weight"]
        self.post_mlp = w[p + "post_feedforward_layernorm.weight"]
        self.eps = config.rms_norm_eps
        self.act = llama.ACTIVATIONS[config.hidden_act]
        self.index = i
        self.spec = llama.Spec(llama.attention_scale(config, i), causal=True, window=window)

    def project(self, h: torch.Tensor) -> QKV:
        q = rms_norm(F.linear(h, *self.q_proj), self.q_norm, self.eps)  # QK-norm over the whole projection
        k = rms_norm(F.linear(h, *self.k_proj), self.k_norm, self.eps)
        v = F.linear(h, *self.v_proj)
        return split_heads(q, self.n_heads), split_heads(k, self.n_kv_heads), split_heads(v, self.n_kv_heads)

    def qkv(self, x, cos, sin):
        q, k, v = self.project(x)  # no norm before the attention
        return llama.rotate(q, cos, sin), llama.rotate(k, cos, sin), v

    def __call__(self, x, run, cos, sin, chunk=None):
        i = self.index
        z = run.attend(i, *self.qkv(x, cos, sin), self.spec)
        x = x + run.at("attn_out", i, rms_norm(F.linear(merge_heads(z), *self.o_proj), self.post_attn, self.eps))
        return x + run.at("mlp_out", i, rms_norm(by_rows(self.mlp, x, chunk), self.post_mlp, self.eps))


class Olmo2(llama.Llama):
    layer_class = Layer
    post_attention_norm = True  # the attention's output is normed after W_O: a head's write is not its residual part

    @staticmethod
    def check(config, name: str) -> None:
        llama.check_config(config, name, title="OLMo 2")

    def normed(self, x):
        return rms_norm(x, self.norm, self.eps)

    def residual_parts(self, layer, input_ids, token_type_ids, inputs, z, positions, dtype):
        """As the pre-norm decoders', with each layer's post-attention RMSNorm frozen at the rms of the attention's
        own output there (Σ heads + bias): head h's part is g ⊙ z_h·W_O[h] ÷ rms, so the heads and the bias sum to
        what the attention added; the MLP's part is what the layer added less that."""
        at = lambda t: t[0, positions].to(dtype)  # noqa: E731
        parts = {"token embedding": self.embed[input_ids[0, positions]].to(dtype)}
        biases = None
        for i in range(layer):
            lay = self.layers[i]
            w_o, b_o = self.head_out(i)
            writes = torch.einsum("hnd,hdD->hnD", z[i][0][:, positions].to(dtype), w_o.to(dtype))
            raw = writes.sum(0) + (b_o.to(dtype) if b_o is not None else 0)
            scale = lay.post_attn.to(dtype) * torch.rsqrt(raw.pow(2).mean(-1, keepdim=True) + lay.eps)
            parts.update((f"head {i}.{h}", write * scale) for h, write in enumerate(writes))
            if b_o is not None:
                biases = b_o.to(dtype) * scale if biases is None else biases + b_o.to(dtype) * scale
            parts[f"MLP {i}"] = at(inputs[i + 1]) - at(inputs[i]) - raw * scale
        if biases is not None:
            parts["biases"] = biases
        return parts

    def projected_parts(self, layer, parts, x):
        """q and k of each part before the rotation: no norm before the projections (the attention reads the raw
        residual), the projections without biases (the biases in the last entry), then QK-norm over the whole
        projection frozen at the rms of the whole q (k) there: q(part) ÷ rms(q) · g_q."""
        lay, dt = self.layers[layer], parts.dtype
        h = torch.cat([parts, parts.new_zeros(1, *parts.shape[1:])])
        out = []
        for (weight, bias), gain, heads in ((lay.q_proj, lay.q_norm, lay.n_heads),
                                            (lay.k_proj, lay.k_norm, lay.n_kv_heads)):
            t = F.linear(h, weight.to(dt))
            if bias is not None:
                t[-1] += bias.to(dt)
            scale = torch.rsqrt(t.sum(0).pow(2).mean(-1, keepdim=True) + lay.eps)  # [n, 1]: over all H·d
            out.append(split_heads(gain.to(dt) * (t * scale), heads))
        return out[0], out[1]

    def head_weights(self, layer: int):
        """W_Q ``[H, D, d]``, W_K and W_V ``[H_kv, D, d]``, QK-norm's gain (one number per column of the whole
        projection) folded into W_Q's and W_K's columns; no norm before the projections; QK-norm's scale and the
        post-attention norm left out."""
        lay = self.layers[layer]
        split = lambda w, n, g: (w.t() * g).reshape(w.shape[1], n, -1).transpose(0, 1)  # noqa: E731
        ones = torch.ones(lay.v_proj[0].shape[0], dtype=lay.v_proj[0].dtype)
        return (split(lay.q_proj[0], lay.n_heads, lay.q_norm), split(lay.k_proj[0], lay.n_kv_heads, lay.k_norm),
                split(lay.v_proj[0], lay.n_kv_heads, ones))


def catch_normed(attn, config, cap: Capture, raw: dict[str, torch.Tensor]) -> None:
    heads = {"q": config.num_attention_heads, "k": llama.kv_heads(config)}
    for key in "qk":
        cap.hook(getattr(attn, f"{key}_norm"),
                 lambda _m, _i, out, key=key: raw.__setitem__(key, split_heads(out, heads[key])))
    cap.hook(attn.v_proj, lambda _m, _i, out: raw.__setitem__("v", split_heads(out, llama.kv_heads(config))))


FAMILIES = (
    Family(name="olmo2", title="OLMo 2", model_types=("olmo2",), hf_class=llama.hf_class,
           network=partial(Olmo2, window=llama.no_window), check=Olmo2.check,
           capture=partial(llama.capture, catch=catch_normed), scale=llama.attention_scale, kv_heads=llama.kv_heads,
           head_dim=llama.head_dim, positions="rotary",
           implemented="as Llama (RMSNorm, rotary positions with `rope_theta`, grouped-query attention, SwiGLU MLP, "
                       "tied or untied embeddings, `attention_bias`, `rms_norm_eps`), with the norms after the "
                       "sublayers (`post_attention_layernorm`, `post_feedforward_layernorm`; none before) and QK-norm "
                       "over the whole projection (`q_norm`, `k_norm`: an RMSNorm over all H·d numbers of q and of k)",
           refused="other `rope_type`s (yarn, longrope, …), `partial_rotary_factor` < 1, rotary parameters per layer "
                   "type, other activations; direct logit attribution, path patching and the lens's head rows (a "
                   "head's write is before the post-attention norm)",
           examples=("allenai/OLMo-2-0425-1B",)),
)
