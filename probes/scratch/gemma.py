"""Gemma 2, from scratch: a Llama-shaped decoder (:mod:`probes.scratch.llama`'s rotary code) with sandwich norms,
soft-capped scores and logits, scaled embeddings and alternating local and global layers.

    x = embed[token] · √D                     (√D rounded to fp32, then to the embedding's dtype, as HF's buffer)
    for each layer:   h = RMSNorm₁(x)                         (every RMSNorm: x ÷ rms(x) · (1 + w), in fp32)
                      q, k, v = h·W_q, h·W_k, h·W_v;  q, k = rotate(q), rotate(k)
                      s = q·kᵀ · query_pre_attn_scalar^−½;  s = cap·tanh(s / cap)   (attn_logit_softcapping)
                      s = s + mask                          (local layers: a sliding window; global: causal only)
                      x = x + RMSNorm₂(softmax(s)·v·W_o)     (post_attention_layernorm: AFTER the attention)
                      x = x + RMSNorm₄(MLP(RMSNorm₃(x)))     (pre_ and post_feedforward_layernorm; gelu-tanh GeGLU)
    x = RMSNorm(x);  logits = x·Eᵀ;  logits = cap·tanh(logits / cap)                 (final_logit_softcapping)

What it changes for the readers.

* *Soft-capping* makes a score non-linear in q·k. Every backend caps before the mask (the eager formula, the KV
  cache step, :func:`~probes.attention_math.row_logsumexp` and the lazy Trace's recovery exp(capped score − lse));
  torch's fused kernels and the Triton kernel cannot cap, so a capped layer runs the formula and keeps one
  logsumexp per row (kernel ``softcap_math``, said in the trace's note). The ``attn.scores`` hook point sees the
  scores after the cap (and the mask). QK attribution (:meth:`Gemma2.qk_parts`) splits the PRE-CAP score: the parts
  sum to q·k·scale, and the cap is applied after, to the whole.
* *The post-attention norm* is not linear in the heads' writes. Every reader of a head's write freezes it at the
  pass's own scale (:meth:`Gemma2.attention_write_scale`, :func:`probes.scratch.family.head_writes`): head h writes
  (1 + w)·(z_h·W_O[h]) ÷ rms(Σ_h z_h·W_O[h]), and the heads' writes sum to what the attention added. So do QK
  attribution's residual parts, the ``attn.result`` point (an edit of it is summed with the norm held frozen), the
  lens's heads and direct logit attribution; path patching multiplies a sender's Δz_h·W_O[h] by the norm frozen at
  the clean pass. ``head_out`` is the raw output projection by head (before the post-norm); composition scores fold
  the post-norm's gain into W_O (:func:`probes.scratch.family.head_writer`) and leave its scale out, as every norm's.
  Head ablation and activation patching rerun the layer, the norm included: exact with no freezing.
* *The final soft-cap*: the model's logits (the lens's last row, generation, the next-token measures of ablation and
  path patching) are capped. Direct logit attribution splits a logit into a sum, which the cap is not: it is refused
  where the cap is on; the lens's heads show each head's pre-cap direct logit contribution.

Hugging Face's Gemma RMSNorm computes in fp32 whatever the dtype (``x.float()``), so its float64 pass is not a
float64 computation: the float64 proof against it is refused (``float64_refused``). Parity is bit for bit in fp32
eager, within tolerance on the lazy backends, and the tests prove float64 (eager and sdpa, ≤ 1e-10) against Hugging
Face's own code with only that norm made to compute in its input's dtype (``tests/checkpoints.py``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..attention_math import Spec
from ..errors import UnsupportedModel
from ..precision import upcast
from . import llama
from .activations import ACTIVATIONS
from .attention import by_rows, merge_heads
from .family import Family, head_writes
from .weights import Weights

ROPE_TYPES = ("default",)
LAYER_TYPES = ("sliding_attention", "full_attention")  # local (a sliding window) and global layers


def gemma_norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm: x ÷ √(mean(x²) + ε) · gain, in fp32 (float64 for a float64 pass), then back to x's dtype;
    ``gain`` is 1 + w, already in that precision (:func:`gain`)."""
    h = upcast(x)
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * gain).to(x.dtype)


