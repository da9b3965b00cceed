"""RoBERTa, from scratch: BERT's network (``bert.py``) with positions counted from the padding index.

    position[t] = padding_idx + (how many non-padding tokens up to t)   for a token,
                  padding_idx                                             for padding  (padding_idx = pad_token_id)
    x = LayerNorm(word[token] + token_type[0] + position[position[t]])
    for each layer:   as BERT (post-LayerNorm, exact GELU or ``hidden_act``)
    logits = decoder(LayerNorm(gelu(dense(x))))             (``lm_head``, where the checkpoint has one)

The position table's first padding_idx + 1 rows are never read by a token (rows from padding_idx + 1 on are:
roberta-base's 514 rows hold 512 positions). Hugging Face counts the positions from the token ids, not from the
attention mask (``create_position_ids_from_input_ids``): a token whose id is the padding id gets the padding row
wherever it stands, and so it does here. RoBERTa's tokenizer gives no token types (one type, ``type_vocab_size``
1), so every token reads row 0 of the token-type table; it joins sentence pairs with separators (``<s> A </s></s>
B </s>``). The LM head's activation is exact GELU whatever ``hidden_act`` says (Hugging Face's ``RobertaLMHead``).
XLM-RoBERTa and CamemBERT are the same code in transformers (other tokenizers, the same weight names).
"""

from __future__ import annotations

import torch

from ..errors import UnsupportedModel
from .activations import ACTIVATIONS
from .bert import IGNORED, Bert, MaskedLMHead, attention_scale, capture, check_config, is_causal, linear, refuse_at_load
from .family import Family
from .weights import Weights

# the model_type of each member and the prefix of its transformers classes (XLMRobertaModel, …)
CLASSES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}


def check(config, name: str) -> None:
    """BERT's options, and a padding index to count the positions from."""
    check_config(config, name, "RoBERTa")
    pad = getattr(config, "pad_token_id", None)
    if not isinstance(pad, int) or pad < 0:
        raise UnsupportedModel(f"{name!r}: pad_token_id={pad!r}; RoBERTa counts its positions from the padding index, "
                               "so the from-scratch RoBERTa needs one")
    if config.max_position_embeddings <= pad + 1:
        raise UnsupportedModel(f"{name!r}: max_position_embeddings={config.max_position_embeddings} leaves no "
                               f"position after the padding index (pad_token_id={pad})")


def max_tokens(config) -> int:
    """The longest input the position table holds: its rows after the padding index's (512 of roberta-base's 514)."""
    return config.max_position_embeddings - config.pad_token_id - 1


class Roberta(Bert):
    def __init__(self, state_dict: dict[str, torch.Tensor], config, name: str = "roberta"):
        check(config, name)
        w = Weights(state_dict, strip="roberta.", ignore_suffixes=IGNORED)
        self.read_encoder(w, config, eps=config.layer_norm_eps, act=ACTIVATIONS[config.hidden_act],
                          causal=is_causal(config))
        self.padding_idx = config.pad_token_id
        for key in ("pooler.dense.weight", "pooler.dense.bias"):  # after the last layer: no attention changes
            w.get(key)
        self.head = None
        if w.get("lm_head.decoder.weight") is not None:  # masked-LM head (RobertaForMaskedLM, …ForCausalLM)
            w.get("lm_head.bias")  # the same tensor as decoder.bias
            self.head = MaskedLMHead(linear(w, "lm_head.dense"), linear(w, "lm_head.layer_norm"),
                                     linear(w, "lm_head.decoder"), ACTIVATIONS["gelu"], config.layer_norm_eps)
        w.check_all_used(name)

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """padding_idx + 1, + 2, … over the tokens, padding_idx at each padding id (Hugging Face's
        ``create_position_ids_from_input_ids``, step by step)."""
        token = input_ids.ne(self.padding_idx).long()  # 1: a token, 0: padding
        return torch.cumsum(token, dim=1) * token + self.padding_idx


_LM_ARCHITECTURES = ("ForMaskedLM", "ForCausalLM")


def hf_class(config) -> str:
    """The member's class with its masked-LM head where the checkpoint has one (a causal-LM checkpoint's head is the
    same ``lm_head``), else the bare encoder."""
    prefix = CLASSES[config.model_type]
    archs = getattr(config, "architectures", None) or []
    return prefix + ("ForMaskedLM" if any(a in {prefix + s for s in _LM_ARCHITECTURES} for a in archs) else "Model")


FAMILIES = (Family(
    name="roberta", title="RoBERTa", model_types=tuple(CLASSES), hf_class=hf_class, network=Roberta, check=check,
    capture=capture, scale=attention_scale, causal=is_causal, token_types=False, pairs=True,
    refuse_at_load=refuse_at_load, max_tokens=max_tokens,
    implemented="as BERT, plus positions counted from `pad_token_id` + 1 (padding tokens at `pad_token_id`, read "
                "from the token ids as Hugging Face does), one token type, the `lm_head` (dense, exact GELU, "
                "LayerNorm, decoder); `xlm-roberta` and `camembert` are the same code",
    refused="as BERT, and a config without `pad_token_id` (the positions are counted from it)",
    examples=("roberta-base", "xlm-roberta-base"),
),)
