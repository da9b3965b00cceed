"""Llama, from scratch, over the weights of a Hugging Face checkpoint; Mistral (a sliding window) and
Qwen2 (q/k/v biases, and a window on some layers) are records on the same code, and Qwen3 (``qwen3.py``: QK-norm)
and Phi-3 (``phi3.py``: fused projections, a partial rotary) bring their own layer (:meth:`Layer.read_weights`,
:meth:`Layer.project`, :meth:`Layer.mlp`) to it.

    x = embed[token]                                        (no position table: positions are rotations)
    for each layer:   h = RMSNorm(x)
                      q, k, v = h·W_q, h·W_k, h·W_v           (k and v with fewer heads: grouped-query)
                      q, k = rotate(q, position), rotate(k, position)      (rotary position embedding)
                      x = x + attention(q, k, v)·W_o
                      h = RMSNorm(x)
                      x = x + (silu(h·W_gate) ⊙ h·W_up)·W_down                  (SwiGLU)
    x = RMSNorm(x);  logits = x·W_lmᵀ                     (W_lm is the embedding when they are tied)

Rotary position embedding (Su et al. 2021): each head vector is read as d/2 pairs of numbers, and
pair i at position p is turned by the angle p·ω_i, with ω_i = θ^(−2i/d) (θ = ``rope_theta``). Rotating
q and k by their own positions makes q·k depend on how far apart they are, not where they are. Like
Hugging Face, the pairs are (x_i, x_{i + d/2}) (the "rotate half" layout). ``rope_parameters`` picks
how ω is stretched for long contexts: ``default``, ``linear``, ``dynamic`` (NTK) and ``llama3`` are
implemented; any other type is refused by name. A partial rotary (Phi-3's ``partial_rotary_factor``) turns only
the first r numbers of each head, as pairs (x_i, x_{i + r/2}), and passes the rest.
"""

from __future__ import annotations

import math
import sys
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from ..attention_math import Spec
from ..errors import UnsupportedModel
from ..precision import upcast, working_dtype
from .activations import ACTIVATIONS
from .attention import by_rows, merge_heads, split_heads
from .family import QKV, Capture, Family
from .prenorm import PreNormDecoder
from .weights import Weights

ROPE_TYPES = ("default", "linear", "dynamic", "llama3")


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def kv_heads(config) -> int:
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def rotary_dim(config) -> int:
    """How many of a head's d numbers the rotation turns: all of them, or the first ``partial_rotary_factor``·d
    (Phi-3: the rest pass unturned)."""
    return int(head_dim(config) * rope_parameters(config).get("partial_rotary_factor", 1.0))


def attention_scale(config, layer: int) -> float:
    """1/√d_k in every layer (d_k = ``head_dim``, which need not be hidden_size / heads)."""
    return head_dim(config) ** -0.5


def rope_parameters(config) -> dict:
    params = dict(getattr(config, "rope_parameters", None) or {})
    if "rope_theta" not in params and getattr(config, "rope_theta", None) is not None:
        params["rope_theta"] = config.rope_theta
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def check_config(config, name: str, title: str = "Llama", rope_types: tuple[str, ...] = ROPE_TYPES,
                 partial_rotary: bool = False) -> None:
    """Refuse, by name, every option of these configs that the code below does not implement (``title``: the family
    the message names; ``rope_types``: the ones it implements; ``partial_rotary``: whether a
    ``partial_rotary_factor`` < 1 is implemented, as Phi-3's code turns only part of each head)."""
    if config.hidden_act not in ACTIVATIONS:
        raise UnsupportedModel(f"{name!r}: hidden_act={config.hidden_act!r} is not implemented by the from-scratch "
                               f"{title} (it has {', '.join(sorted(ACTIVATIONS))})")
    params = rope_parameters(config)
    if any(isinstance(v, dict) for v in params.values()):
        raise UnsupportedModel(f"{name!r}: rope_parameters differ per layer type, which the from-scratch {title} does "
                               "not implement; the Hugging Face view still works")
    if params["rope_type"] not in rope_types:
        raise UnsupportedModel(f"{name!r}: rope_type={params['rope_type']!r} is not implemented by the from-scratch "
                               f"{title} (it has {', '.join(rope_types)}); the Hugging Face view still works")
    if params.get("partial_rotary_factor", 1.0) != 1.0 and not partial_rotary:
        raise UnsupportedModel(f"{name!r}: partial_rotary_factor={params['partial_rotary_factor']} (rotating only part "
                               f"of each head) is not implemented by the from-scratch {title}")
    if rotary_dim(config) % 2:
        raise UnsupportedModel(f"{name!r}: the rotary width {rotary_dim(config)} (head_dim={head_dim(config)}"
                               + (f" × partial_rotary_factor={params['partial_rotary_factor']}"
                                  if rotary_dim(config) != head_dim(config) else "")
                               + f") is odd, and the from-scratch {title}'s rotary embedding turns pairs")
    if config.num_attention_heads % kv_heads(config):
        raise UnsupportedModel(f"{name!r}: {config.num_attention_heads} query heads cannot share "
                               f"{kv_heads(config)} key/value heads evenly")


