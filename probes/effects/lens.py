"""Logit lens (decoders): what the residual stream would predict if the network stopped after each layer, and
what each head writes towards the vocabulary (its direct effect).

**Layers.** Row r of the lens reads the residual stream x_r at every position: row 0 ("embeddings") the input of
the first layer, row r ("after layer r−1") the input of layer r, and the last row ("after layer N−1") the residual
before the final norm. Each goes through the model's own final norm and the unembedding U, logits_r =
norm(x_r)·Uᵀ, and softmax(logits_r) gives the top k tokens and their probabilities. The last row is the same
computation on the same tensor as the model's own logits: it equals them (tested, float64 and fp32).

**Heads.** Head h of layer l writes c = z_h·W_O[h] into the residual stream (z_h: its weighted sum of values).
With the final norm's scale frozen at this pass's final residual (the σ of LayerNorm, the rms of RMSNorm), the norm
is linear, and norm_frozen(c)·Uᵀ is the head's *direct effect* on every token's logit: its share, exactly as
direct logit attribution (:mod:`.attribution`) computes it for one token; with everything else in the residual the
shares sum to the logits. These are logit contributions, not a distribution: there is no softmax, and a head's
top k are the tokens it pushes up the most (what it does through later layers is not in them).

Only one layer's logits ``[positions, V]`` (heads: ``[H, positions, V]``) exist at a time, in chunks of positions
within :data:`LOGIT_BUDGET`: each is cut to its top k before the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..errors import BadOption, EmptyInput, InputTooLong
from ..head_index import check_layer, check_position
from ..models import Piece
from ..scratch import head_writes, net_logits, point, run_with_hooks
from ..seam import reader
from ..tokens import readable_tokens
from .measures import lm_network

TOP_K = 5  # tokens kept per cell (the app's tooltip shows them)
LOGIT_BUDGET = 64 * 2**20  # bytes of logits one chunk of positions may hold


def stage(row: int) -> str:
    """The name of lens row ``row``: "embeddings", then "after layer 0", "after layer 1", …"""
    return "embeddings" if row == 0 else f"after layer {row - 1}"


@dataclass
class Lens:
    """The logit lens of one text (see the module's docstring)."""

    layers: pd.DataFrame  # row, stage, position, input, rank, token_id, piece, probability, logit
    heads: pd.DataFrame | None  # layer, head, position, input, rank, token_id, piece, logit (a direct effect)
    tokens: list[str]  # the text's readable tokens
    positions: list[int]  # the positions read (default: all)
    n_layers: int
    k: int

    @property
    def stages(self) -> list[str]:
        """The row names, top to bottom: "embeddings", "after layer 0", …, "after layer N−1"."""
        return [stage(r) for r in range(self.n_layers + 1)]


def check(model) -> None:
    """Refuse a model the lens cannot read: it needs a decoder with a language-model head (and a final norm)."""
    if not model.predicts_tokens:
        raise BadOption(f"{model.name} has no language-model head (it is an encoder, or a decoder checkpoint without "
                        "one): the logit lens reads the residual stream through the final norm and the unembedding "
                        "of a decoder; pick one, such as smollm2 or a GPT-2")


def encoding(model, ids: Sequence[int]):
    """An :class:`~probes.models.Encoding` of token ids as they are (a generated sequence: no re-tokenising)."""
    ids = [int(i) for i in ids]
    if not ids:
        raise EmptyInput("no tokens given: the lens needs at least one")
    if len(ids) > model.max_tokens:
        raise InputTooLong(len(ids), model.max_tokens, model.name)
    special = set(model.tokenizer.all_special_ids)
    piece = Piece(ids, [(0, 0)] * len(ids), [None if i in special else 0 for i in ids])
    return model.batch([piece], [model.tokenizer.decode(ids)])


@reader
def logit_lens(model, text: str | None = None, *, ids: Sequence[int] | None = None, k: int = TOP_K,
               positions: Sequence[int] | None = None, heads: bool = True,
               head_layers: Sequence[int] | None = None, truncate: bool = False) -> Lens:
    """The logit lens of ``text`` (or of the token ids ``ids``, taken as they are) at ``positions`` (default:
    every token): each layer's top ``k`` tokens with their probabilities, and, with ``heads``, each head's top
    ``k`` direct logit contributions, for the heads of ``head_layers`` (default: every layer; the heads cost
    most: H unembeddings a layer). ``truncate`` keeps the first tokens of a text longer than the context."""
    check(model)
    if (text is None) == (ids is None):
        raise ValueError("give the text or the token ids, not both")
    if not 1 <= k <= 100:
        raise BadOption(f"k={k}: keep between 1 and 100 tokens per cell")
    net, unembedding = lm_network(model)
    enc = model.encode(text, truncate=truncate) if ids is None else encoding(model, ids)
    n = int(enc.attention_mask.sum())
    positions = list(range(n)) if positions is None else [int(p) for p in positions]
    for p in positions:
        check_position(p, n)
    head_layers = list(range(model.n_layers)) if head_layers is None else [int(i) for i in head_layers]
    for layer in head_layers:
        check_layer(layer, model.n_layers, model.name)
    last = point(model.n_layers - 1, "resid_post")  # the residual before the final norm
    # each layer read alone, not the logits; each head's output where its writes are read
    got = run_with_hooks(model, enc, logits=False, keep=["resid_pre", last, *(["attn.z"] if heads else [])])
    inputs, residual, zs = got.each("resid_pre"), got[last], got.each("attn.z")
    at = torch.tensor(positions, dtype=torch.long, device=residual.device)
    vocab = unembedding.shape[0]
    chunk = max(1, LOGIT_BUDGET // (vocab * residual.element_size() * (model.n_heads if heads else 1)))
    tokens = [t.text for t in enc.tokens[0][:n]]
    with torch.inference_mode():
        streams = [*inputs, residual]  # each [1, L, D]: the embeddings, each layer's input, the last residual
        layer_top = []
        for x in streams:
            normed = net.normed(x[0])[at]  # the true final norm (each position alone), then the positions read
            parts = [_top(net_logits(net, normed[i:i + chunk]), k, probabilities=True)  # soft-capped: Gemma 2
                     for i in range(0, len(positions), chunk)]
            # ([P, k] ids, logits, probabilities)
            layer_top.append(tuple(torch.cat(p, dim=0) for p in zip(*parts, strict=True)))
        head_top = None
        if heads and head_layers:
            final = residual[0, at]  # the final norm's scale is frozen here, per position
            head_top = []
            for layer in head_layers:
                z = zs[layer][0][:, at]  # [H, P, d]
                parts = []
                for i in range(0, len(positions), chunk):
                    frozen, _bias = net.final_norm(final[i:i + chunk])  # the bias is no head's: left out
                    write = head_writes(net, layer, z[:, i:i + chunk])  # what each head writes (Gemma: post-normed)
                    parts.append(_top(F.linear(frozen(write), unembedding), k, probabilities=False))
                head_top.append(tuple(torch.cat(p, dim=1) for p in zip(*parts, strict=True)))  # ([H, P, k] ids, logits)
    pieces = _pieces(model.tokenizer)
    layers = _layer_frame(layer_top, positions, tokens, pieces)
    head_frame = None if head_top is None else _head_frame(head_top, head_layers, positions, tokens, pieces)
    return Lens(layers, head_frame, tokens, positions, len(inputs), k)


def _top(logits: torch.Tensor, k: int, probabilities: bool):
    """The top ``k`` of the last axis: ids, logits and (``probabilities``) their softmax probabilities."""
    values, ids = logits.topk(min(k, logits.shape[-1]), dim=-1)
    if not probabilities:
        return ids, values
    return ids, values, values.sub(logits.logsumexp(-1, keepdim=True)).exp()


def _pieces(tokenizer):
    """token id -> its readable text (a leading space kept as a space), computed once per id."""
    seen: dict[int, str] = {}

    def piece(i: int) -> str:
        if i not in seen:
            seen[i] = readable_tokens(tokenizer, [i], [(0, 0)], "")[0].text
        return seen[i]

    return piece


def _layer_frame(tops, positions: list[int], tokens: list[str], piece) -> pd.DataFrame:
    ids = torch.stack([t[0] for t in tops]).cpu().numpy()  # [R, P, k]
    logits = torch.stack([t[1] for t in tops]).double().cpu().numpy()
    probs = torch.stack([t[2] for t in tops]).double().cpu().numpy()
    rows, places, ranks = np.meshgrid(np.arange(ids.shape[0]), np.arange(ids.shape[1]), np.arange(ids.shape[2]),
                                      indexing="ij")
    pos = np.asarray(positions)[places.ravel()]
    return pd.DataFrame({"row": rows.ravel(), "stage": [stage(int(r)) for r in rows.ravel()], "position": pos,
                         "input": [tokens[p] for p in pos], "rank": ranks.ravel() + 1, "token_id": ids.ravel(),
                         "piece": [piece(int(i)) for i in ids.ravel()], "probability": probs.ravel(),
                         "logit": logits.ravel()})


def _head_frame(tops, layers: list[int], positions: list[int], tokens: list[str], piece) -> pd.DataFrame:
    ids = torch.stack([t[0] for t in tops]).cpu().numpy()  # [layers, H, P, k]
    logits = torch.stack([t[1] for t in tops]).double().cpu().numpy()
    which, head, places, ranks = np.meshgrid(*(np.arange(s) for s in ids.shape), indexing="ij")
    pos = np.asarray(positions)[places.ravel()]
    layer = np.asarray(layers, dtype=np.int64)[which.ravel()]
    return pd.DataFrame({"layer": layer, "head": head.ravel(), "position": pos,
                         "input": [tokens[p] for p in pos], "rank": ranks.ravel() + 1, "token_id": ids.ravel(),
                         "piece": [piece(int(i)) for i in ids.ravel()], "logit": logits.ravel()})
