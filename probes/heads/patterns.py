"""Pattern classes of attention heads after Kovaleva et al. 2019 ("Revealing the Dark Secrets of
BERT"): vertical, diagonal, vertical+diagonal, block, heterogeneous.

The paper sorted heads by eye (and a CNN trained on 400 hand labels); here the rule is explicit and
computed per head on each sentence, from three shares of attention mass, averaged over query rows:

* ``diagonal``: mass on the token itself and its two neighbours (offsets −1, 0, +1);
* ``vertical``: mass on the two key columns that receive the most attention in the sentence
  (typically [CLS], [SEP], BOS or punctuation), outside that diagonal band;
* ``block``: for sentence pairs only, mass on keys of the query's own segment, outside the band and
  the vertical columns.

A head on one sentence is

* **vertical** when vertical ≥ 0.6;
* **diagonal** when diagonal ≥ 0.6;
* **vertical+diagonal** when neither is, but vertical + diagonal ≥ 0.6 with each ≥ 0.2;
* **block** when none of those holds, the input is a pair and block ≥ 0.6;
* **heterogeneous** otherwise.

Over a dataset, a head's class is the one it gets on most sentences; the share is reported as
``score`` (probe ``patterns``, label = class), with the share of each class in its own row.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import torch

from ..precision import upcast, working_dtype
from .combine import mean
from .engine import COLUMNS, token_attention
from .registry import Probe, from_data

CLASSES = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")
THRESHOLD = 0.6
MIXED_PART = 0.2


def shares(attn: torch.Tensor, segments: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Diagonal, vertical and block shares of ``attn`` ``[..., n, n]`` (``segments`` ``[n]``: 0/1)."""
    attn = upcast(attn)
    n = attn.shape[-1]
    q = torch.arange(n)
    band = ((q[None, :] - q[:, None]).abs() <= 1)  # [n, n]
    diagonal = (attn * band).sum(-1).mean(-1)
    outside = attn * ~band
    top = outside.sum(-2).topk(min(2, n), dim=-1).indices  # [..., 2] most attended columns
    columns = torch.zeros(attn.shape[:-2] + (n,), dtype=torch.bool)
    columns.scatter_(-1, top, True)
    vertical = (outside * columns[..., None, :]).sum(-1).mean(-1)
    if segments is None or segments.unique().numel() < 2:
        block = torch.zeros_like(diagonal)
    else:
        same = segments[:, None] == segments[None, :]
        block = (outside * ~columns[..., None, :] * same).sum(-1).mean(-1)
    return dict(diagonal=diagonal, vertical=vertical, block=block)


def classify(s: dict[str, torch.Tensor], is_pair: bool) -> torch.Tensor:
    """Class index (into :data:`CLASSES`) of every head from its shares."""
    v, d, b = s["vertical"], s["diagonal"], s["block"]
    out = torch.full(v.shape, CLASSES.index("heterogeneous"))
    if is_pair:
        out[b >= THRESHOLD] = CLASSES.index("block")
    out[(v + d >= THRESHOLD) & (v >= MIXED_PART) & (d >= MIXED_PART)] = CLASSES.index("vertical+diagonal")
    out[d >= THRESHOLD] = CLASSES.index("diagonal")
    out[v >= THRESHOLD] = CLASSES.index("vertical")
    return out


def pattern_classes(data: Iterable, probe: str = "patterns") -> pd.DataFrame:
    """``data``: the Traces of the inputs (or ``(trace, item)`` pairs, or hand-built (real tokens,
    attention ``[layers, heads, n, n]``) pairs; see :func:`~probes.heads.engine.token_attention`). One
    row per (class, layer, head): ``score`` = share of inputs where the head falls in that class; the
    column ``majority`` marks each head's most frequent class."""
    counts = None
    total = 0
    for tokens, attn in token_attention(data):
        segments = torch.tensor([t.segment for t in tokens])
        is_pair = bool(segments.max() > 0)
        cls = classify(shares(attn, segments), is_pair)  # [Ly, H]
        one_hot = torch.nn.functional.one_hot(cls, len(CLASSES)).to(working_dtype(attn.dtype))
        counts = one_hot if counts is None else counts + one_hot
        total += 1
    if counts is None:
        return pd.DataFrame(columns=[*COLUMNS, "majority"])
    majority = counts.argmax(-1)
    rows = []
    for c, name in enumerate(CLASSES):
        for layer in range(counts.shape[0]):
            for head in range(counts.shape[1]):
                share = float(counts[layer, head, c] / total)
                rows.append(dict(probe=probe, label=name, layer=layer, head=head, score=share,
                                 baseline=float("nan"), n=total, mean_attention=float("nan"),
                                 majority=bool(majority[layer, head] == c)))
    return pd.DataFrame(rows, columns=[*COLUMNS, "majority"])


def mark_majority(whole: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Combining chunks: each head's class is the one with the largest share over all the inputs."""
    best = frame.groupby(["layer", "head"])["score"].transform("max")
    frame["majority"] = frame["score"] == best
    return frame


PROBES = (Probe(
    name="patterns",
    about="Kovaleva et al.'s pattern classes (vertical, diagonal, block, heterogeneous)",
    order=60,
    default_data="ewt-dev",
    read_items=from_data(),
    score=lambda items, traces: pattern_classes(traces),
    combine=mean(extra=mark_majority),
    judged=lambda label: None,  # pattern classes describe a head's shape; there is no head-free baseline to beat
),)
