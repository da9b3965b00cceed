"""What an intervention changed, measured on the model's outputs.

With a language-model head (a decoder): the change in the mean next-token loss over the text, the share of
positions whose top prediction changed, and, given two target tokens, the change in their logit difference
at one position. For every model: how far the last hidden states moved, 1 − cosine per token (mean over the
real tokens, and at one token), and 1 − cosine of the mean-pooled sentence embedding.
"""

from __future__ import annotations

from collections.abc import Collection

import torch
import torch.nn.functional as F

LM_MEASURES = ("loss", "top_changed", "logit_diff")
HIDDEN_MEASURES = ("hidden_change", "token_change", "embedding_change")
LOSS_POSITIONS = 64  # positions whose next-token loss is worked out at once (in float64: two vocabularies each)
ABOUT = {
    "loss": "change in the mean next-token loss (nats; > 0: the model predicts the text worse)",
    "top_changed": "share of positions whose top prediction changed",
    "logit_diff": "change in logit(target) − logit(other target) at the chosen position",
    "hidden_change": "1 − cosine of the last hidden states, mean over the real tokens",
    "token_change": "1 − cosine of the chosen token's last hidden state",
    "embedding_change": "1 − cosine of the mean-pooled sentence embedding",
}


def token_losses(logits: torch.Tensor, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Next-token cross-entropy at positions 0..n−2 of each row, ``[B, n − 1]`` (float64). Worked out
    :data:`LOSS_POSITIONS` positions of one row at a time: the float64 copy and its log-softmax are two vocabularies
    per position (a 2,000-character text on SmolLM2, all of a batch's at once: 350 MiB a row), and each position's
    loss is its own, so the numbers are the same whatever the split."""
    out = torch.empty(logits.shape[0], max(n - 1, 0), dtype=torch.float64, device=logits.device)
    for b, row in enumerate(logits):
        for start in range(0, n - 1, LOSS_POSITIONS):
            end = min(start + LOSS_POSITIONS, n - 1)
            out[b, start:end] = F.cross_entropy(row[start:end].double(), ids[start + 1:end + 1], reduction="none")
    return out


def cosine_change(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 − cos(a, b) over the last dimension, in float64."""
    return 1.0 - F.cosine_similarity(a.double(), b.double(), dim=-1)


def compare(clean_hidden: torch.Tensor, hidden: torch.Tensor, n: int, clean_logits: torch.Tensor | None = None,
            logits: torch.Tensor | None = None, ids: torch.Tensor | None = None, position: int | None = None,
            targets: tuple[int, int] | None = None, measures: Collection[str] | None = None) -> dict[str, torch.Tensor]:
    """Each measure for ``B`` edited rows against the clean run of one text of ``n`` real tokens (on the left:
    no padding inside the first n). ``clean_*`` are ``[L, …]``, the edited ``[B, L, …]``; ``position`` is the
    token whose change is measured (default: the last real one). ``measures``: only these (default: every one the
    inputs allow). Returns measure -> ``[B]`` float64."""
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
    if logits is not None and clean_logits is not None:
        if wanted("loss"):
            base = token_losses(clean_logits[None], ids, n)
            out["loss"] = (token_losses(logits, ids, n) - base).mean(-1) if n > 1 else torch.zeros(len(hidden))
        if wanted("top_changed"):
            out["top_changed"] = (logits[:, :n].argmax(-1) != clean_logits[None, :n].argmax(-1)).double().mean(-1)
        if targets is not None and wanted("logit_diff"):
            t, o = targets
            diff = lambda x: (x[..., position, t] - x[..., position, o]).double()  # noqa: E731
            out["logit_diff"] = diff(logits) - diff(clean_logits)
    return out