def gain(w: torch.Tensor) -> torch.Tensor:
    """1 + w, in fp32 (or float64): Gemma's norm weights are stored as the gain less one."""
    return 1.0 + upcast(w)


def attention_scale(config, layer: int) -> float:
    """query_pre_attn_scalar^−½ (not head_dim^−½)."""
    return config.query_pre_attn_scalar ** -0.5


def window(config, layer: int) -> int | None:
    """The sliding window on the layers ``layer_types`` calls ``sliding_attention`` (local), none on the others."""
    types = getattr(config, "layer_types", None) or []
    return config.sliding_window if layer < len(types) and types[layer] == "sliding_attention" else None


def attn_softcap(config, layer: int) -> float | None:
    return getattr(config, "attn_logit_softcapping", None)


def check(config, name: str, title: str = "Gemma 2", per_layer_rope: bool = False,
          rope_types: tuple[str, ...] = ROPE_TYPES) -> None:
    """Refuse by name what the code below does not implement (``title``: the family the message names;
    ``per_layer_rope``: whether rotary parameters per layer type are implemented, as Gemma 3's code turns each layer
    by its type's own table; ``rope_types``: the ones it implements)."""
    act = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
    if act not in ACTIVATIONS:
        raise UnsupportedModel(f"{name!r}: hidden_activation={act!r} is not implemented by the from-scratch {title}")
    params = llama.rope_parameters(config)
    if any(isinstance(v, dict) for v in params.values()) and not per_layer_rope:
        raise UnsupportedModel(f"{name!r}: rope_parameters differ per layer type, which the from-scratch {title} does "
                               "not implement; the Hugging Face view still works")
    for kind, each in ({None: params} if not per_layer_rope else rope_by_type(config, name, title)).items():
        where = f" (the {kind} layers')" if kind else ""
        if each["rope_type"] not in rope_types:
            raise UnsupportedModel(f"{name!r}: rope_type={each['rope_type']!r}{where} is not implemented by the "
                                   f"from-scratch {title} (it has {', '.join(rope_types)}); the Hugging Face view "
                                   "still works")
        if each.get("partial_rotary_factor", 1.0) != 1.0 or llama.head_dim(config) % 2:
            raise UnsupportedModel(f"{name!r}: partial_rotary_factor{where} or an odd head_dim is not implemented by "
                                   f"the from-scratch {title}")
    if getattr(config, "use_bidirectional_attention", None):
        raise UnsupportedModel(f"{name!r}: use_bidirectional_attention (EmbeddingGemma) is not implemented by the "
                               f"from-scratch {title}: it is causal")
    if config.num_attention_heads % llama.kv_heads(config):
        raise UnsupportedModel(f"{name!r}: {config.num_attention_heads} query heads cannot share "
                               f"{llama.kv_heads(config)} key/value heads evenly")


