"""Decoder heads: previous-token, duplicate-token and induction scores, as TransformerLens's
``detect_head`` defines them, on sequences of random tokens repeated twice.

For each head, with A its attention pattern on one sequence and D a 0/1 detection pattern, the
"mul" measure is ``sum(A · D) / sum(A)``, averaged over the sequences; ``exclude_bos`` zeroes the
attention on the first token and ``exclude_current`` the diagonal before measuring. Detection
patterns (query i, key j), as in TransformerLens:

* ``previous_token``: j = i − 1;
* ``duplicate_token``: j < i and token j == token i;
* ``induction``: j ≤ i and token j − 1 == token i, j − 1 ≠ i (the token after an earlier copy of i).

An encoder can look both ways, so for a bidirectional model three mirrored patterns are reported
too, labelled as such: ``next_token`` (j = i + 1), ``duplicate_token_bidirectional`` (any j ≠ i with
the same token) and ``induction_bidirectional`` (j − 1 ≠ i with token j − 1 == token i).

``baseline`` is the same measure for uniform attention over the keys each query may see.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pandas as pd
import torch

from ..precision import upcast
from .combine import carry, mean
from .engine import COLUMNS
from .registry import Probe

if TYPE_CHECKING:
    from ..models import Encoding
    from ..seam import ModelLike, TraceLike


def detection_patterns(ids: torch.Tensor, bidirectional: bool) -> dict[str, torch.Tensor]:
    """0/1 patterns ``[n, n]`` for one sequence of token ids ``[n]``."""
    n = len(ids)
    same = (ids[:, None] == ids[None, :]).float()
    same.fill_diagonal_(0.0)
    shifted = torch.zeros(n, n)
    shifted[:, 1:] = same[:, :-1]  # key j is the token after an occurrence (j - 1) of the query's token
    patterns = {
        "previous_token": torch.diag(torch.ones(n - 1), -1),
        "duplicate_token": torch.tril(same),
        "induction": torch.tril(shifted),
    }
    if bidirectional:
        patterns |= {
            "next_token": torch.diag(torch.ones(n - 1), 1),
            "duplicate_token_bidirectional": same,
            "induction_bidirectional": shifted * (1 - torch.eye(n)),
        }
    return patterns


def mul_score(attn: torch.Tensor, pattern: torch.Tensor, exclude_bos: bool, exclude_current: bool) -> torch.Tensor:
    """TransformerLens's "mul" measure for every head at once: ``attn`` ``[..., n, n]`` -> ``[...]``."""
    attn = upcast(attn).clone()
    if exclude_bos:
        attn[..., :, 0] = 0.0
    if exclude_current:
        attn.diagonal(dim1=-2, dim2=-1).zero_()
    return (attn * pattern).sum((-2, -1)) / attn.sum((-2, -1))


def repeated_random_tokens(tokenizer, n_sequences: int, length: int, seed: int = 0) -> list[list[int]]:
    """``n_sequences`` lists of ids: ``length`` random non-special tokens, then the same again."""
    special = set(tokenizer.all_special_ids)
    vocab = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_sequences):
        half = vocab[torch.randint(len(vocab), (length,), generator=g)].tolist()
        out.append(half + half)
    return out


def repeated_tokens(model: ModelLike, n_sequences: int = 20, length: int = 25, seed: int = 0) -> Encoding:
    """The :class:`~probes.models.Encoding` the induction probe reads: ``n_sequences`` of ``length``
    random tokens repeated twice, with BOS (or [CLS] … [SEP] for an encoder) added the way the
    tokenizer adds them. The only part of the probe that needs the model (its tokenizer)."""
    from ..models import Encoding
    from ..tokens import readable_tokens

    tok = model.tokenizer
    rows = []
    for body in repeated_random_tokens(tok, n_sequences, length, seed):
        if not model.is_causal and tok.cls_token_id is not None and tok.sep_token_id is not None:
            rows.append([tok.cls_token_id, *body, tok.sep_token_id])  # as BERT sees a sentence
        elif tok.bos_token_id is not None:
            rows.append([tok.bos_token_id, *body])  # TransformerLens prepends BOS to every sequence
        else:
            rows.append(body)
    ids = torch.tensor(rows)
    offsets = [(0, 0)] * ids.shape[1]
    tokens = [readable_tokens(tok, r, offsets, "") for r in rows]
    types = torch.zeros_like(ids) if model.family and model.family.token_types else None
    return Encoding(ids, torch.ones_like(ids), types, tokens, ["random tokens"] * len(rows), [None] * len(rows),
                    [None] * len(rows))


def _items(traces: Iterable) -> Iterable[tuple[TraceLike, int]]:
    """Each batch item of each Trace in turn, as (trace, item); (trace, item) pairs pass through (one item scored
    alone)."""
    for entry in traces:
        if isinstance(entry, tuple):
            yield entry
        else:
            yield from ((entry, item) for item in range(entry.batch_size))


def induction_scores(traces: Iterable[TraceLike], exclude_bos: bool = False, exclude_current: bool = False,
                     probe: str = "induction") -> pd.DataFrame:
    """Score every layer × head from the Traces of repeated random tokens (:func:`repeated_tokens`);
    a bidirectional model (the Traces say) gets the mirrored patterns too."""
    totals: dict[str, torch.Tensor] = {}
    bases: dict[str, float] = {}
    count = 0
    for trace, item in _items(traces):
        bidirectional = not trace.is_causal
        seq = trace.input_ids[item][trace.attention_mask[item]].cpu()
        n = len(seq)
        allowed = torch.ones(n, n).tril() if trace.is_causal else torch.ones(n, n)
        uniform = allowed / allowed.sum(-1, keepdim=True)
        attn = trace.all_attention(item)
        for label, pattern in detection_patterns(seq, bidirectional).items():
            totals[label] = totals.get(label, 0) + mul_score(attn, pattern, exclude_bos, exclude_current)
            bases[label] = bases.get(label, 0.0) + float(mul_score(uniform, pattern, exclude_bos, exclude_current))
        count += 1
    out = []
    for label, total in totals.items():
        mean = (total / count).tolist()
        for layer, row in enumerate(mean):
            for head, value in enumerate(row):
                out.append(dict(probe=probe, label=label, layer=layer, head=head, score=value,
                                baseline=bases[label] / count, n=count, mean_attention=value,
                                direction="bidirectional" if label.endswith(("_bidirectional", "next_token"))
                                else "causal"))
    return pd.DataFrame(out, columns=[*COLUMNS, "direction"])


PROBES = (Probe(
    name="induction",
    about="previous-token, duplicate-token and induction scores on random repeated tokens",
    order=50,
    default_data=None,
    read_items=lambda data, limit: list(range(limit or 20)),  # one random repeated sequence per item; no data set
    # a chunk of items is one batch of sequences, drawn with the chunk's first item as the seed
    encodings=lambda model, items: [repeated_tokens(model, n_sequences=len(items), seed=items[0])] if items else [],
    score=lambda items, traces: induction_scores(traces),
    reads=lambda data: True,  # random tokens: it runs with any --data
    combine=mean(extra=carry("direction")),
    judged=lambda label: "mean",  # a mean over sequences of TransformerLens's score, against uniform attention
),)
