"""Direct logit attribution (decoders): how much each head's output, written straight into the residual
stream, adds to one token's logit (or to the difference of two tokens' logits).

The logit of token t at position p is norm(x)·u_t, where x is the residual stream before the final norm and
u_t the unembedding row of t. x is a sum of parts: the embeddings, every head's output z_h·W_O[h], every
output projection's bias and every MLP's output. Freezing the final norm's scale at its value in this pass
(the σ of LayerNorm, the rms of RMSNorm) makes norm linear, so the logit splits exactly into one share per
part: share(c) = norm_frozen(c)·u_t, plus the norm's own bias·u_t (GPT-2). Each head's share is its direct
effect; "rest" is everything else (embeddings, MLPs, biases, the norm's bias), so heads + rest = the logit.
A head's indirect effect (through later layers) is not in its share: ablation measures that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import BadOption
from ..head_index import check_index, check_position
from ..scratch import head_writes, point, refuse_final_softcap, run_with_hooks
from ..seam import reader
from .measures import lm_network


@dataclass
class Attribution:
    """One position's direct logit attribution."""

    heads: np.ndarray  # [layers, H]: each head's share of the logit (difference)
    rest: float  # embeddings, MLPs, biases, the final norm's bias
    logit: float  # the model's own logit (difference) at the position
    position: int  # the query position (among the real tokens)
    target: int  # token id
    other: int | None  # token id of the second token, when a difference was asked for
    tokens: list[str]  # readable real tokens

    @property
    def total(self) -> float:
        """heads + rest: equal to ``logit`` up to float rounding (tested)."""
        return float(self.heads.sum()) + self.rest


@reader
def target_id(model, word: str) -> int:
    """The token id of ``word`` as the model would write it next after a word: with its leading space (" she",
    where the tokenizer has such a token), else as it is; a word of several tokens is refused, naming them."""
    tok = model.tokenizer
    for candidate in (" " + word.lstrip(), word) if not word.startswith(" ") else (word,):
        ids = tok.encode(candidate, add_special_tokens=False)
        if len(ids) == 1:
            return ids[0]
    pieces = tok.convert_ids_to_tokens(tok.encode(word, add_special_tokens=False))
    raise BadOption(f"target {word!r} is {len(pieces)} tokens on {model.name} ({' '.join(map(str, pieces))}): choose a "
                    "word that is one token")


@reader
def last_target(model, text: str, first: int = 1) -> tuple[int, str] | None:
    """The last token of ``text`` (at position ``first`` or later among its real tokens: the text predicts token i at
    i − 1) that can be typed as a target: ``(position, raw text)``, where the raw text is what the token decodes to
    and :func:`target_id` gives that token's id back for it (" hungry" on smollm2, with its space). None when no
    token qualifies: a byte-level piece of a character (smollm2 writes 饿 as three) decodes to no text of its own,
    and a special token is not a word."""
    tok = model.tokenizer
    enc = model.encode(text)  # an empty text is refused here (EmptyInput)
    ids = enc.input_ids[0][enc.attention_mask[0].bool()].tolist()
    special = set(getattr(tok, "all_special_ids", None) or [])
    for position in range(len(ids) - 1, max(first, 0) - 1, -1):
        if ids[position] in special:
            continue
        raw = tok.decode([ids[position]], clean_up_tokenization_spaces=False)
        if not raw.strip() or "\ufffd" in raw:  # blank, or part of a character's bytes
            continue
        try:
            if target_id(model, raw) == ids[position]:
                return position, raw
        except BadOption:  # the raw text is several tokens when encoded on its own
            continue
    return None


@reader
def logit_attribution(model, text: str, target: int, other: int | None = None,
                      position: int | None = None) -> Attribution:
    """Each head's direct share of token ``target``'s logit (minus ``other``'s) at ``position`` (default: the last
    token, whose logits predict what comes next)."""
    if not model.predicts_tokens:
        raise BadOption(f"{model.name} has no language-model head to attribute logits to (an encoder): use the "
                        "ablation effects on its hidden states instead")
    net, unembedding = lm_network(model)
    refuse_final_softcap(net, "direct logit attribution")
    enc = model.encode(text)  # an empty text is refused here (EmptyInput)
    n = int(enc.attention_mask.sum())
    check_position(position, n)
    position = n - 1 if position is None else position
    vocab = unembedding.shape[0]
    for t in (target, other):
        if t is not None:
            check_index(t, vocab, "token id", f"{model.name}'s vocabulary")
    last = point(model.n_layers - 1, "resid_post")  # the residual before the final norm
    got = run_with_hooks(model, enc, keep=["attn.z", last])
    assert got.logits is not None  # a model that predicts tokens has a language-model head, and logits were asked
    residual = got[last][0, position]
    with torch.inference_mode():
        u = unembedding[target].double()
        if other is not None:
            u = u - unembedding[other].double()
        frozen, bias = net.final_norm(residual)
        shares = []
        rest_part = residual.double()  # the residual, less every head's write below
        for layer, z in enumerate(got.each("attn.z")):
            # each head's write (Gemma: through its post-attention norm, frozen at this pass)
            parts = head_writes(net, layer, z[0, :, position, None].double())[:, 0]  # [H, D]
            shares.append(frozen(parts) @ u)
            rest_part = rest_part - parts.sum(0)
        heads = torch.stack(shares)  # [layers, H]
        rest = frozen(rest_part) @ u + (bias.double() @ u if bias is not None else 0.0)
        logit = got.logits[0, position, target].double()
        if other is not None:
            logit = logit - got.logits[0, position, other].double()
    real = enc.attention_mask[0].bool().tolist()
    return Attribution(heads.cpu().numpy(), float(rest), float(logit), position, target, other,
                       [t.text for t, keep in zip(enc.tokens[0], real, strict=True) if keep])