def rope_by_type(config, name: str, title: str) -> dict[str, dict]:
    """The rotary parameters of each layer type the layers use (``layer_types``), by type: Gemma 3's
    ``rope_parameters`` is a dict keyed by ``sliding_attention`` and ``full_attention``, each with its own
    ``rope_theta`` and ``rope_type``. Refuses by name a layer type it does not know or a type without parameters."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    out = {}
    for kind in dict.fromkeys(getattr(config, "layer_types", None) or []):
        if kind not in LAYER_TYPES:
            raise UnsupportedModel(f"{name!r}: layer type {kind!r} is not implemented by the from-scratch {title} (it "
                                   f"has {', '.join(LAYER_TYPES)}); the Hugging Face view still works")
        each = params.get(kind) if isinstance(params.get(kind), dict) else None
        if each is None or "rope_theta" not in each:
            raise UnsupportedModel(f"{name!r}: rope_parameters has no rope_theta for the {kind} layers, which the "
                                   f"from-scratch {title} needs (one table per layer type)")
        out[kind] = {"rope_type": each.get("type", "default"), **each}
    return out


def float64_refused(config) -> str:
    return ("Hugging Face's Gemma RMSNorm computes in fp32 whatever the model's dtype (x.float()), so its float64 "
            "pass is not a float64 computation to prove against")


class Layer(llama.Layer):
    def __init__(self, w: Weights, i: int, config, window: int | None):
        p = f"layers.{i}."
        self.n_heads, self.n_kv_heads = config.num_attention_heads, llama.kv_heads(config)
        self.read_weights(w, p)
        self.norm_attn = gain(w[p + "input_layernorm.weight"])  # 1 + w (what llama's frozen-norm readers fold)
        self.post_attn = gain(w[p + "post_attention_layernorm.weight"])
        self.norm_mlp = gain(w[p + "pre_feedforward_layernorm.weight"])
        self.post_mlp = gain(w[p + "post_feedforward_layernorm.weight"])
        self.eps = config.rms_norm_eps
        self.act = ACTIVATIONS[config.hidden_activation]
        self.index = i
        self.spec = Spec(attention_scale(config, i), causal=True, window=window, softcap=attn_softcap(config, i))

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        q, k, v = self.project(gemma_norm(x, self.norm_attn, self.eps))
        return llama.rotate(q, cos, sin), llama.rotate(k, cos, sin), v

    def __call__(self, x, via, cos, sin, chunk=None):
        i = self.index
        z = via.attend(i, *self.qkv(x, cos, sin), self.spec)
        out = gemma_norm(F.linear(merge_heads(z), *self.o_proj), self.post_attn, self.eps)  # the post-norm: after
        x = x + via.at("attn_out", i, out)
        h = gemma_norm(x, self.norm_mlp, self.eps)
        return x + via.at("mlp_out", i, gemma_norm(by_rows(self.mlp, h, chunk), self.post_mlp, self.eps))


class Gemma2(llama.Llama):
    layer_class: type[llama.Layer] = Layer
    title = "Gemma 2"

    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "gemma2"):
        self.check(config, name)
        w = Weights(state_dict, strip="model.", ignore_suffixes=("rotary_emb.inv_freq", "embed_scale"))
        self.config = config
        self.embed = w["embed_tokens.weight"]
        # √D as Hugging Face's buffer holds it: made in fp32, then cast to the embedding's dtype (so a float64 copy
        # multiplies by fp32's √D, as Hugging Face's cast model does)
        self.embed_scale = torch.tensor(config.hidden_size ** 0.5, dtype=torch.float32).to(self.embed.dtype)
        self.layers = [self.layer_class(w, i, config, window(config, i)) for i in range(config.num_hidden_layers)]
        self.norm = gain(w["norm.weight"])
        self.eps = config.rms_norm_eps
        self.lm_head = w.get("lm_head.weight")
        if self.lm_head is None and getattr(config, "tie_word_embeddings", True):
            self.lm_head = self.embed
        self.logit_softcap = getattr(config, "final_logit_softcapping", None)
        w.check_all_used(name)

    @staticmethod
    def check(config, name: str) -> None:
        check(config, name)

    def embeddings(self, input_ids, token_type_ids, start):
        return self.embed[input_ids] * self.embed_scale.to(self.embed.device)

    def embedding_parts(self, input_ids, token_type_ids, positions):
        return {"token embedding": self.embed[input_ids[0, positions]] * self.embed_scale.to(self.embed.device)}

    def normed(self, x):
        return gemma_norm(x, self.norm, self.eps)

    def final_norm(self, x: torch.Tensor):
        """The final norm with its scale frozen at ``x``: c ÷ rms(x) · (1 + w), no bias."""
        scale = torch.rsqrt(upcast(x).pow(2).mean(-1, keepdim=True) + self.eps)
        return (lambda c: self.norm * (c * scale)), None

    def attention_write_gain(self, layer: int) -> torch.Tensor:
        """The post-attention norm's gain 1 + w ``[D]`` (:func:`probes.scratch.family.head_writer`: composition
        scores fold it into W_O's columns)."""
        return self.layers[layer].post_attn

    def attention_write_scale(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """The post-attention norm frozen at the pass whose head outputs are ``z`` ``[..., H, L, d]``: (1 + w) ÷
        rms(Σ_h z_h·W_O[h]) ``[..., L, D]`` (:func:`probes.scratch.family.write_scale`), in fp32 (float64 for a
        float64 ``z``), what each head's z_h·W_O[h] is multiplied by on its way into the residual stream."""
        lay = self.layers[layer]
        w_o, _b = self.head_out(layer)
        whole = upcast(torch.einsum("...hld,hdD->...lD", z, w_o.to(z.dtype)))  # the output projection, all heads
        return lay.post_attn.to(whole.dtype) * torch.rsqrt(whole.pow(2).mean(-1, keepdim=True) + lay.eps)

    def residual_parts(self, layer, input_ids, token_type_ids, inputs, z, positions, dtype):
        """As :meth:`probes.scratch.prenorm.PreNormDecoder.residual_parts`, with each layer's post-attention norm
        frozen at its scale in this pass: head h's part is (1 + w)·(z_h·W_O[h]) ÷ rms(Σ_h z_h·W_O[h]), so the heads'
        parts sum to what the attention added; an MLP's part is what its layer added less that."""
        at = lambda t: t[0, positions].to(dtype)  # noqa: E731
        parts = {name: e.to(dtype) for name, e in self.embedding_parts(input_ids, token_type_ids, positions).items()}
        for i in range(layer):
            writes = head_writes(self, i, z[i][0][:, positions].to(dtype))  # [H, n, D], the post-norm frozen
            parts.update((f"head {i}.{h}", write) for h, write in enumerate(writes))
            parts[f"MLP {i}"] = at(inputs[i + 1]) - at(inputs[i]) - writes.sum(0)
        return parts

    def head_out(self, layer: int):
        """Layer ``layer``'s output projection by head, before the post-attention norm: ``W_O`` ``[H, d, D]``, no
        bias. What a head adds to the residual is this write through the post-norm, not linear in the heads."""
        return super().head_out(layer)


FAMILIES = (
    Family(name="gemma2", title="Gemma 2", model_types=("gemma2",), hf_class=llama.hf_class, network=Gemma2,
           check=Gemma2.check, capture=llama.capture, scale=attention_scale, kv_heads=llama.kv_heads,
           head_dim=llama.head_dim, window=window, softcap=attn_softcap, positions="rotary",
           float64_refused=float64_refused,
           implemented="sandwich RMSNorms with (1 + w) in fp32 (`input_layernorm`, `post_attention_layernorm` after "
                       "the attention, `pre_feedforward_layernorm`, `post_feedforward_layernorm`), embeddings × √D, "
                       "`query_pre_attn_scalar`, `attn_logit_softcapping` (cap·tanh(s / cap) before the mask), "
                       "`final_logit_softcapping`, local and global layers (`layer_types`, `sliding_window`), "
                       "grouped-query attention, `head_dim` ≠ hidden / heads, GeGLU MLP (`hidden_activation`), "
                       "tied embeddings",
           refused="other `rope_type`s, rotary parameters per layer type, `use_bidirectional_attention`, other "
                   "activations; direct logit attribution with `final_logit_softcapping` on; the float64 proof "
                   "against HF's own code (its RMSNorm computes in fp32: proven instead with that norm in float64)",
           examples=()),  # gemma-2-2b is 2.6 billion parameters (10 GB in fp32) and gated: typed by hub id
)
