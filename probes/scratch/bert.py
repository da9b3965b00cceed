"""BERT, from scratch, over the weights of a Hugging Face checkpoint.

    x = LayerNorm(word[token] + token_type[segment] + position[i])
    for each layer:   x = LayerNorm(x + attn(x))         (post-LayerNorm)
                      x = LayerNorm(x + ffn(x))
    logits = decoder(LayerNorm(act(dense(x))))           (masked-LM head, where the checkpoint has one)

BERT runs its own layer loop, not the pre-norm decoders' (``prenorm.py``): each layer's output is already
normalised, so there is no final norm and no residual stream before one; its embeddings are normalised too, it
has no KV cache, and its masked-LM head is a small network rather than one matrix.

RoBERTa (``roberta.py``: positions counted from the padding index) and DistilBERT (``distilbert.py``: no token
types, its own weight names) are this network with another embedding or other names: :class:`Layer` takes its
weight names (:class:`Names`), :class:`Bert` its embeddings' position ids (:meth:`Bert.position_ids`) and its
masked-LM head (:class:`MaskedLMHead`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..attention_math import Spec
from ..errors import UnsupportedModel
from .activations import ACTIVATIONS
from .attention import by_rows, merge_heads, split_heads
from .family import Capture, Family
from .weights import Weights

Linear = tuple[torch.Tensor, torch.Tensor]  # (weight, bias), as F.linear and F.layer_norm take them
# buffers that carry no math: the position ids 0..max and the all-zero token types some checkpoints store
IGNORED = ("embeddings.position_ids", "embeddings.token_type_ids")
SHOWN = ("token embedding", "position embedding", "token-type embedding")  # the embeddings' parts, as QK attribution
# lists them (Hugging Face adds the token type before the position: :meth:`Bert.embedding_parts`)


def check_config(config, name: str, title: str = "BERT") -> None:
    """Refuse, by name, every BERT option this file does not implement (``title``: the family that asks, RoBERTa
    reads BERT's options too)."""
    if not isinstance(config.hidden_act, str) or config.hidden_act not in ACTIVATIONS:
        raise UnsupportedModel(
            f"{name!r}: hidden_act={config.hidden_act!r} is not implemented by the from-scratch {title} "
            f"(it has {', '.join(sorted(ACTIVATIONS))})"
        )
    refuse_at_load(config, name)
    if getattr(config, "add_cross_attention", False):
        raise UnsupportedModel(f"{name!r}: add_cross_attention=True ({title} as an encoder-decoder) is not supported")


def is_causal(config) -> bool:
    """A BERT configured as a decoder (``is_decoder``) masks the future."""
    return bool(getattr(config, "is_decoder", False))


def refuse_at_load(config, name: str) -> None:
    """Options that transformers 5 itself ignores, so that even the Hugging Face view would be wrong."""
    pos = getattr(config, "position_embedding_type", "absolute")
    if pos not in (None, "absolute"):
        raise UnsupportedModel(
            f"{name!r} uses position_embedding_type={pos!r}; transformers 5 implements only 'absolute', so "
            "neither path would compute what the checkpoint was trained with"
        )


def attention_scale(config, layer: int) -> float:
    """What a layer multiplies q·kᵀ by: 1/√d_k, the same in every layer."""
    return (config.hidden_size // config.num_attention_heads) ** -0.5


@dataclass(frozen=True)
class Names:
    """Where a layer's weights sit in the state dict (each name + ``.weight`` / ``.bias``), under ``layer`` with
    the layer's index filled in."""

    layer: str = "encoder.layer.{i}."
    query: str = "attention.self.query"
    key: str = "attention.self.key"
    value: str = "attention.self.value"
    attn_out: str = "attention.output.dense"
    ln_attn: str = "attention.output.LayerNorm"
    ffn_in: str = "intermediate.dense"
    ffn_out: str = "output.dense"
    ln_ffn: str = "output.LayerNorm"


BERT_NAMES = Names()


def linear(w: Weights, name: str) -> Linear:
    return w[name + ".weight"], w[name + ".bias"]


def added(parts: dict[str, torch.Tensor]) -> torch.Tensor:
    """The parts summed left to right, in their order (floating-point sums depend on it)."""
    values = iter(parts.values())
    total = next(values)
    for part in values:
        total = total + part
    return total


class Layer:
    def __init__(self, w: Weights, i: int, config, *, names: Names = BERT_NAMES, eps: float,
                 act: Callable[[torch.Tensor], torch.Tensor], causal: bool):
        p = names.layer.format(i=i)
        self.query, self.key, self.value = (linear(w, p + n) for n in (names.query, names.key, names.value))
        self.attn_out = linear(w, p + names.attn_out)
        self.ln_attn = linear(w, p + names.ln_attn)
        self.ffn_in = linear(w, p + names.ffn_in)
        self.ffn_out = linear(w, p + names.ffn_out)
        self.ln_ffn = linear(w, p + names.ln_ffn)
        self.n_heads = config.num_attention_heads
        self.width = config.hidden_size
        self.eps = eps
        self.act = act
        self.index = i
        self.spec = Spec(attention_scale(config, i), causal=causal)

    def qkv(self, x):
        """q, k, v ``[B, H, L, d]`` of this layer, from its input."""
        return tuple(split_heads(F.linear(x, *w), self.n_heads) for w in (self.query, self.key, self.value))

    def feed_forward(self, x):
        return F.linear(self.act(F.linear(x, *self.ffn_in)), *self.ffn_out)

    def __call__(self, x, via, chunk=None):
        i = self.index
        z = via.attend(i, *self.qkv(x), self.spec)
        h = x + via.at("attn_out", i, F.linear(merge_heads(z), *self.attn_out))  # x + attention: the residual
        x = F.layer_norm(h, (self.width,), *self.ln_attn, self.eps)
        h = x + via.at("mlp_out", i, by_rows(self.feed_forward, x, chunk))  # x + feed-forward: the residual
        return F.layer_norm(h, (self.width,), *self.ln_ffn, self.eps)


@dataclass
class MaskedLMHead:
    """The masked-LM head: logits = decoder(LayerNorm(act(dense(x)))) (BERT's ``cls.predictions``, RoBERTa's
    ``lm_head``, DistilBERT's ``vocab_transform`` / ``vocab_layer_norm`` / ``vocab_projector``)."""

    dense: tuple[torch.Tensor, torch.Tensor | None]  # (weight, bias): ModernBERT's may have no bias
    ln: tuple[torch.Tensor, torch.Tensor | None]
    decoder: tuple[torch.Tensor, torch.Tensor | None]
    act: Callable[[torch.Tensor], torch.Tensor]
    eps: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(self.act(F.linear(x, *self.dense)), (x.shape[-1],), *self.ln, self.eps)
        return F.linear(h, *self.decoder)


class Bert:
    # the embeddings' tables and norm, read by :meth:`read_encoder` (DistilBERT has no token types: None)
    word: torch.Tensor
    position: torch.Tensor
    token_type: torch.Tensor | None
    ln_emb: Linear
    layers: list[Layer]
    head: MaskedLMHead | None

    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "bert"):
        check_config(config, name)
        w = Weights(state_dict, strip="bert.", ignore_suffixes=IGNORED)
        self.read_encoder(w, config, eps=config.layer_norm_eps, act=ACTIVATIONS[config.hidden_act],
                          causal=is_causal(config))
        # the pooler and the next-sentence head sit after the last layer and change no attention
        for key in ("pooler.dense.weight", "pooler.dense.bias", "cls.seq_relationship.weight",
                    "cls.seq_relationship.bias"):
            w.get(key)
        self.head = None
        if w.get("cls.predictions.decoder.weight") is not None:  # masked-LM head
            p = "cls.predictions."
            w.get(p + "bias")  # the same tensor as decoder.bias
            self.head = MaskedLMHead(linear(w, p + "transform.dense"), linear(w, p + "transform.LayerNorm"),
                                     linear(w, p + "decoder"), self.act, self.eps)
        w.check_all_used(name)

    def read_encoder(self, w: Weights, config, *, eps: float, act: Callable[[torch.Tensor], torch.Tensor],
                     causal: bool, names: Names = BERT_NAMES, token_types: bool = True) -> None:
        """The embeddings (``embeddings.*``: word, position, token-type tables and their LayerNorm) and the layers
        (named by ``names``); ``token_types=False``: no token-type table (DistilBERT)."""
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"] if token_types else None
        self.ln_emb = linear(w, "embeddings.LayerNorm")
        self.layers = [Layer(w, i, config, names=names, eps=eps, act=act, causal=causal)
                       for i in range(config.num_hidden_layers)]
        self.causal = causal
        self.width = config.hidden_size
        self.eps = eps
        self.act = act

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Each token's row of the position table ``[B, L]``: 0, 1, 2, … (RoBERTa counts from its padding index)."""
        return torch.arange(input_ids.shape[1], device=input_ids.device).expand(input_ids.shape)

    def embedding_parts(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """What the embeddings add up ``{name: [B, L, D]}``, in the order Hugging Face adds them (the sum, in this
        order, is the embeddings' LayerNorm's input, bit for bit)."""
        parts = {"token embedding": self.word[input_ids]}
        if self.token_type is not None:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            parts["token-type embedding"] = self.token_type[types]
        parts["position embedding"] = self.position[self.position_ids(input_ids)]
        return parts

    def qkv(self, layer: int, x: torch.Tensor):
        """q, k, v of layer ``layer`` from its input ``x`` (what a lazy Trace recomputes)."""
        return self.layers[layer].qkv(x)

    def head_out(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Layer ``layer``'s output projection split by head: ``W_O`` ``[H, d, D]`` (head h adds z_h·W_O[h] before
        the layer's LayerNorm) and its bias."""
        weight, bias = self.layers[layer].attn_out  # Linear: [D, H·d]
        return weight.t().reshape(self.layers[layer].n_heads, -1, weight.shape[0]), bias

    def residual_parts(self, layer: int, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
                       inputs: list[torch.Tensor], z: list[torch.Tensor], positions: torch.Tensor,
                       dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """Layer ``layer``'s input at ``positions`` (item 0) as the sum of what wrote it, each ``[n, D]`` in ``dtype``
        (see :meth:`probes.scratch.family.SplitNetwork.residual_parts`). BERT normalises its stream after the
        embeddings and after each attention and feed-forward step: each LayerNorm, its σ frozen at its input in
        this pass, is linear, so it maps every part already written (centred on its own, then ÷ σ × gain) and adds
        its bias to "biases", with the output projections' biases."""
        types = token_type_ids[:1] if token_type_ids is not None else None
        embedded = {name: e[0, positions] for name, e in self.embedding_parts(input_ids[:1], types).items()}
        parts = {name: embedded[name].to(dtype) for name in SHOWN if name in embedded}
        biases = parts["token embedding"].new_zeros(parts["token embedding"].shape)

        def norm(ln, total: torch.Tensor) -> None:  # a LayerNorm frozen at its input ``total`` (the model's)
            g, b = (t.to(dtype) for t in ln)
            sigma = torch.sqrt(total.to(dtype).var(-1, unbiased=False, keepdim=True) + self.eps)
            for name, part in parts.items():
                parts[name] = (part - part.mean(-1, keepdim=True)) / sigma * g
            biases.copy_((biases - biases.mean(-1, keepdim=True)) / sigma * g + b)

        norm(self.ln_emb, added(embedded))
        for i in range(layer):
            lay, zi = self.layers[i], z[i][0][:, positions]  # [H, n, d]
            w_o, b_o = self.head_out(i)
            assert b_o is not None  # BERT's attention output always has a bias (attention.output.dense.bias)
            writes = torch.einsum("hnd,hdD->hnD", zi.to(dtype), w_o.to(dtype))
            parts.update((f"head {i}.{h}", write) for h, write in enumerate(writes))
            biases += b_o.to(dtype)
            before = F.linear(zi.transpose(0, 1).reshape(len(positions), -1), *lay.attn_out) + inputs[i][0, positions]
            norm(lay.ln_attn, before)
            middle = F.layer_norm(before, (self.width,), *lay.ln_attn, self.eps)  # as the layer computes it
            feed = lay.feed_forward(middle)
            parts[f"MLP {i}"] = feed.to(dtype)
            norm(lay.ln_ffn, middle + feed)
        parts["biases"] = biases
        return parts

    def qk_parts(self, layer: int, parts: torch.Tensor, x: torch.Tensor, positions: torch.Tensor, length: int):
        """q and k of layer ``layer`` for each part of its input (no norm before them: BERT normalised the stream
        already), the projections without their biases; the last entry is the constant, the biases (see
        :meth:`probes.scratch.family.SplitNetwork.qk_parts`)."""
        lay, dt = self.layers[layer], parts.dtype
        out = []
        for weight, bias in (lay.query, lay.key):
            y = F.linear(torch.cat([parts, parts.new_zeros(1, *parts.shape[1:])]), weight.to(dt))
            y[-1] += bias.to(dt)
            out.append(split_heads(y, lay.n_heads))
        return tuple(out)

    def head_weights(self, layer: int):
        """Layer ``layer``'s W_Q, W_K, W_V ``[H, D, d]``, the gain of the LayerNorm that made its input (the
        embeddings' for layer 0, else the previous layer's last) folded into their rows; no biases. BERT is post-norm:
        the other LayerNorms between an earlier head's write and this layer (each layer's two) are left out (see
        :meth:`probes.scratch.family.SplitNetwork.head_weights`)."""
        lay = self.layers[layer]
        gain = (self.ln_emb if layer == 0 else self.layers[layer - 1].ln_ffn)[0]
        return tuple((gain[:, None] * w.t()).reshape(self.width, lay.n_heads, -1).transpose(0, 1)
                     for w, _ in (lay.query, lay.key, lay.value))

    def __call__(self, input_ids, attention_mask, token_type_ids=None, *, via, logits=True, chunk=None,
                 resume=None):
        # via: the pass (probes.scratch.hooks.Pass), whose points each step goes through: via.at(point, layer, x)
        # resume=(i, x): start at layer i from its input x (edited copies share the layers before an edit)
        first, x = resume or (0, None)
        if resume is None:
            x = added(self.embedding_parts(input_ids, token_type_ids))  # word + token type + position, HF's order
            x = via.at("embed", None, F.layer_norm(x, (self.width,), *self.ln_emb, self.eps))
        for i, layer in enumerate(self.layers[first:], start=first):
            x = via.at("resid_pre", i, x)
            x = via.at("resid_post", i, layer(x, via, chunk))
        x = via.at("final", None, x)  # post-norm: the last layer's output is the last hidden state
        if self.head is None or not logits:
            return None
        return via.at("logits", None, self.head(x))


_LM_ARCHITECTURES = {"BertForMaskedLM", "BertForPreTraining", "BertLMHeadModel"}


def hf_class(config) -> str:
    """With a language-model head where the checkpoint has one, else the bare encoder."""
    return "BertForMaskedLM" if _LM_ARCHITECTURES & set(getattr(config, "architectures", None) or []) else "BertModel"


def capture(hf, config, cap: Capture) -> None:
    """The Hugging Face view's q, k, v: the outputs of each layer's ``query``, ``key`` and ``value`` (RoBERTa's
    modules carry the same names)."""
    for layer in hf.base_model.encoder.layer:
        for name in ("query", "key", "value"):
            cap.hook(getattr(layer.attention.self, name), lambda _m, _i, out, key=name[0]: getattr(cap, key).append(
                split_heads(out, config.num_attention_heads)))


FAMILIES = (Family(
    name="bert", title="BERT", model_types=("bert",), hf_class=hf_class, network=Bert, check=check_config,
    capture=capture, scale=attention_scale, causal=is_causal, token_types=True, pairs=True,
    refuse_at_load=refuse_at_load,
    implemented="`hidden_act` (every name in `activations.py`), `layer_norm_eps`, `is_decoder` (causal mask), "
                "`type_vocab_size`, sentence pairs (token types)",
    refused="other activations, `add_cross_attention`, `position_embedding_type` other than `absolute` (refused at "
            "load: transformers 5 itself ignores it)",
    examples=("bert-base-uncased", "bert-base-cased", "bert-base-chinese"),
),)