# -- rotary position embedding --------------------------------------------------------------------

def inverse_frequencies(config, length: int, params: dict | None = None) -> torch.Tensor:
    """ω_i = 1 / θ^(2i/d) for the d/2 pairs of a head, stretched as ``rope_type`` says; ``length`` is
    the number of positions in the input (only ``dynamic`` depends on it). ``params``: the rotary parameters to use
    (Gemma 3: those of one layer type), the config's own (:func:`rope_parameters`) where None."""
    params = rope_parameters(config) if params is None else params
    kind, theta = params["rope_type"], params["rope_theta"]
    d = int(head_dim(config) * params.get("partial_rotary_factor", 1.0))  # the turned width (rotary_dim)
    if kind == "dynamic":  # NTK-aware: past the trained context, θ grows with the input's length
        trained = config.max_position_embeddings
        length = max(length, trained)
        factor = params["factor"]
        theta = theta * ((factor * length / trained) - (factor - 1)) ** (d / (d - 2))
    omega = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if kind == "linear":  # positions squeezed by `factor`: the same as slower frequencies
        omega /= params["factor"]
    elif kind == "llama3":  # long wavelengths slowed by `factor`, short ones kept, a smooth ramp between
        factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
        trained = params["original_max_position_embeddings"]
        wavelength = 2 * math.pi / omega
        slowed = torch.where(wavelength > trained / low, omega / factor, omega)
        ramp = (trained / wavelength - low) / (high - low)
        smoothed = (1 - ramp) * slowed / factor + ramp * slowed
        medium = ~(wavelength < trained / high) * ~(wavelength > trained / low)
        omega = torch.where(medium, smoothed, slowed)
    return omega


