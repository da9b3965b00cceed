"""What an intervention changed, measured on the model's outputs.

With a language-model head (a decoder): the change in the mean next-token loss over the text, the share of
positions whose top prediction changed, and, given two target tokens, the change in their logit difference
at one position. For every model: how far the last hidden states moved, 1 − cosine per token (mean over the
real tokens, and at one token), and 1 − cosine of the mean-pooled sentence embedding.

The next-token measures need a vocabulary of logits per position (on SmolLM2 a 2,000-character text's are
88 MiB a copy, and the loss works in float64: two vocabularies more). :func:`lm_stats` reads what they need
from each row — the losses, the top prediction, the logit difference — with the logits made (from the last hidden
state and the unembedding) and scored :data:`LOGIT_POSITIONS` positions at a time (of one row or several), so a
batch of edited copies never holds a pass's logits: ablation (:mod:`.ablation`) and path patching (:mod:`.paths`)
both measure this way. Each position's logits and loss are its own, so the numbers do not depend on the slicing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..attention_math import soft_cap
from ..scratch import DecoderNetwork, build

LM_MEASURES = ("loss", "top_changed", "logit_diff")
HIDDEN_MEASURES = ("hidden_change", "token_change", "embedding_change")
LOGIT_POSITIONS = 64  # positions whose logits are made and scored at once, of one row or several (a vocabulary each,
# and two more in float64 for the loss: on SmolLM2 64 positions hold 60 MiB); fewer read the unembedding more often
ABOUT = {
    "loss": "change in the mean next-token loss (nats; > 0: the model predicts the text worse)",
    "top_changed": "share of positions whose top prediction changed",
    "logit_diff": "change in logit(target) − logit(other target) at the chosen position",
    "hidden_change": "1 − cosine of the last hidden states, mean over the real tokens",
    "token_change": "1 − cosine of the chosen token's last hidden state",
    "embedding_change": "1 − cosine of the mean-pooled sentence embedding",
}


def lm_network(model) -> tuple[DecoderNetwork, torch.Tensor]:
    """The from-scratch network of a model whose next-token measures apply (``model.predicts_tokens``, which the
    caller checked: a :class:`~probes.scratch.DecoderNetwork` with an unembedding) and its unembedding ``[V, D]``."""
    net = build(model)
    assert isinstance(net, DecoderNetwork) and net.unembedding is not None  # what predicts_tokens says
    return net, net.unembedding


@dataclass
class LMStats:
    """What the next-token measures read from ``B`` rows of one text of ``n`` real tokens: the next-token losses
    ``[B, n − 1]`` (float64), the top prediction ``[B, n]`` and, given two targets, their logit difference at one
    position ``[B]`` (float64; else None)."""

    losses: torch.Tensor
    top: torch.Tensor
    diff: torch.Tensor | None


def lm_stats(ids: torch.Tensor, n: int, position: int | None = None, targets: tuple[int, int] | None = None, *,
             logits: torch.Tensor | None = None, hidden: torch.Tensor | None = None,
             unembedding: torch.Tensor | None = None, softcap: float | None = None) -> LMStats:
    """:class:`LMStats` of each row, from its ``logits`` ``[B, L, V]``, or from its last ``hidden`` state ``[B, L, D]``
    (after the final norm) and the ``unembedding`` ``[V, D]``: the logits ``hidden · unembeddingᵀ``, as the
    network's own head makes them, :data:`LOGIT_POSITIONS` positions at a time (the rows' positions in turn, several
    rows' in one product where a row is shorter). ``ids``: the text's token ids (what
    each position predicts is the next one); ``position`` (default: the last real token) and ``targets``: where and
    between which two token ids the logit difference is read. ``softcap``: the network's final soft-cap (Gemma 2's
    ``final_logit_softcapping``), applied to the logits made from ``hidden``, as its own head applies it."""
    if logits is not None and hidden is None:
        rows, weight = logits, None
    elif logits is None and hidden is not None and unembedding is not None:
        rows, weight = hidden, unembedding
    else:
        raise ValueError("give the logits, or the hidden states and the unembedding")
    position = n - 1 if position is None else position

    def at(b: int, s: int | slice) -> torch.Tensor:  # the logits of row b at position(s) s
        return rows[b, s] if weight is None else soft_cap(F.linear(rows[b, s], weight), softcap)

    batch = rows.shape[0]
    losses = torch.empty(batch, max(n - 1, 0), dtype=torch.float64, device=rows.device)
    top = torch.empty(batch, n, dtype=torch.long, device=rows.device)
    diff = torch.empty(batch, dtype=torch.float64, device=rows.device)  # read only with targets
    # every (row, position) pair in turn, LOGIT_POSITIONS of them at once whatever row they belong to: one matrix
    # product of that many positions reads the unembedding once for all of them
    which = torch.arange(batch, device=rows.device).repeat_interleave(n)
    where = torch.arange(n, device=rows.device).repeat(batch)
    ids = ids.to(rows.device)
    with torch.inference_mode():
        for start in range(0, batch * n, LOGIT_POSITIONS):
            b, s = which[start:start + LOGIT_POSITIONS], where[start:start + LOGIT_POSITIONS]
            part = rows[b, s] if weight is None else soft_cap(F.linear(rows[b, s], weight), softcap)
            top[b, s] = part.argmax(-1)
            scored = s < n - 1  # the last real position predicts nothing of the text: its loss is left out
            if bool(scored.any()):
                target = torch.where(scored, ids[(s + 1).clamp(max=ids.shape[0] - 1)], -100)  # -100: ignored
                got = F.cross_entropy(part.double(), target, reduction="none", ignore_index=-100)
                losses[b[scored], s[scored]] = got[scored]
        if targets is not None:
            for i in range(batch):
                row = at(i, position)
                diff[i] = (row[targets[0]] - row[targets[1]]).double()
    return LMStats(losses, top, diff if targets is not None else None)


def token_losses(logits: torch.Tensor, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Next-token cross-entropy at positions 0..n−2 of each row of ``logits`` ``[B, L, V]``, ``[B, n − 1]`` (float64;
    :func:`lm_stats`'s losses)."""
    return lm_stats(ids, n, logits=logits).losses


