"""Attention explained: one query token's path through softmax(q·kᵀ·scale)·v, and a head at word level.

:func:`query_steps` redoes one row of one head by hand, in float64 numpy from the Trace's q, k and v,
one named step per line of the formula, and checks the result against the row the Trace reports, so
a reader can see the steps *are* the model's attention. :func:`word_level` merges a head's word
pieces into words the way the head probes do (Clark et al. 2019).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..evidence import questions
from ..evidence.questions import SINK, counted  # the app reads them here too (probes.explain re-exports them)
from ..head_index import check_index
from ..heads.engine import word_attention
from ..precision import upcast
from ..seam import reader
from ..tokens import align_to_words, covered_words, word_positions, word_spans
from ..trace import Trace

if TYPE_CHECKING:
    import torch

    from ..seam import TraceLike


@dataclass
class QuerySteps:
    layer: int
    head: int
    query: int  # index among the real tokens
    tokens: list[str]  # readable real tokens
    q: np.ndarray  # [d] the query vector of the query token
    k: np.ndarray  # [n, d] key vectors of all real tokens
    v: np.ndarray  # [n, d] value vectors
    scores: np.ndarray  # [n] q·k_j
    scale: float  # what the layer multiplies scores by, e.g. 1/√d_k
    scaled: np.ndarray  # [n] scores · scale (after the layer's soft-cap, Gemma 2: cap·tanh(s / cap))
    allowed: np.ndarray  # [n] bool: False where masked (the causal future, outside a sliding window)
    weights: np.ndarray  # [n] softmax over the allowed keys (masked → 0)
    output: np.ndarray  # [d] weights · v: this head's output row for the query
    trace_weights: np.ndarray  # [n] the same row as the Trace reports it
    max_abs_diff: float  # max |weights − trace_weights|: the steps reproduce the model's attention
    kv_head: int  # the key/value head this query head reads (itself, unless grouped-query)
    kv_group: tuple[int, ...]  # the query heads that share that key/value head
    window: int | None  # the layer's sliding window, if it has one
    q_unrotated: np.ndarray | None = None  # [d] rotary models: q before it was turned by its position
    angles: np.ndarray | None = None  # [r/2] rotary models: the angle each pair of q was turned by (radians; r = d
    # unless a partial rotary turns fewer)
    softcap: float | None = None  # Gemma 2: the layer's cap; ``scaled`` is the capped score
    causal: bool = True  # the future is masked (a decoder); False: an encoder, whose window reaches both ways


@reader
def query_steps(trace: Trace, layer: int, head: int, query: int, item: int = 0) -> QuerySteps:
    """One query token's attention in head (``layer``, ``head``), step by step. ``query`` indexes the
    real tokens of batch ``item`` (padding removed). Works on any Trace that holds or recomputes q, k
    and v and carries its layers' score scales (Hugging Face or scratch, any family with a record):
    for a rotary model q and k are the rotated vectors, and the rotation of q is given too."""
    if trace.scales is None:
        raise ValueError(f"this trace ({trace.source}) does not carry its layers' score scales")
    q_all, k, v = (t.detach().cpu().double().numpy() for t in trace.qkv(layer, head, item))
    n = len(k)
    check_index(query, n, "query", f"the {n} real tokens")
    q = q_all[query]
    scale = trace.scales[layer]
    window = trace.window(layer)

    scores = k @ q  # q·k_j: one raw score per key
    scaled = scores * scale  # ÷ √d_k (or the layer's own scale)
    softcap = trace.softcaps[layer] if trace.softcaps else None
    if softcap is not None:
        scaled = softcap * np.tanh(scaled / softcap)  # Gemma 2: soft-capped, before the mask
    keys = np.arange(n)
    allowed = keys <= query if trace.is_causal else np.ones(n, dtype=bool)  # mask: the future
    if window is not None:
        allowed &= np.abs(query - keys) < window  # mask: w or more positions away (the sliding window; back only
        # in a decoder, whose future is masked already; both sides in an encoder)
    exp = np.where(allowed, np.exp(scaled - scaled[allowed].max()), 0.0)  # shifted by the max: no overflow
    weights = exp / exp.sum()  # softmax over the allowed keys: sums to 1
    output = weights @ v  # · v: the weighted sum of the values

    trace_weights = trace.attention(layer, head, item, rows=[query])[0].detach().cpu().double().numpy()
    kv, group = trace.kv_head(layer, head), trace.group
    steps = QuerySteps(layer, head, query, trace.token_strings(item), q, k, v, scores, scale, scaled, allowed,
                       weights, output, trace_weights, float(np.abs(weights - trace_weights).max()), kv,
                       tuple(range(kv * group, (kv + 1) * group)), window, softcap=softcap,
                       causal=trace.is_causal)
    if (rotary := trace.rotary_of(layer)) is not None:
        steps.q_unrotated, steps.angles = _unrotated(trace, rotary, q, query, item)
    return steps


def _unrotated(trace: TraceLike, rotary: tuple[torch.Tensor, torch.Tensor], q: np.ndarray, query: int,
               item: int) -> tuple[np.ndarray, np.ndarray]:
    """q before the rotary embedding turned it, and the angle of each of its pairs: the inverse turn,
    by the cos and sin the trace's model used at the query's position. Tables narrower than q (a partial rotary:
    Phi-3, GPT-NeoX) turned its first r numbers only, pairs (i, i + r/2); the rest are q's as they are, and have no
    angle."""
    cos, sin = (t[min(item, len(t) - 1)].detach().cpu().double().numpy() for t in rotary)
    position = int(trace.attention_mask[item].nonzero()[query])
    c, s_ = cos[position], sin[position]
    r = len(c)  # the turned width: len(q), or fewer under a partial rotary
    half = r // 2
    turned = np.concatenate([-q[half:r], q[:half]])  # rotate_half(q): a quarter turn of every pair
    before = np.concatenate([q[:r] * c - turned * s_, q[r:]])  # the inverse of q·cos + rotate_half(q)·sin
    return before, np.arctan2(s_[:half], c[:half])


@reader
def word_level(trace: TraceLike, layer: int, head: int, text: str, pair: str | None = None,
               item: int = 0) -> tuple[list[str], np.ndarray]:
    """Head (``layer``, ``head``) of batch ``item`` with word pieces merged into words: the words of
    ``text`` then of ``pair`` (the texts the trace was run on: a Trace keeps tokens and their
    character offsets, not the texts), and their ``[w, w]`` attention.

    As in the head probes (Clark et al. 2019), attention *to* a word is the sum over its pieces and
    attention *from* a word the mean over its pieces. Special tokens ([CLS], [SEP], <|endoftext|>) and
    tokens of bare whitespace (GPT-2's lone ``' '``) belong to no word and are left out, as are words
    no token covers (cut by truncation, or characters the tokenizer drops). So row i is the share of
    word i's attention that lands on each word, and it sums to 1 minus what word i gives to the
    left-out tokens, not to 1.
    """
    tokens = trace.real_tokens(item)
    word_of = [-1] * len(tokens)
    words: list[str] = []
    for segment, source in enumerate((text, pair)):
        ends = [t.end for t in tokens if not t.special and t.segment == segment]
        if ends and (source is None or max(ends) > len(source)):
            raise ValueError(f"the trace's tokens do not fit text {segment + 1} given: pass the texts it was run on")
        if source is None:
            continue
        spans = word_spans(source)
        for t, w in enumerate(align_to_words(tokens, spans, segment)):
            if w >= 0:
                word_of[t] = len(words) + w
        words += [source[start:end] for start, end in spans]
    attn = word_attention(trace.attention(layer, head, item).detach().cpu(), word_of, len(words)).numpy()
    kept = sorted(set(word_of) - {-1})
    return [words[w] for w in kept], attn[np.ix_(kept, kept)]


@dataclass
class Answer:
    """Which head answers "what does this word refer to?" best: the one whose query word gives the answer word the
    most weight over a distractor (the other candidate: for "she" in "Xiaoming gave the apple to Xiaohong because
    she was hungry", Xiaoming), with both weights and what went to the attention sink (the first token)."""

    layer: int
    head: int
    query: int  # index among the real tokens of the query word's piece that asks (:func:`query_token`)
    answer: list[int]  # the answer word's pieces that count (the sink token never does)
    other: list[int]  # the distractor's pieces that count (empty: none given, or not in the text)
    weight: float  # the query's attention on the answer word
    other_weight: float | None  # …and on the distractor
    sink: float = 0.0  # …and on the first token (the sink), whatever word it belongs to

    @property
    def margin(self) -> float:
        """Weight on the answer minus weight on the distractor (the weight itself without a distractor)."""
        return self.weight - (self.other_weight or 0.0)

    @property
    def prefers(self) -> bool:
        """Whether the head gives the answer more than the distractor: False when no head of the model does
        (the head is then only the closest)."""
        return self.margin > 0


def word_tokens(trace: TraceLike, text: str, word: str, item: int = 0) -> list[int]:
    """The real tokens (indices) of the first whole-word occurrence of ``word`` in ``text`` (case-insensitive;
    CJK words match anywhere); [] when the text does not hold it (:func:`probes.tokens.word_positions`)."""
    return word_positions(trace.real_tokens(item), text, word)


def query_token(trace: TraceLike, pieces: list[int]) -> int:
    """The piece of a query word whose attention stands for the word's (:func:`probes.evidence.questions.
    query_token`: the last piece in a decoder, the first in an encoder)."""
    return questions.query_token(trace.is_causal, pieces)


@dataclass
class Margins:
    """Every layer × head's attention from one query token on a key word, on a distractor word and on the sink
    (``[layers, heads]`` each), and what uniform attention would put on the key word."""

    on_key: np.ndarray
    on_other: np.ndarray | None  # None: no distractor
    on_sink: np.ndarray
    uniform: float

    @property
    def score(self) -> np.ndarray:
        """What a ranking of heads orders by: the key's weight minus the distractor's (the key's weight alone
        without a distractor)."""
        return self.on_key if self.on_other is None else self.on_key - self.on_other

    def best(self) -> tuple[int, int]:
        layer, head = np.unravel_index(int(self.score.argmax()), self.score.shape)
        return int(layer), int(head)


@reader
def margins(trace: TraceLike, query: int, keys: list[int], other: list[int] | None = None, item: int = 0) -> Margins:
    """:class:`Margins` of one query token (real-token index) on ``keys`` against ``other`` (a distractor's
    pieces; none: ``None`` or empty). Reads one row per layer from the Trace."""
    rows = _query_rows(trace, query, item)
    n = len(trace.real_tokens(item))
    seen = query + 1 if trace.is_causal else n
    uniform = sum(1 for k in keys if k < seen) / seen
    return Margins(_on_keys(rows, keys), _on_keys(rows, other) if other else None, _on_keys(rows, [SINK]), uniform)


@reader
def likely_key(trace: TraceLike, text: str, query: int, item: int = 0) -> int | None:
    """A default key word for a query token when the text asks no question: the index (among :func:`words`) of
    the word it attends to most, averaged over every layer and head, leaving out its own word and the sink
    token (so the default is never the sink, whatever its word). None when no other word is there."""
    found = words(trace, text, item)
    mean = np.mean(np.stack([r.cpu().numpy() for r in _query_rows(trace, query, item)]), axis=(0, 1))
    scored = [(float(mean[[k for k in keys if k != SINK]].sum()), -i) for i, (_, keys) in enumerate(found)
              if query not in keys and [k for k in keys if k != SINK]]
    return -max(scored)[1] if scored else None


@reader
def answering_head(trace: TraceLike, text: str, query_word: str, answer_word: str, other_word: str | None = None,
                   item: int = 0) -> Answer | None:
    """Over every layer and head, the one whose query word (:func:`query_token`) gives the answer word the largest
    margin over the distractor (the largest weight without one; None when the text lacks the query or the answer).
    The sink token counts for neither word (:func:`counted`): a head that parks its attention on the first token,
    as most do, neither answers nor looks at the distractor by doing so (in SmolLM2's 小明把苹果…, the first token
    is 小明's first piece). When no head gives the answer more than the distractor,
    the head returned is the closest one, and ``prefers`` is False."""
    query, answer = word_tokens(trace, text, query_word, item), word_tokens(trace, text, answer_word, item)
    if not query or not answer:
        return None
    other = word_tokens(trace, text, other_word, item) if other_word else []
    asker, answer, other = query_token(trace, query), counted(answer), counted(other)
    found = margins(trace, asker, answer, other, item)
    layer, head = found.best()
    on_other = float(found.on_other[layer, head]) if found.on_other is not None else None
    return Answer(layer, head, asker, answer, other, float(found.on_key[layer, head]), on_other,
                  float(found.on_sink[layer, head]))


def _query_rows(trace: TraceLike, query: int, item: int) -> list:
    """The query token's attention row in every head of every layer: one ``[heads, n]`` tensor per layer."""
    return [upcast(trace.attention(layer, item=item, rows=[query])[:, 0]) for layer in range(trace.n_layers)]


def _on_keys(rows: list, keys: list[int]) -> np.ndarray:
    """``[layers, heads]``: the rows' weight on ``keys``, summed (a word's pieces)."""
    return np.stack([r[:, keys].sum(-1).cpu().numpy() for r in rows])


@reader
def words(trace: TraceLike, text: str, item: int = 0) -> list[tuple[str, list[int]]]:
    """The words of ``text`` (``tokens.word_spans``) with the real tokens each covers, in order (words no token
    covers are left out)."""
    return covered_words(trace.real_tokens(item), text)


@dataclass
class KeyWorked:
    """One key of a query row worked through by hand: q·k as its d products, then × scale, then its share of
    the softmax (exp of its scaled score over the sum of exp over the allowed keys, both shifted by the row's
    largest scaled score, which cancels)."""

    key: int
    products: np.ndarray  # [d] q_i · k_i
    dot: float  # their sum: q·k
    scaled: float  # q·k × scale (then soft-capped, Gemma 2: cap·tanh(s / cap))
    numerator: float  # exp(scaled − max)
    denominator: float  # Σ_j exp(scaled_j − max) over the allowed keys
    weight: float  # numerator / denominator: the softmax weight


def work_key(steps: QuerySteps, key: int) -> KeyWorked:
    """``key`` of the row in ``steps`` (:func:`query_steps`) worked through by hand, in float64."""
    n = len(steps.tokens)
    check_index(key, n, "key", f"the {n} real tokens")
    products = steps.q.astype(np.float64) * steps.k[key].astype(np.float64)
    dot = float(products.sum())
    scaled = dot * steps.scale
    if steps.softcap is not None:  # Gemma 2: the score soft-capped, as the row's
        scaled = steps.softcap * float(np.tanh(scaled / steps.softcap))
    allowed = steps.scaled[steps.allowed].astype(np.float64)
    top = float(allowed.max())
    denominator = float(np.exp(allowed - top).sum())
    numerator = float(np.exp(scaled - top)) if steps.allowed[key] else 0.0
    return KeyWorked(key, products, dot, scaled, numerator, denominator, numerator / denominator)
