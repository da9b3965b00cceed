"""ModernBERT, from scratch, over the weights of a Hugging Face checkpoint: a pre-norm encoder with rotary
positions, alternating local and global attention, a GeGLU MLP and (by default) no biases.

    x = LayerNorm(tok_embeddings[token])                    (no position table: positions are rotations)
    for each layer:   h = attn_norm(x)                        (none on layer 0: the embeddings are normed already)
                      q, k, v = split(h·W_qkv)                (one fused projection; a bias with attention_bias)
                      q, k = rotate(q, position), rotate(k, position)   (θ: the layer type's rope_theta)
                      x = x + attention(q, k, v)·W_o          (local layers: a symmetric window)
                      u, g = halves(mlp_norm(x)·W_i)
                      x = x + (act(u) ⊙ g)·W_o                (GeGLU: the first half activated, gated by the second)
    x = final_norm(x)                                        (the last hidden state)
    logits = decoder(norm(act(dense(x))))                    (the masked-LM head, decoder tied to the embedding)

Every LayerNorm has a gain and, only with ``norm_bias``, a bias (ε = ``norm_eps``). The rotation is Llama's
(``llama.py``: pairs (x_i, x_{i + d/2}), ω_i = θ^(−2i/d)), but θ depends on the layer: ``layer_types`` names each
layer ``full_attention`` (global: every key, θ = ``rope_parameters["full_attention"]["rope_theta"]``, 160,000 in
ModernBERT-base, the old ``global_rope_theta``) or ``sliding_attention`` (local, θ of its own, 10,000, the old
``local_rope_theta``); by default every ``global_attn_every_n_layers``-th layer is global, from layer 0. A local
layer's query sees the keys at most local_attention / 2 positions away on *either* side (an encoder's window is
symmetric): the window is the rule of :func:`probes.attention_math.in_window` with w = local_attention / 2 + 1 (keys
fewer than w positions away), the count Hugging Face's flash path passes too.

What it changes for the readers. It is an encoder (no future mask, a masked-LM head rather than a next-token one),
so like BERT it has no KV cache (no generation) and no next-token measures (no logit lens, no loss; path patching
shows the receiver's pattern changes only); and, unlike BERT, it is pre-norm: the stream
is only ever added to, so QK attribution splits a layer's input into the token embedding (normed: the embeddings'
LayerNorm frozen at its input), each earlier head's write, each earlier MLP's and the biases, and the LayerNorm
before the attention is frozen at the layer's input, as a pre-norm decoder's is. Composition scores fold the gain
of the LayerNorm before each attention (the embeddings' on layer 0) into W_Q, W_K and W_V. Each layer's rotary
tables are its own (:meth:`ModernBert.rotary` takes the layer): the Trace keeps one pair per layer, and the Q/K/V
explanation un-turns q by its layer's angles.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ..attention_math import Spec
from ..errors import UnsupportedModel
from ..precision import working_dtype
from . import llama
from .activations import ACTIVATIONS
from .attention import by_rows, merge_heads
from .bert import MaskedLMHead
from .family import QKV, Capture, Family
from .prenorm import added_parts
from .weights import Weights

Linear = tuple[torch.Tensor, torch.Tensor | None]  # (weight, bias or None), as F.linear and F.layer_norm take them
LAYER_TYPES = ("full_attention", "sliding_attention")
ROPE_TYPES = ("default",)


def head_dim(config) -> int:
    """d = hidden_size / num_attention_heads (Hugging Face's attention reads no ``head_dim``)."""
    return config.hidden_size // config.num_attention_heads


def attention_scale(config, layer: int) -> float:
    """1/√d_k in every layer."""
    return head_dim(config) ** -0.5


def layer_type(config, layer: int) -> str:
    return config.layer_types[layer]


def window(config, layer: int) -> int | None:
    """A local layer's window, w = local_attention / 2 + 1: its keys are fewer than w positions from the query on
    either side (|query − key| ≤ local_attention / 2, ``config.sliding_window``); a global layer has none."""
    return config.sliding_window + 1 if layer_type(config, layer) == "sliding_attention" else None


def rope_config(config, kind: str) -> SimpleNamespace:
    """The config as :mod:`probes.scratch.llama`'s rotary code reads it, for the layers of type ``kind``: that
    type's ``rope_parameters`` (θ), the head width. Hugging Face's ModernBERT turns every number of a head whatever
    ``partial_rotary_factor`` says (its default rope reads the full head width), so that key is left out here too."""
    params = {key: value for key, value in config.rope_parameters[kind].items() if key != "partial_rotary_factor"}
    return SimpleNamespace(rope_parameters=params, head_dim=head_dim(config),
                           hidden_size=config.hidden_size, num_attention_heads=config.num_attention_heads,
                           max_position_embeddings=config.max_position_embeddings)


def check(config, name: str) -> None:
    """Refuse, by name, every ModernBERT option this file does not implement."""
    for option in ("hidden_activation", "classifier_activation"):
        act = getattr(config, option)
        if not isinstance(act, str) or act not in ACTIVATIONS:
            raise UnsupportedModel(f"{name!r}: {option}={act!r} is not implemented by the from-scratch ModernBERT (it "
                                   f"has {', '.join(sorted(ACTIVATIONS))}); the Hugging Face view still works")
    types = list(getattr(config, "layer_types", None) or [])
    if len(types) != config.num_hidden_layers or any(t not in LAYER_TYPES for t in types):
        raise UnsupportedModel(f"{name!r}: layer_types={types!r}; the from-scratch ModernBERT implements one of "
                               f"{', '.join(LAYER_TYPES)} per layer; the Hugging Face view still works")
    for kind in set(types):
        params = (config.rope_parameters or {}).get(kind) or {}
        if params.get("rope_type", "default") not in ROPE_TYPES:
            raise UnsupportedModel(f"{name!r}: rope_type={params.get('rope_type')!r} on the {kind} layers is not "
                                   "implemented by the from-scratch ModernBERT (it has default); the Hugging Face "
                                   "view still works")
    if head_dim(config) % 2 or config.hidden_size % config.num_attention_heads:
        raise UnsupportedModel(f"{name!r}: hidden_size={config.hidden_size} over {config.num_attention_heads} heads "
                               "is not an even head width, and the rotary embedding turns pairs")
    if "sliding_attention" in types and config.sliding_window < 0:
        raise UnsupportedModel(f"{name!r}: local_attention={config.local_attention} is not a window")


def linear(w: Weights, name: str) -> Linear:
    return w[name + ".weight"], w.get(name + ".bias")


class Layer:
    def __init__(self, w: Weights, i: int, config):
        p = f"layers.{i}."
        self.attn_norm = linear(w, p + "attn_norm") if i else None  # layer 0: none (Identity in Hugging Face)
        self.wqkv = linear(w, p + "attn.Wqkv")
        self.attn_out = linear(w, p + "attn.Wo")
        self.mlp_norm = linear(w, p + "mlp_norm")
        self.wi = linear(w, p + "mlp.Wi")
        self.mlp_out = linear(w, p + "mlp.Wo")
        self.n_heads, self.d = config.num_attention_heads, head_dim(config)
        self.width = config.hidden_size
        self.eps = config.norm_eps
        self.act = ACTIVATIONS[config.hidden_activation]
        self.index = i
        self.kind = layer_type(config, i)
        self.spec = Spec(attention_scale(config, i), causal=False, window=window(config, i))

    def norm(self, x: torch.Tensor, ln: Linear) -> torch.Tensor:
        return F.layer_norm(x, (self.width,), *ln, self.eps)

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """What the attention reads: the layer's input after ``attn_norm`` (as it is on layer 0)."""
        return x if self.attn_norm is None else self.norm(x, self.attn_norm)

    def project(self, h: torch.Tensor) -> QKV:
        """q, k, v ``[B, H, L, d]`` of the normed input, before the rotation: h·W_qkv read as [3, H, d] per position."""
        qkv = F.linear(h, *self.wqkv)
        q, k, v = qkv.view(*h.shape[:-1], 3, self.n_heads, self.d).unbind(dim=-3)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> QKV:
        q, k, v = self.project(self.normed(x))
        return llama.rotate(q, cos, sin), llama.rotate(k, cos, sin), v  # rotary: turned by their positions

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        u, gate = F.linear(h, *self.wi).chunk(2, dim=-1)
        return F.linear(self.act(u) * gate, *self.mlp_out)  # GeGLU

    def __call__(self, x, via, cos, sin, chunk=None):
        i = self.index
        z = via.attend(i, *self.qkv(x, cos, sin), self.spec)
        x = x + via.at("attn_out", i, F.linear(merge_heads(z), *self.attn_out))  # x + attention: the residual
        h = self.norm(x, self.mlp_norm)
        return x + via.at("mlp_out", i, by_rows(self.mlp, h, chunk))  # x + MLP: the residual


class ModernBert:
    causal = False  # an encoder: every query sees both ways (a local layer within its window)
    pre_norm = True  # unlike BERT's: composition scores' words say so (probes.effects.compose)

    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "modernbert"):
        check(config, name)
        w = Weights(state_dict, strip="model.")
        self.config = config
        self.embed = w["embeddings.tok_embeddings.weight"]
        self.ln_emb = linear(w, "embeddings.norm")
        self.layers = [Layer(w, i, config) for i in range(config.num_hidden_layers)]
        self.ln_final = linear(w, "final_norm")
        self.width = config.hidden_size
        self.eps = config.norm_eps
        self.head: MaskedLMHead | None = None
        if w.get("decoder.weight") is not None:  # ModernBertForMaskedLM (decoder tied to the embedding)
            self.head = MaskedLMHead(linear(w, "head.dense"), linear(w, "head.norm"), linear(w, "decoder"),
                                     ACTIVATIONS[config.classifier_activation], config.norm_eps)
        w.check_all_used(name)

    # -- positions ------------------------------------------------------------------------------------------------

    def rotary(self, length: int, device: torch.device | str = "cpu",
               layer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[1, length, d]`` of layer ``layer``'s angles: its layer type's θ (global or local)."""
        return llama.rotary_tables(rope_config(self.config, self.layers[layer].kind), length, device,
                                   working_dtype(self.embed.dtype))

    def tables(self, length: int, device: torch.device | str) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The tables of each layer type in the network, computed once a pass (as Hugging Face computes them)."""
        first = {lay.kind: lay.index for lay in reversed(self.layers)}
        return {kind: self.rotary(length, device, i) for kind, i in first.items()}

    # -- the pass ---------------------------------------------------------------------------------------------------

    def embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(self.embed[input_ids], (self.width,), *self.ln_emb, self.eps)

    def qkv(self, layer: int, x: torch.Tensor) -> QKV:
        """q, k, v of layer ``layer`` from its input ``x`` (what a lazy Trace recomputes), q and k turned."""
        return self.layers[layer].qkv(x, *self.rotary(x.shape[1], x.device, layer))

    def head_out(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Layer ``layer``'s output projection by head: ``W_O`` ``[H, d, D]`` and its bias (None without
        ``attention_bias``)."""
        weight, bias = self.layers[layer].attn_out  # [D, H·d]
        return weight.t().reshape(self.layers[layer].n_heads, -1, weight.shape[0]), bias

    def __call__(self, input_ids, attention_mask, token_type_ids=None, *, via, logits=True, chunk=None,
                 resume=None):
        # via: the pass (probes.scratch.hooks.Pass); resume=(i, x): start at layer i from its input x
        if resume is None:
            first, x = 0, via.at("embed", None, self.embeddings(input_ids))
        else:
            first, x = resume
        tables = self.tables(input_ids.shape[1], input_ids.device)
        for i, layer in enumerate(self.layers[first:], start=first):
            x = via.at("resid_pre", i, x)
            x = via.at("resid_post", i, layer(x, via, *tables[layer.kind], chunk))
        x = via.at("final", None, F.layer_norm(x, (self.width,), *self.ln_final, self.eps))  # the last hidden state
        if self.head is None or not logits:
            return None
        return via.at("logits", None, self.head(x))

    # -- QK attribution and composition ---------------------------------------------------------------------------

    def residual_parts(self, layer: int, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                       inputs: list[torch.Tensor], z: list[torch.Tensor], positions: torch.Tensor,
                       dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Layer ``layer``'s input at ``positions`` (item 0) as the sum of what wrote it, each ``[n, D]`` in
        ``dtype`` (see :meth:`probes.scratch.family.SplitNetwork.residual_parts`): the token embedding after the
        embeddings' LayerNorm (frozen at its input: the embedding, centred, ÷ σ × gain, and its bias to "biases"),
        each earlier head's write z_h·W_O[h], each earlier MLP's output (what its layer added less the attention's)
        and the biases. Pre-norm: the stream is only ever added to."""
        token = self.embed[input_ids[0, positions]].to(dtype)
        g, b = self.ln_emb
        sigma = torch.sqrt(token.var(-1, unbiased=False, keepdim=True) + self.eps)
        parts = {"token embedding": (token - token.mean(-1, keepdim=True)) / sigma * g.to(dtype)}
        biases = b.to(dtype).expand_as(token) if b is not None else None
        return added_parts(self, layer, inputs, z, positions, dtype, parts, biases)

    def qk_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor, positions: torch.Tensor, length: int):
        """q and k of layer ``layer`` for each part of its input: ``attn_norm`` frozen at ``x`` (its σ; on layer 0
        there is none), each part centred, ÷ σ × gain, the norm's bias and the projection's bias in the last entry,
        then each entry turned by its position's angles of this layer (a rotation is linear; see
        :meth:`probes.scratch.family.SplitNetwork.qk_parts`)."""
        lay, dt = self.layers[layer], parts.dtype
        constant = parts.new_zeros(1, *parts.shape[1:])
        if lay.attn_norm is not None:
            g, b = lay.attn_norm
            sigma = torch.sqrt(x.to(dt).var(-1, unbiased=False, keepdim=True) + self.eps)
            parts = (parts - parts.mean(-1, keepdim=True)) / sigma * g.to(dt)
            if b is not None:
                constant = constant + b.to(dt)
        weight, bias = lay.wqkv
        y = F.linear(torch.cat([parts, constant]), weight.to(dt))  # [P + 1, n, 3·H·d]
        if bias is not None:
            y[-1] += bias.to(dt)
        q, k, _v = y.view(*y.shape[:-1], 3, lay.n_heads, lay.d).unbind(dim=-3)
        cos, sin = (t[:, positions].to(dt) for t in self.rotary(length, x.device, layer))
        return llama.rotate(q.transpose(1, 2), cos, sin), llama.rotate(k.transpose(1, 2), cos, sin)

    def head_weights(self, layer: int):
        """Layer ``layer``'s W_Q, W_K, W_V ``[H, D, d]``, read from the fused W_qkv, the gain of the LayerNorm the
        attention reads through (``attn_norm``; the embeddings' LayerNorm on layer 0, which has none) folded into
        their rows; no biases, no centring or scale, no rotation (see
        :meth:`probes.scratch.family.SplitNetwork.head_weights`)."""
        lay = self.layers[layer]
        gain = (self.ln_emb if lay.attn_norm is None else lay.attn_norm)[0]
        weight = lay.wqkv[0].view(3, lay.n_heads, lay.d, self.width)  # [3, H, d, D]
        return tuple((gain * w).transpose(1, 2) for w in weight)  # each [H, D, d]


