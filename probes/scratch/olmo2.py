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

What it changes for the readers. **A head's write goes through the post norm.** ``head_out`` is W_O by head, and
z_h·W_O[h] is head h's share of the attention's output *before* ``post_attention_layernorm``, which is not linear.
Every reader of a head's write freezes that norm at the pass's own scale, as for Gemma 2's post-attention norm
(:meth:`Olmo2.attention_write_scale`, :func:`probes.scratch.writes.head_writes`): head h writes
g ⊙ z_h·W_O[h] ÷ rms(Σ_h z_h·W_O[h] + b), the bias b ⊙ the same, and the writes sum to what the attention added. So do
the ``attn.result`` point, QK attribution's residual parts, the lens's heads, direct logit attribution and path
patching (a sender's Δz_h·W_O[h] times the norm frozen at the clean pass). QK attribution freezes QK-norm at the rms
of the pass's whole q (k) there; composition scores fold QK-norm's gain into W_Q's and W_K's columns and the
post-attention norm's gain into W_O's (:func:`probes.scratch.writes.head_writer`), and leave out every norm's scale.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from ..precision import upcast
from . import llama
from .attention import by_rows, merge_heads, split_heads
from .family import QKV, Capture, Family, head_writes
from .weights import Weights


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """OLMo 2's RMSNorm: the gain multiplies the fp32 normed x before the cast back (Llama's multiplies after)."""
    h = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
    return (weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)


class Layer(llama.Layer):
    def __init__(self, w: Weights, i: int, config, window):
        p = f"layers.{i}."
        self.n_heads, self.n_kv_heads = config.num_attention_heads, llama.kv_heads(config)
        self.read_weights(w, p)
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

    def __call__(self, x, via, cos, sin, chunk=None):
        i = self.index
        z = via.attend(i, *self.qkv(x, cos, sin), self.spec)
        x = x + via.at("attn_out", i, rms_norm(F.linear(merge_heads(z), *self.o_proj), self.post_attn, self.eps))
        return x + via.at("mlp_out", i, rms_norm(by_rows(self.mlp, x, chunk), self.post_mlp, self.eps))


class Olmo2(llama.Llama):
    layer_class = Layer
    title = "OLMo 2"

    @staticmethod
    def check(config, name: str) -> None:
        llama.check_config(config, name, title="OLMo 2")

    def normed(self, x):
        return rms_norm(x, self.norm, self.eps)

    def attention_write_gain(self, layer: int) -> torch.Tensor:
        """The post-attention norm's gain g ``[D]`` (:func:`probes.scratch.writes.head_writer`: composition scores
        fold it into W_O's columns)."""
        return self.layers[layer].post_attn

    def attention_write_scale(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """The post-attention norm frozen at the pass whose head outputs are ``z`` ``[..., H, L, d]``: g ÷
        rms(Σ_h z_h·W_O[h] + b) ``[..., L, D]`` (:func:`probes.scratch.writes.write_scale`), in fp32 (float64 for a
        float64 ``z``): what each head's z_h·W_O[h], and the bias, are multiplied by on their way into the residual."""
        lay = self.layers[layer]
        w_o, b_o = self.head_out(layer)
        whole = upcast(torch.einsum("...hld,hdD->...lD", z, w_o.to(z.dtype)))  # the output projection, all heads
        if b_o is not None:
            whole = whole + b_o.to(whole.dtype)
        return lay.post_attn.to(whole.dtype) * torch.rsqrt(whole.pow(2).mean(-1, keepdim=True) + lay.eps)

    def residual_parts(self, layer, input_ids, token_type_ids, inputs, z, positions, dtype):
        """As the pre-norm decoders', with each layer's post-attention RMSNorm frozen at its scale in this pass:
        head h's part is g ⊙ z_h·W_O[h] ÷ rms (the bias's, b ⊙ the same), so the heads and the bias sum to what the
        attention added; the MLP's part is what the layer added less that."""
        at = lambda t: t[0, positions].to(dtype)  # noqa: E731
        parts = {"token embedding": self.embed[input_ids[0, positions]].to(dtype)}
        biases = None
        for i in range(layer):
            zi = z[i][0][:, positions].to(dtype)  # [H, n, d]
            writes = head_writes(self, i, zi)  # [H, n, D], the post-norm frozen
            added = writes.sum(0)
            b_o = self.head_out(i)[1]
            if b_o is not None:
                bias = b_o.to(dtype) * self.attention_write_scale(i, zi).to(dtype)
                added = added + bias
                biases = bias if biases is None else biases + bias
            parts.update((f"head {i}.{h}", write) for h, write in enumerate(writes))
            parts[f"MLP {i}"] = at(inputs[i + 1]) - at(inputs[i]) - added
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
                   "type, other activations",
           examples=("allenai/OLMo-2-0425-1B",)),
)