def cosine_change(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 − cos(a, b) over the last dimension, in float64."""
    return 1.0 - F.cosine_similarity(a.double(), b.double(), dim=-1)


def compare(clean_hidden: torch.Tensor, hidden: torch.Tensor, n: int, clean_lm: LMStats | None = None,
            lm: LMStats | None = None, position: int | None = None,
            measures: Collection[str] | None = None) -> dict[str, torch.Tensor]:
    """Each measure for ``B`` edited rows against the clean run of one text of ``n`` real tokens (on the left:
    no padding inside the first n). ``clean_hidden`` is ``[L, D]``, ``hidden`` ``[B, L, D]``; ``clean_lm`` (one row)
    and ``lm`` (``B`` rows): their :func:`lm_stats`, for the next-token measures (``logit_diff`` when they were made
    with targets). ``position`` is the token whose change is measured (default: the last real one). ``measures``:
    only these (default: every one the inputs allow). Returns measure -> ``[B]`` float64."""
    position = n - 1 if position is None else position
    hidden, clean_hidden = hidden[:, :n], clean_hidden[:n]
    wanted = lambda name: measures is None or name in measures  # noqa: E731
    out = {}
    if wanted("hidden_change"):
        out["hidden_change"] = cosine_change(hidden, clean_hidden[None]).mean(-1)
    if wanted("token_change"):
        out["token_change"] = cosine_change(hidden[:, position], clean_hidden[None, position])
    if wanted("embedding_change"):
        out["embedding_change"] = cosine_change(hidden.double().mean(1), clean_hidden.double().mean(0)[None])
    if lm is not None and clean_lm is not None:
        if wanted("loss"):
            out["loss"] = (lm.losses - clean_lm.losses).mean(-1) if n > 1 else lm.losses.new_zeros(len(hidden))
        if wanted("top_changed"):
            out["top_changed"] = (lm.top != clean_lm.top).double().mean(-1)
        if lm.diff is not None and clean_lm.diff is not None and wanted("logit_diff"):
            out["logit_diff"] = lm.diff - clean_lm.diff
    return out