def hf_class(config) -> str:
    """With the masked-LM head where the checkpoint has one, else the bare encoder (a classifier's head is left
    out: it changes no attention)."""
    return ("ModernBertForMaskedLM" if "ModernBertForMaskedLM" in (getattr(config, "architectures", None) or [])
            else "ModernBertModel")


def capture(hf, config, cap: Capture) -> None:
    """The Hugging Face view's q, k, v: each layer's fused ``Wqkv`` output split as its attention splits it, q and k
    turned by the layer's own tables (``position_embeddings``) and its module's ``apply_rotary_pos_emb``; the tables
    of every layer go to ``cap.rotary`` (they differ between global and local layers)."""
    tables: list[tuple[torch.Tensor, torch.Tensor]] = []
    for layer in hf.base_model.layers:
        attn = layer.attn
        raw: dict[str, torch.Tensor] = {}
        cap.hook(attn.Wqkv, lambda _m, _i, out, raw=raw: raw.__setitem__("qkv", out))

        def rotated(module, _args, kwargs, _out, raw=raw):
            qkv = raw["qkv"]
            q, k, v = (t.transpose(1, 2) for t in qkv.view(*qkv.shape[:-1], 3, -1, module.head_dim).unbind(dim=-3))
            cos, sin = kwargs["position_embeddings"]
            q, k = sys.modules[type(module).__module__].apply_rotary_pos_emb(q, k, cos, sin)
            cap.q.append(q)
            cap.k.append(k)
            cap.v.append(v)
            tables.append((cos, sin))
            cap.rotary = list(tables)

        cap.hook(attn, rotated, with_kwargs=True)


FAMILIES = (Family(
    name="modernbert", title="ModernBERT", model_types=("modernbert",), hf_class=hf_class, network=ModernBert,
    check=check, capture=capture, scale=attention_scale, causal=lambda config: False, head_dim=head_dim,
    window=window, token_types=False, pairs=True, positions="rotary",
    implemented="pre-norm LayerNorms (`norm_eps`, `norm_bias`; none before layer 0's attention), fused `Wqkv`, "
                "`attention_bias`, `mlp_bias`, rotary positions with a θ per layer type (`rope_parameters` of "
                "`full_attention` and `sliding_attention`: the old `global_rope_theta`, `local_rope_theta`), "
                "global and local layers (`layer_types`, `global_attn_every_n_layers`) with a symmetric window "
                "(`local_attention`: keys up to local_attention / 2 positions away on either side), GeGLU MLP "
                "(`hidden_activation`), the final norm, the masked-LM head (`classifier_activation`, "
                "`classifier_bias`, `decoder_bias`, tied decoder)",
    refused="other activations, other `rope_type`s, other `layer_types`, an odd head width",
    examples=("answerdotai/ModernBERT-base",),
),)
