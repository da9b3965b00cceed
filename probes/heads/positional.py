"""Positional heads: where does each head look, relative to the query token?

For every layer × head, over all real tokens of all sentences (token level, special tokens included
as queries and keys):

* ``previous`` / ``next`` / ``self``: mean attention on the token just before, just after, the token itself (a
  decoder has no ``next``: its query cannot look ahead);
* ``sink``: the *sink share*, the weight a query puts on the first real token (BOS / ``[CLS]`` where the
  tokenizer adds one, else the first word piece), averaged over the queries *after* it: row 0 is left
  out on every model, since in a decoder it can only attend to itself (its 1.0 says nothing), and so
  that encoder and decoder shares mean the same thing. Many decoder heads park most of their weight
  there (an "attention sink"). It is a share from 0 to 1 read as it is (``SHARES``), its baseline the
  uniform 1 / (keys seen) over the same queries. (The first token is this one label: no second name for it);
* ``special``: mean mass on special tokens ([CLS], [SEP], BOS ...);
* ``punctuation``: mean mass on punctuation tokens;
* ``entropy``: mean entropy (nats) of a query's attention, against the entropy of uniform attention;
* ``distance``: mean attention distance, Σ_j a_ij·|i − j| in tokens (how far a head reads);
* ``offset-5`` … ``offset+5`` (less ±1 and 0, which are ``previous``, ``next`` and ``self``: each offset is named
  once; a decoder has no positive ones): the offset profile, mean attention on the token at that relative
  position (over the queries where it exists);
* ``fixed offset``: Voita et al. 2019: the share of queries whose most attended token sits at the
  head's most common relative offset (column ``offset``). A head is *positional* (column
  ``positional``) when that share is at least 0.9. ``offset_counts`` holds the histogram (JSON).

``baseline`` is what uniform attention over the keys a query may see would score (for
``positional``: the chance that a uniform pick lands on one fixed offset).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable

import pandas as pd
import torch

from ..precision import upcast
from .combine import KEYS, mean
from .engine import COLUMNS, peek_causal, token_attention
from .registry import Probe, from_data

POSITIONAL_SHARE = 0.9  # Voita et al.: most attended token at one offset in >= 90% of positions
PROFILE = tuple(range(-5, 6))
NAMED = {-1: "previous", 0: "self", 1: "next"}  # offsets with a name of their own (each label is named once)
FIXED = "fixed offset"  # Voita et al.'s test: the share of queries whose argmax sits at the head's usual offset
MAX_OFFSET = 256  # argmax offsets beyond this are counted together
SINK = "sink"  # the label of the sink share
# labels read as plain shares on a fixed 0..1 scale, not as a gain over their baseline (Probe.shares)
SHARES = ((SINK, "the sink share: the weight on the first token (BOS, [CLS], or the first word piece where the "
                 "tokenizer adds neither), averaged over the queries after it (the first token's own row is left out: "
                 "in a decoder it can only attend to itself)"),)


def is_punctuation(text: str) -> bool:
    core = text.strip().removeprefix("##")
    return bool(core) and all(unicodedata.category(ch).startswith("P") for ch in core)


class _Sums:
    """Running sums of a statistic per (layer, head), with the uniform baseline beside it."""

    def __init__(self, shape):
        self.total = torch.zeros(shape, dtype=torch.float64)  # sums of thousands of distances: fp32 drifts
        self.base = 0.0
        self.count = 0

    def add(self, per_query: torch.Tensor, uniform: torch.Tensor) -> None:
        """``per_query`` ``[Ly, H, q]``, ``uniform`` ``[q]``: a statistic for q queries."""
        self.total += per_query.double().sum(-1)
        self.base += float(uniform.sum())
        self.count += per_query.shape[-1]


def positional_scores(data: Iterable, causal: bool | None = None, probe: str = "positional") -> pd.DataFrame:
    """Score every layer × head on ``data``: the Traces of the sentences (or ``(trace, item)`` pairs, or
    hand-built (real tokens, attention ``[layers, heads, n, n]``) pairs; see
    :func:`~probes.heads.engine.token_attention`). ``causal``: whether a query sees only the keys up to
    itself (the uniform baseline); by default the Traces say."""
    if causal is None:
        causal, data = peek_causal(data)
        if causal is None:
            raise ValueError("positional_scores: say causal=True or False for attention given without a Trace")
    sums: dict[str, _Sums] = {}
    hist = None
    chance = 0.0
    n_queries = 0
    for tokens, attn in token_attention(data):
        attn = upcast(attn)
        ly, h, n, _ = attn.shape
        if hist is None:
            hist = torch.zeros(ly, h, 2 * MAX_OFFSET + 1)
        q = torch.arange(n)
        # keys each query may see (the baselines in float64: exact for any count)
        seen = (q + 1).double() if causal else torch.full((n,), float(n), dtype=torch.float64)
        allowed = (q[None, :] <= q[:, None]) if causal else torch.ones(n, n, dtype=torch.bool)

        def add(name, per_query, uniform, head=(ly, h)):
            sums.setdefault(name, _Sums(head)).add(per_query, uniform)

        for offset in PROFILE:
            at = q[(q + offset >= 0) & (q + offset < n)]  # the queries with a key at this offset
            if len(at) == 0 or (causal and offset > 0):  # a decoder's query cannot look ahead: nothing to measure
                continue
            per = attn[:, :, at, at + offset]
            uniform = allowed[at, at + offset].double() / seen[at]
            add(NAMED.get(offset, f"offset{offset:+d}"), per, uniform)  # each offset named once
        if n > 1:  # the sink share: queries 1..n−1 only (row 0 of a decoder sees only itself)
            add(SINK, attn[:, :, 1:, 0], 1.0 / seen[1:])
        add("entropy", -(attn * torch.log(attn.clamp_min(1e-30))).sum(-1), torch.log(seen))
        gap = (q[:, None] - q[None, :]).abs().to(attn.dtype)  # |i − j|
        add("distance", (attn * gap).sum(-1), (allowed * gap).double().sum(-1) / seen)
        for name, keys in (("special", [t.special for t in tokens]),
                           ("punctuation", [not t.special and is_punctuation(t.text) for t in tokens])):
            mask = torch.tensor(keys, dtype=torch.bool)
            add(name, attn[:, :, :, mask].sum(-1), (allowed & mask[None, :]).sum(-1).double() / seen)
        offsets = (attn.argmax(-1) - q).clamp(-MAX_OFFSET, MAX_OFFSET) + MAX_OFFSET  # [Ly, H, n]
        hist += torch.nn.functional.one_hot(offsets, 2 * MAX_OFFSET + 1).sum(-2).float()
        chance += float((1.0 / seen).sum())
        n_queries += n

    rows = []
    for name, s in sums.items():
        mean = (s.total / s.count).tolist()
        base = s.base / s.count
        for layer, row in enumerate(mean):
            for head, value in enumerate(row):
                rows.append(dict(probe=probe, label=name, layer=layer, head=head, score=value, baseline=base,
                                 n=s.count, mean_attention=value))
    if hist is not None:
        for layer in range(hist.shape[0]):
            for head in range(hist.shape[1]):
                counts = {int(o) - MAX_OFFSET: int(c) for o, c in enumerate(hist[layer, head].tolist()) if c}
                rows.append(dict(probe=probe, label=FIXED, layer=layer, head=head, baseline=chance / n_queries,
                                 n=n_queries, mean_attention=float("nan"), offset_counts=json.dumps(counts),
                                 **voita(counts)))
    return pd.DataFrame(rows, columns=[*COLUMNS, "offset", "positional", "offset_counts"])


DESCRIBED = ("entropy", "distance")  # descriptions of a head, not claims: no baseline a head "beats"


def judged(label: str) -> str | None:
    """How a label's best head is judged held out: the Voita share is a count of queries (an accuracy); the others
    are mean attention over queries, against uniform attention; entropy and distance describe, they claim nothing."""
    return "accuracy" if label == FIXED else None if label in DESCRIBED else "mean"


def voita(offset_counts: dict[int, int]) -> dict:
    """Score, offset and verdict of one head from the histogram of its argmax offsets."""
    total = sum(offset_counts.values())
    offset, count = max(offset_counts.items(), key=lambda kv: kv[1])
    share = count / total
    return dict(score=share, offset=int(offset), positional=share >= POSITIONAL_SHARE)


def merge_histograms(whole: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """Combining chunks: each head's offset histograms summed over the chunks, and the Voita score,
    offset and verdict taken from the sum (a mean of the chunks' verdicts would not be exact)."""
    hist = whole.dropna(subset=["offset_counts"]).groupby(KEYS, sort=False)["offset_counts"].agg(
        lambda col: json.dumps(_sum_counts(col)))
    frame = frame.merge(hist.reset_index(), on=KEYS, how="left")
    pos = frame["offset_counts"].notna()
    verdicts = frame.loc[pos, "offset_counts"].map(lambda s: voita({int(k): v for k, v in json.loads(s).items()}))
    frame.loc[pos, "score"] = [v["score"] for v in verdicts]
    frame["offset"] = pd.NA
    frame["positional"] = pd.NA
    frame.loc[pos, "offset"] = [v["offset"] for v in verdicts]
    frame.loc[pos, "positional"] = [v["positional"] for v in verdicts]
    return frame


def _sum_counts(column) -> dict[str, int]:
    total: dict[str, int] = {}
    for text in column:
        for k, v in json.loads(text).items():
            total[k] = total.get(k, 0) + v
    return total


PROBES = (Probe(
    name="positional",
    about="previous / next / self / first-token / separator attention, per head (EWT sentences)",
    order=10,
    default_data="ewt-dev",
    read_items=from_data(),
    score=lambda items, traces: positional_scores(traces),
    combine=mean(extra=merge_histograms),
    shares=SHARES,
    judged=judged,
),)
