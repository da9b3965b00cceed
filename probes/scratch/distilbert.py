"""DistilBERT, from scratch: BERT's network (``bert.py``) under its own weight names, without token types.

    x = LayerNorm(word[token] + position[i])                 (no token-type table)
    for each layer:   x = sa_layer_norm(x + attention(x))    (q_lin, k_lin, v_lin, out_lin; post-LayerNorm)
                      x = output_layer_norm(x + lin2(act(lin1(x))))
    logits = vocab_projector(vocab_layer_norm(act(vocab_transform(x))))   (masked-LM head, where there is one)

Every LayerNorm's ε is 1e-12, fixed in Hugging Face's code (the config has no ``layer_norm_eps``); the activation
is ``activation`` (in the layers and the head). It is never causal. ``sinusoidal_pos_embds``: the position table
holds sin/cos values instead of learned ones; Hugging Face fills it at initialisation and then reads it like any
table, from the module's weights, and so does this network (the same rows, whatever filled them). Its tokenizer
(WordPiece, like BERT's) joins sentence pairs as ``[CLS] A [SEP] B [SEP]`` and gives no token types.
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedModel
from .activations import ACTIVATIONS
from .attention import split_heads
from .bert import IGNORED, Bert, MaskedLMHead, Names, linear
from .family import Capture, Family
from .weights import Weights

EPS = 1e-12  # every LayerNorm's, in Hugging Face's DistilBERT
NAMES = Names(layer="transformer.layer.{i}.", query="attention.q_lin", key="attention.k_lin", value="attention.v_lin",
              attn_out="attention.out_lin", ln_attn="sa_layer_norm", ffn_in="ffn.lin1", ffn_out="ffn.lin2",
              ln_ffn="output_layer_norm")


def check(config, name: str) -> None:
    """Refuse, by name, the DistilBERT options this file does not implement."""
    act = config.activation
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise UnsupportedModel(f"{name!r}: activation={act!r} is not implemented by the from-scratch DistilBERT "
                               f"(it has {', '.join(sorted(ACTIVATIONS))})")


def attention_scale(config, layer: int) -> float:
    """1/√d_k in every layer (d_k = dim / n_heads)."""
    return (config.dim // config.n_heads) ** -0.5


class DistilBert(Bert):
    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "distilbert"):
        check(config, name)
        act = ACTIVATIONS[config.activation]
        w = Weights(state_dict, strip="distilbert.", ignore_suffixes=IGNORED)
        self.read_encoder(w, config, eps=EPS, act=act, causal=False, names=NAMES, token_types=False)
        self.head = None
        if w.get("vocab_projector.weight") is not None:  # DistilBertForMaskedLM (vocab_projector: tied to word)
            self.head = MaskedLMHead(linear(w, "vocab_transform"), linear(w, "vocab_layer_norm"),
                                     linear(w, "vocab_projector"), act, EPS)
        w.check_all_used(name)


def hf_class(config) -> str:
    """With the masked-LM head where the checkpoint has one, else the bare encoder."""
    return ("DistilBertForMaskedLM" if "DistilBertForMaskedLM" in (getattr(config, "architectures", None) or [])
            else "DistilBertModel")


def capture(hf, config, cap: Capture) -> None:
    """The Hugging Face view's q, k, v: the outputs of each layer's ``q_lin``, ``k_lin`` and ``v_lin``."""
    for layer in hf.base_model.transformer.layer:
        for name in ("q_lin", "k_lin", "v_lin"):
            cap.hook(getattr(layer.attention, name), lambda _m, _i, out, key=name[0]: getattr(cap, key).append(
                split_heads(out, config.n_heads)))


FAMILIES = (Family(
    name="distilbert", title="DistilBERT", model_types=("distilbert",), hf_class=hf_class, network=DistilBert,
    check=check, capture=capture, scale=attention_scale, causal=lambda config: False, token_types=False, pairs=True,
    implemented="BERT's layers under DistilBERT's names (`q_lin`, `sa_layer_norm`, `ffn.lin1`, …), no token types, "
                "LayerNorm ε 1e-12, `activation` (every name in `activations.py`), `sinusoidal_pos_embds` (the table "
                "is read from the weights, as Hugging Face reads it), the masked-LM head (`vocab_transform`, "
                "`vocab_layer_norm`, `vocab_projector`)",
    refused="other activations",
    examples=("distilbert-base-uncased",),
),)
