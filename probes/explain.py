"""Attention explained: one query token's path through softmax(q·kᵀ·scale)·v, and a head at word level.

:func:`query_steps` redoes one row of one head by hand, in float64 numpy from the Trace's q, k and v,
one named step per line of the formula, and checks the result against the row the Trace reports, so
a reader can see the steps *are* the model's attention. :func:`word_level` merges a head's word
pieces into words the way the head probes do (Clark et al. 2019).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .heads.engine import word_attention
from .precision import upcast
from .tokens import align_to_words, covered_words, word_positions, word_spans
from .trace import Trace


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
    scaled: np.ndarray  # [n] scores · scale
    allowed: np.ndarray  # [n] bool: False where masked (the causal future, outside a sliding window)
    weights: np.ndarray  # [n] softmax over the allowed keys (masked → 0)
    output: np.ndarray  # [d] weights · v: this head's output row for the query
    trace_weights: np.ndarray  # [n] the same row as the Trace reports it
    max_abs_diff: float  # max |weights − trace_weights|: the steps reproduce the model's attention
    kv_head: int  # the key/value head this query head reads (itself, unless grouped-query)
    kv_group: tuple[int, ...]  # the query heads that share that key/value head
    window: int | None  # the layer's sliding window, if it has one
    q_unrotated: np.ndarray | None = None  # [d] rotary models: q before it was turned by its position
    angles: np.ndarray | None = None  # [d/2] rotary models: the angle each pair of q was turned by (radians)


def query_steps(trace: Trace, layer: int, head: int, query: int, item: int = 0) -> QuerySteps:
    """One query token's attention in head (``layer``, ``head``), step by step. ``query`` indexes the
    real tokens of batch ``item`` (padding removed). Works on any Trace that holds or recomputes q, k
    and v and carries its layers' score scales (Hugging Face or scratch, any family with a record):
    for a rotary model q and k are the rotated vectors, and the rotation of q is given too."""
    if trace.scales is None:
        raise ValueError(f"this trace ({trace.source}) does not carry its layers' score scales")
    q_all, k, v = (t.detach().cpu().double().numpy() for t in trace.qkv(layer, head, item))
    n = len(k)
    if not 0 <= query < n:
        raise IndexError(f"query {query} is outside the {n} real tokens 0..{n - 1}")
    q = q_all[query]
    scale = trace.scales[layer]
    window = trace.window(layer)

    scores = k @ q  # q·k_j: one raw score per key
    scaled = scores * scale  # ÷ √d_k (or the layer's own scale)
    keys = np.arange(n)
    allowed = keys <= query if trace.is_causal else np.ones(n, dtype=bool)  # mask: the future
    if window is not None:
        allowed &= keys > query - window  # mask: further back than the sliding window
    exp = np.where(allowed, np.exp(scaled - scaled[allowed].max()), 0.0)  # shifted by the max: no overflow
    weights = exp / exp.sum()  # softmax over the allowed keys: sums to 1
    output = weights @ v  # · v: the weighted sum of the values

    trace_weights = trace.attention(layer, head, item, rows=[query])[0].detach().cpu().double().numpy()
    kv, group = trace.kv_head(layer, head), trace.group
    steps = QuerySteps(layer, head, query, trace.token_strings(item), q, k, v, scores, scale, scaled, allowed,
                       weights, output, trace_weights, float(np.abs(weights - trace_weights).max()), kv,
                       tuple(range(kv * group, (kv + 1) * group)), window)
    if trace.rotary is not None:
        steps.q_unrotated, steps.angles = _unrotated(trace, q, query, item)
    return steps


def _unrotated(trace: Trace, q: np.ndarray, query: int, item: int) -> tuple[np.ndarray, np.ndarray]:
    """q before the rotary embedding turned it, and the angle of each of its pairs: the inverse turn,
    by the cos and sin the trace's model used at the query's position."""
    cos, sin = (t[min(item, len(t) - 1)].detach().cpu().double().numpy() for t in trace.rotary)
    position = int(trace.attention_mask[item].nonzero()[query])
    c, s_ = cos[position], sin[position]
    half = len(q) // 2
    turned = np.concatenate([-q[half:], q[:half]])  # rotate_half(q): a quarter turn of every pair
    before = q * c - turned * s_  # the inverse of q·cos + rotate_half(q)·sin
    return before, np.arctan2(s_[:half], c[:half])


def word_level(trace: Trace, layer: int, head: int, text: str, pair: str | None = None,
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
    word_of, words = [-1] * len(tokens), []
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
    """Which head answers "what does this word refer to?" best: the one whose query word puts the most weight
    on the answer word (summed over the answer's pieces), with that weight and the weight on a distractor."""

    layer: int
    head: int
    query: int  # index among the real tokens of the query word's first piece
    answer: list[int]  # the answer word's pieces
    other: list[int]  # the distractor's pieces (empty: none given, or not in the text)
    weight: float  # the query's attention on the answer word
    other_weight: float | None  # …and on the distractor


def word_tokens(trace: Trace, text: str, word: str, item: int = 0) -> list[int]:
    """The real tokens (indices) of the first whole-word occurrence of ``word`` in ``text`` (case-insensitive;
    CJK words match anywhere); [] when the text does not hold it (:func:`probes.tokens.word_positions`)."""
    return word_positions(trace.real_tokens(item), text, word)


def answering_head(trace: Trace, text: str, query_word: str, answer_word: str, other_word: str | None = None,
                   item: int = 0) -> Answer | None:
    """Over every layer and head, the one where the query word's (first piece's) attention on the answer word is
    highest (None when the text lacks either word). Reads one row per layer from the Trace."""
    query, answer = word_tokens(trace, text, query_word, item), word_tokens(trace, text, answer_word, item)
    if not query or not answer:
        return None
    other = word_tokens(trace, text, other_word, item) if other_word else []
    rows = _query_rows(trace, query[0], item)
    on_answer = _on_keys(rows, answer)
    layer, head = np.unravel_index(int(on_answer.argmax()), on_answer.shape)
    on_other = float(_on_keys(rows, other)[layer, head]) if other else None
    return Answer(int(layer), int(head), query[0], answer, other, float(on_answer[layer, head]), on_other)


def query_weights(trace: Trace, query: int, keys: list[int], item: int = 0) -> tuple[np.ndarray, float]:
    """Every layer × head's attention from one query token on some key tokens (summed: a word's pieces),
    ``[layers, heads]``, and what uniform attention over the keys the query may see would put there. Reads one
    row per layer from the Trace."""
    weights = _on_keys(_query_rows(trace, query, item), keys)
    n = len(trace.real_tokens(item))
    seen = query + 1 if trace.is_causal else n
    uniform = sum(1 for k in keys if k < seen) / seen
    return weights, uniform


def _query_rows(trace: Trace, query: int, item: int) -> list:
    """The query token's attention row in every head of every layer: one ``[heads, n]`` tensor per layer."""
    return [upcast(trace.attention(layer, item=item, rows=[query])[:, 0]) for layer in range(trace.n_layers)]


def _on_keys(rows: list, keys: list[int]) -> np.ndarray:
    """``[layers, heads]``: the rows' weight on ``keys``, summed (a word's pieces)."""
    return np.stack([r[:, keys].sum(-1).cpu().numpy() for r in rows])


def words(trace: Trace, text: str, item: int = 0) -> list[tuple[str, list[int]]]:
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
    scaled: float  # q·k × scale
    numerator: float  # exp(scaled − max)
    denominator: float  # Σ_j exp(scaled_j − max) over the allowed keys
    weight: float  # numerator / denominator: the softmax weight


def work_key(steps: QuerySteps, key: int) -> KeyWorked:
    """``key`` of the row in ``steps`` (:func:`query_steps`) worked through by hand, in float64."""
    if not 0 <= key < len(steps.tokens):
        raise IndexError(f"key {key} is outside 0..{len(steps.tokens) - 1}")
    products = steps.q.astype(np.float64) * steps.k[key].astype(np.float64)
    dot = float(products.sum())
    scaled = dot * steps.scale
    allowed = steps.scaled[steps.allowed].astype(np.float64)
    top = float(allowed.max())
    denominator = float(np.exp(allowed - top).sum())
    numerator = float(np.exp(scaled - top)) if steps.allowed[key] else 0.0
    return KeyWorked(key, products, dot, scaled, numerator, denominator, numerator / denominator)
