"""Top examples per head: where, over a corpus, each head attends most strongly.

Kept sparsely, in two steps: for every query of every window, a head's ``KEYS_PER_QUERY`` strongest keys
with weight at least ``MIN_WEIGHT``; of those, the ``k`` strongest per head. Special tokens such as
[CLS]/[SEP]/BOS are neither queries nor keys here, and a window's first token is no key (in a decoder
without BOS it is the attention sink, and query 0 sees nothing else): how much a head parks on them is the
``first``/``special`` statistic. Ties are broken by (text id, window, query, key), so the result does not
depend on how the corpus was split into chunks or which worker ran them.

Each example keeps what a reader needs to see it and to open it again: the query and key tokens, a short
``snippet`` (the key marked ⟦…⟧ and the query «…», at most ``SNIPPET_CHARS`` around them), and the
``context``: the window's text (at most ``CONTEXT_CHARS`` of it, cut at token edges around the pair) with
the character spans of the query and key tokens in it. So a row holds at most
``BYTES_PER_EXAMPLE`` = ``CONTEXT_CHARS + SNIPPET_CHARS + 2 · TOKEN_CHARS + 64`` characters (bytes, for ASCII
text; UTF-8 takes up to 4 bytes a character), and a head at most ``k`` times that: 22.9 kB at the default
k = 10. Parquet's compression and windows shared between examples make it far less in practice (the corpus
benchmark measures it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..precision import upcast
from ..tokens import Token
from .reader import Window

KEYS_PER_QUERY = 8
MIN_WEIGHT = 0.005
SNIPPET_CHARS = 160
CONTEXT_CHARS = 2000
TOKEN_CHARS = 32
BYTES_PER_EXAMPLE = CONTEXT_CHARS + SNIPPET_CHARS + 2 * TOKEN_CHARS + 64

ORDER = ["weight", "text_id", "window", "query", "key"]  # ranking: weight first, then a fixed tie-break
COLUMNS = ["layer", "head", "rank", "weight", "text_id", "window", "query", "key", "query_token", "key_token",
           "snippet", "context", "query_start", "query_end", "key_start", "key_end"]


def candidates(attn: torch.Tensor, tokens: list[Token], k: int) -> dict[str, np.ndarray]:
    """The ``k`` strongest (query, key) entries of each head of one window, ``attn`` ``[layers, heads, n, n]``
    over its real tokens: flat arrays of layer, head, weight, query, key (fewer than k where fewer pass
    ``MIN_WEIGHT``)."""
    ly, h, n, _ = attn.shape
    special = torch.tensor([t.special for t in tokens], dtype=torch.bool)
    weights = upcast(attn).masked_fill(special, 0.0)  # special tokens are neither candidate keys…
    weights = weights.masked_fill(special[:, None], 0.0)  # …nor queries: an example is between two pieces of text
    weights[..., 0] = 0.0  # nor is a window's first token a key: the attention sink (the ``first`` statistic); in a
    # decoder, query 0 sees only key 0 (weight 1, whatever the head does), and every head would list that
    per_query = min(KEYS_PER_QUERY, n)
    top, keys = weights.topk(per_query, dim=-1)  # [Ly, H, n, 8]: each query's strongest keys
    top, keys = top.reshape(ly, h, -1), keys.reshape(ly, h, -1)
    best, flat = top.topk(min(k, top.shape[-1]), dim=-1)  # [Ly, H, k]: each head's strongest of those
    query = torch.div(flat, per_query, rounding_mode="floor")
    key = keys.gather(-1, flat)
    layer = torch.arange(ly)[:, None, None].expand_as(best)
    head = torch.arange(h)[None, :, None].expand_as(best)
    keep = best >= MIN_WEIGHT
    return dict(layer=layer[keep].numpy(), head=head[keep].numpy(), weight=best[keep].double().numpy(),
                query=query[keep].numpy(), key=key[keep].numpy())


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def describe(window: Window, tokens: list[Token], query: int, key: int) -> dict:
    """The readable part of one example: tokens, snippet, and a context with the pair's spans in it."""
    q, k = tokens[query], tokens[key]
    lo, hi = min(q.start, k.start), max(q.end, k.end)
    # the context: the window's text, or CONTEXT_CHARS of it around the pair, cut at token edges
    start, end = window.start, window.end
    if end - start > CONTEXT_CHARS:
        middle = (lo + hi) // 2
        start = max(window.start, min(middle - CONTEXT_CHARS // 2, hi - CONTEXT_CHARS))
        end = min(window.end, start + CONTEXT_CHARS)
        edges = [t for t in tokens if not t.special and t.start >= start and t.end <= end]
        start, end = edges[0].start, edges[-1].end
    context = window.text[start:end]
    return dict(query_token=_cut(q.text, TOKEN_CHARS), key_token=_cut(k.text, TOKEN_CHARS),
                snippet=snippet(window.text, start, end, q, k), context=context, query_start=q.start - start,
                query_end=q.end - start, key_start=k.start - start, key_end=k.end - start)


def snippet(text: str, start: int, end: int, q: Token, k: Token) -> str:
    """The pair in its text (of ``text[start:end]``), key ⟦…⟧ and query «…», in about ``SNIPPET_CHARS``: one
    stretch around both, or, when they are far apart, a stretch around each joined by " … "."""
    marked = [(k, "⟦", "⟧"), (q, "«", "»")]
    if max(q.end, k.end) - min(q.start, k.start) <= SNIPPET_CHARS - 20:
        return _stretch(text, start, end, marked, SNIPPET_CHARS)
    first, second = sorted(marked, key=lambda m: m[0].start)
    half = SNIPPET_CHARS // 2 - 2
    return (_stretch(text, start, end, [first], half).removesuffix("…") + " … "
            + _stretch(text, start, end, [second], half).removeprefix("…"))


def _stretch(text: str, start: int, end: int, marked: list[tuple[Token, str, str]], width: int) -> str:
    """About ``width`` characters of ``text[start:end]`` around the marked tokens, with their marks in place
    ("…" where it is cut)."""
    lo, hi = min(t.start for t, _, _ in marked), max(t.end for t, _, _ in marked)
    room = max(0, (width - (hi - lo)) // 2)
    a, b = max(start, lo - room), min(end, hi + room)
    marks = [m for i, (t, open_, close) in enumerate(marked)
             for m in ((t.start, 1, i, open_), (t.end, 0, -i, close))]  # at one place: close (inner first), open
    parts, at = [], a
    for pos, _, _, mark in sorted(marks):
        parts += [text[at:pos], mark]
        at = pos
    parts.append(text[at:b])
    return ("…" if a > start else "") + "".join(parts).replace("\n", " ") + ("…" if b < end else "")


def strongest(frames: list[pd.DataFrame], k: int) -> pd.DataFrame:
    """The ``k`` strongest examples of each head among several frames of examples (windows, or chunks), in
    the fixed order: weight (descending), then text id, window, query, key; ``rank`` from 1."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    whole = pd.concat(frames, ignore_index=True).drop(columns="rank", errors="ignore")
    return pd.DataFrame(_top_per_head({col: whole[col].to_numpy() for col in whole.columns}, k))


def _top_per_head(cols: dict[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
    """The rows of the ``k`` strongest entries of each (layer, head) in flat arrays, in the fixed order
    (:data:`ORDER`), with their ``rank``: numpy's lexsort, no DataFrame per window."""
    ties = [cols[name] for name in reversed(ORDER[1:])]  # lexsort: the last key sorts first
    order = np.lexsort((*ties, -cols["weight"], cols["head"], cols["layer"]))
    cols = {name: values[order] for name, values in cols.items()}
    group = cols["layer"].astype(np.int64) * 1_000_003 + cols["head"]
    starts = np.r_[0, np.flatnonzero(group[1:] != group[:-1]) + 1]  # first row of each head
    rank = np.arange(len(group)) - np.repeat(starts, np.diff(np.r_[starts, len(group)]))
    keep = rank < k
    out = {name: values[keep] for name, values in cols.items()}
    out["rank"] = rank[keep] + 1
    return out


class Collector:
    """Feed it each window's tokens and attention (:meth:`add`); :meth:`result` gives the top ``k``
    examples per head over all of them, described. Only numbers are kept per window (flat arrays, pruned to
    the top ``k`` per head as they pile up); the readable part is made at the end, for the survivors."""

    def __init__(self, k: int):
        self.k = k
        self.found: list[dict[str, np.ndarray]] = []
        self.rows = 0
        self.seen: dict[int, tuple[Window, list[Token]]] = {}

    def add(self, window: Window, tokens: list[Token], attn: torch.Tensor) -> None:
        found = candidates(attn, tokens, self.k)
        n = len(found["weight"])
        if not n:
            return
        slot = len(self.seen)
        self.seen[slot] = (window, tokens)
        found.update(text_id=np.full(n, window.text_id), window=np.full(n, window.index), slot=np.full(n, slot))
        self.found.append(found)
        self.rows += n
        if self.rows > 16 * n:  # keep the pile small: the strongest so far stand for the rest
            self._prune()

    def _prune(self) -> dict[str, np.ndarray]:
        cols = {name: np.concatenate([f[name] for f in self.found]) for name in self.found[0]}
        best = _top_per_head(cols, self.k)
        self.found = [{name: values for name, values in best.items() if name != "rank"}]
        self.rows = len(best["weight"])
        return best

    def result(self) -> pd.DataFrame:
        if not self.found:
            return pd.DataFrame(columns=COLUMNS)
        best = pd.DataFrame(self._prune())
        described = [describe(*self.seen[int(slot)], int(q), int(k))
                     for slot, q, k in zip(best["slot"], best["query"], best["key"], strict=True)]
        for col in described[0]:
            best[col] = [d[col] for d in described]
        return best[COLUMNS]