def rotary_tables(config, length: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                  params: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every angle p·ω_i, ``[1, length, r]`` (each ω_i twice: once per half of the turned width r,
    the head width d unless a partial rotary turns fewer). The frequencies ω are the model's constants, computed in
    fp32 as Hugging Face computes them; the angles and their cos and sin in ``dtype`` (a float64 pass turns q and k
    by float64 angles, as the reference does). ``params``: as in :func:`inverse_frequencies`."""
    omega = inverse_frequencies(config, length, params).to(device=device, dtype=dtype)
    angles = torch.arange(length, device=device)[None, :, None].to(dtype) * omega  # p·ω_i  [1, L, r/2]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x₁, x₂) -> (−x₂, x₁), the two halves of each head vector: a quarter turn of every pair."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each pair of ``x`` ``[B, H, L, d]`` by its position's angle: x·cos + rotate_half(x)·sin. Tables narrower
    than d (a partial rotary, Phi-3) turn the first r = cos.shape[-1] numbers, pairs (i, i + r/2), and pass the rest."""
    r = cos.shape[-1]
    if r < x.shape[-1]:  # partial rotary: the dimensions past r are never turned
        return torch.cat((rotate(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    return (x * cos[:, None]) + (rotate_half(x) * sin[:, None])


def unrotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The inverse turn (by −angle): the vector as it was before :func:`rotate`."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        return torch.cat((unrotate(x[..., :r], cos, sin), x[..., r:]), dim=-1)
    return (x * cos[:, None]) - (rotate_half(x) * sin[:, None])


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x ÷ √(mean(x²) + ε), times a learned gain: LayerNorm without subtracting the mean, and no bias."""
    h = upcast(x)  # half precision is normalised in fp32, as in HF
    variance = h.pow(2).mean(-1, keepdim=True)
    return weight * (h * torch.rsqrt(variance + eps)).to(x.dtype)


# -- the network ---------------------------------------------------------------------------------------

def no_window(config, layer: int) -> None:
    return None


class Layer:
    def __init__(self, w: Weights, i: int, config, window: int | None):
        p = f"layers.{i}."
        self.n_heads, self.n_kv_heads = config.num_attention_heads, kv_heads(config)
        self.read_weights(w, p)
        self.norm_attn = w[p + "input_layernorm.weight"]
        self.norm_mlp = w[p + "post_attention_layernorm.weight"]
        self.eps = config.rms_norm_eps
        self.act = ACTIVATIONS[config.hidden_act]
        self.index = i
        self.spec = Spec(attention_scale(config, i), causal=True, window=window)

    def read_weights(self, w: Weights, p: str) -> None:
        """The layer's projections, each a (weight, bias or None) pair (biases: Qwen2, ``attention_bias``,
        ``mlp_bias``)."""
        linear = lambda key: (w[p + key + ".weight"], w.get(p + key + ".bias"))  # noqa: E731
        self.q_proj, self.k_proj = linear("self_attn.q_proj"), linear("self_attn.k_proj")
        self.v_proj, self.o_proj = linear("self_attn.v_proj"), linear("self_attn.o_proj")
        self.gate_proj, self.up_proj, self.down_proj = linear("mlp.gate_proj"), linear("mlp.up_proj"), \
            linear("mlp.down_proj")

    def project(self, h: torch.Tensor) -> QKV:
        """q ``[B, H, L, d]``, k and v ``[B, H_kv, L, d]`` of the normed input ``h``, before the rotation."""
        q = split_heads(F.linear(h, *self.q_proj), self.n_heads)
        k = split_heads(F.linear(h, *self.k_proj), self.n_kv_heads)  # grouped-query: fewer key/value heads
        v = split_heads(F.linear(h, *self.v_proj), self.n_kv_heads)
        return q, k, v

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q ``[B, H, L, d]``, k and v ``[B, H_kv, L, d]`` of this layer from its input, q and k rotated."""
        q, k, v = self.project(rms_norm(x, self.norm_attn, self.eps))
        return rotate(q, cos, sin), rotate(k, cos, sin), v  # rotary: q and k turned by their positions

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(self.act(F.linear(h, *self.gate_proj)) * F.linear(h, *self.up_proj), *self.down_proj)  # SwiGLU

    def __call__(self, x, via, cos, sin, chunk=None):
        i = self.index
        z = via.attend(i, *self.qkv(x, cos, sin), self.spec)
        x = x + via.at("attn_out", i, F.linear(merge_heads(z), *self.o_proj))  # x + attention: the residual
        h = rms_norm(x, self.norm_mlp, self.eps)
        return x + via.at("mlp_out", i, by_rows(self.mlp, h, chunk))  # x + MLP: the residual


class Llama(PreNormDecoder):
    layer_class: type[Layer] = Layer  # the layer's code (Qwen3 and Phi-3 bring their own)

    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "llama", window=no_window):
        self.check(config, name)
        w = Weights(state_dict, strip="model.", ignore_suffixes=("rotary_emb.inv_freq",))
        self.config = config
        self.embed = w["embed_tokens.weight"]
        self.layers = [self.layer_class(w, i, config, window(config, i)) for i in range(config.num_hidden_layers)]
        self.norm = w["norm.weight"]
        self.eps = config.rms_norm_eps
        self.lm_head = w.get("lm_head.weight")  # absent for a bare LlamaModel; tied to the embedding in SmolLM2
        w.check_all_used(name)

    @staticmethod
    def check(config, name: str) -> None:
        """Refuse what this network does not implement (the record's ``check``)."""
        check_config(config, name)

    def rotary(self, length: int, device: torch.device | str = "cpu",
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return rotary_tables(self.config, length, device, working_dtype(self.embed.dtype))  # the same in every layer

    def at(self, start, length, device):
        """Each layer's cos and sin for positions start..start+length−1 (no position table: positions are turns)."""
        return tuple(t[:, start:] for t in self.rotary(start + length, device))

    def embeddings(self, input_ids, token_type_ids, start):
        return self.embed[input_ids]

    def embedding_parts(self, input_ids, token_type_ids, positions):
        """The embeddings of item 0 at ``positions``: the token's only (positions are turns of q and k)."""
        return {"token embedding": self.embed[input_ids[0, positions]]}

    def qk_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor, positions: torch.Tensor, length: int):
        """q and k of layer ``layer`` for each part of its input: RMSNorm with its rms frozen at ``x``, the
        projections without their biases, each part turned by its position's angles (a rotation is linear); the
        last entry is the constant, the projections' biases (Qwen2) turned likewise (see
        :meth:`probes.scratch.family.SplitNetwork.qk_parts`)."""
        q, k = self.projected_parts(layer, parts, x)
        cos, sin = (t[:, positions].to(parts.dtype) for t in self.rotary(length, x.device, layer))  # this layer's
        return rotate(q, cos, sin), rotate(k, cos, sin)

    def projected_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q ``[P + 1, H, n, d]`` and k ``[P + 1, H_kv, n, d]`` of each part before the rotation (:meth:`qk_parts`):
        the RMSNorm frozen at ``x``, then the projections; the biases in the last entry."""
        lay, dt = self.layers[layer], parts.dtype
        scale = torch.rsqrt(x.to(dt).pow(2).mean(-1, keepdim=True) + self.eps)
        h = torch.cat([lay.norm_attn.to(dt) * (parts * scale), parts.new_zeros(1, *parts.shape[1:])])
        q, k = F.linear(h, lay.q_proj[0].to(dt)), F.linear(h, lay.k_proj[0].to(dt))
        for out, bias in ((q, lay.q_proj[1]), (k, lay.k_proj[1])):
            if bias is not None:
                out[-1] += bias.to(dt)
        return split_heads(q, lay.n_heads), split_heads(k, lay.n_kv_heads)

    def head_weights(self, layer: int):
        """Layer ``layer``'s W_Q ``[H, D, d]``, W_K and W_V ``[H_kv, D, d]`` (grouped-query: query head h reads
        key/value head h // (H / H_kv)), the attention RMSNorm's gain folded into their rows; no biases, no rotation
        (offset 0) (see :meth:`probes.scratch.family.SplitNetwork.head_weights`)."""
        lay = self.layers[layer]
        split = lambda w, n: (lay.norm_attn[:, None] * w.t()).reshape(w.shape[1], n, -1).transpose(0, 1)  # noqa: E731
        return (split(lay.q_proj[0], lay.n_heads), split(lay.k_proj[0], lay.n_kv_heads),
                split(lay.v_proj[0], lay.n_kv_heads))

    def normed(self, x):
        return rms_norm(x, self.norm, self.eps)

    def head_out(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Layer ``layer``'s output projection split by head: ``W_O`` ``[H, d, D]`` (head h writes z_h·W_O[h]
        into the residual stream) and its bias (None in Llama)."""
        weight, bias = self.layers[layer].o_proj  # Linear: [D, H·d]
        return weight.t().reshape(self.layers[layer].n_heads, -1, weight.shape[0]), bias

    def final_norm(self, x: torch.Tensor):
        """The final RMSNorm with its scale frozen at ``x`` (the residual before it): a linear map of any part c
        of the residual, c ÷ rms(x) · g, whose sum over the parts is the normed x (no bias)."""
        scale = torch.rsqrt(upcast(x).pow(2).mean(-1, keepdim=True) + self.eps)
        return (lambda c: self.norm * (c * scale)), None


# -- the Hugging Face view and the records -------------------------------------------------------------

def hf_class(config) -> str:
    archs = getattr(config, "architectures", None) or []
    return "AutoModelForCausalLM" if not archs or any(a.endswith("ForCausalLM") for a in archs) else "AutoModel"


def catch_projections(attn, config, cap: Capture, raw: dict[str, torch.Tensor]) -> None:
    """Hooks that put one layer's q, k and v into ``raw`` split by head (``[B, H, L, d]``, before the rotation): here
    the outputs of its q_proj, k_proj and v_proj."""
    heads = {"q": config.num_attention_heads, "k": kv_heads(config), "v": kv_heads(config)}
    for key in "qkv":
        cap.hook(getattr(attn, f"{key}_proj"),
                 lambda _m, _i, out, key=key: raw.__setitem__(key, split_heads(out, heads[key])))


def capture(hf, config, cap: Capture, catch=catch_projections, per_layer: bool = False) -> None:
    """The Hugging Face view's q, k, v: each layer's q, k and v as ``catch`` finds them (q_proj, k_proj and v_proj's
    outputs here), with q and k turned by the model's own rotary tables and its own ``apply_rotary_pos_emb``, so
    they are the vectors the scores are made of. ``cap.rotary`` is the one (cos, sin) pair every layer turns by, or,
    with ``per_layer`` (Gemma 3: a table per layer type), the list of each layer's own pair."""
    for layer in hf.base_model.layers:
        attn = layer.self_attn
        raw: dict[str, torch.Tensor] = {}
        catch(attn, config, cap, raw)

        def rotated(module, _args, kwargs, _out, raw=raw):
            cos, sin = kwargs["position_embeddings"]
            q, k = sys.modules[type(module).__module__].apply_rotary_pos_emb(raw["q"], raw["k"], cos, sin)
            cap.q.append(q)
            cap.k.append(k)
            cap.v.append(raw["v"])
            if per_layer:  # this layer's own tables, in order (Gemma 3: its layer type's)
                cap.rotary = [*(cap.rotary if isinstance(cap.rotary, list) else []), (cos, sin)]
            else:
                cap.rotary = (cos, sin)

        cap.hook(attn, rotated, with_kwargs=True)


def mistral_window(config, layer: int) -> int | None:
    """Mistral: one sliding window (``sliding_window``) on every layer, or none."""
    return getattr(config, "sliding_window", None)


def qwen2_window(config, layer: int) -> int | None:
    """Qwen2: the window only on layers whose ``layer_types`` entry is ``sliding_attention`` (with
    ``use_sliding_window``, the layers from ``max_window_layers`` on)."""
    types = getattr(config, "layer_types", None) or []
    return config.sliding_window if layer < len(types) and types[layer] == "sliding_attention" else None


_COMMON: dict[str, Any] = dict(
    hf_class=hf_class, check=check_config, capture=capture, scale=attention_scale, kv_heads=kv_heads,
    head_dim=head_dim, positions="rotary",
    refused="other `rope_type`s (yarn, longrope, …), `partial_rotary_factor` < 1, rotary parameters per "
            "layer type, other activations")
_LLAMA = ("RMSNorm, rotary positions (`rope_theta`; `rope_type` default, linear, dynamic, llama3), grouped-query "
          "attention (`num_key_value_heads`), SwiGLU MLP (`hidden_act`), `head_dim` ≠ hidden / heads, tied or untied "
          "embeddings, `attention_bias`, `mlp_bias`, `rms_norm_eps`")

FAMILIES = (
    Family(name="llama", title="Llama", model_types=("llama",), network=Llama, implemented=_LLAMA,
           examples=("HuggingFaceTB/SmolLM2-135M",), **_COMMON),
    Family(name="mistral", title="Mistral", model_types=("mistral",), network=partial(Llama, window=mistral_window),
           window=mistral_window, implemented="as Llama, plus `sliding_window` (keys further back are masked)",
           **_COMMON),
    Family(name="qwen2", title="Qwen2", model_types=("qwen2",), network=partial(Llama, window=qwen2_window),
           window=qwen2_window, implemented="as Llama, plus q/k/v biases and `use_sliding_window` with "
           "`sliding_window`, `max_window_layers`, `layer_types`", examples=("Qwen/Qwen2.5-0.5B",), **_COMMON),
)
