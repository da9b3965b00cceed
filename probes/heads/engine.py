"""The one engine behind the word-pair probes (syntax, coreference, lexical relations).

An example is (sentence as words, query word, gold target word, label). Attention is turned into
word-level attention the way Clark et al. 2019 did: attention *to* a word split into several pieces
is the sum over its pieces, attention *from* such a word is the mean over its pieces; special tokens
belong to no word and drop out (what they receive is reported by the positional probe). Every layer
and head is scored at once from the Traces of batched forward passes (the probes read Traces; the
runner in :mod:`probes.heads.profile` makes them), vectorised over layers and heads:

* ``score``: accuracy, the share of examples whose query word attends most to the gold target;
* ``mean_attention``: the mean word-level attention from the query word to the gold target;
* ``baseline``: a head-free predictor on the same examples: the best fixed relative offset
  (``"offset"``; syntax) or the nearest preceding candidate (``"nearest_candidate"``; coreference);
* ``n``: how many examples the label has.

The result is a tidy DataFrame with columns ``probe, label, layer, head, score, baseline, n,
mean_attention``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch

from ..precision import upcast
from ..tokens import Token, align_to_words
from ..trace import TokensAndRules

OFFSETS = tuple(o for o in range(-5, 6) if o != 0)
PAST = tuple(o for o in OFFSETS if o < 0)  # what a decoder's fixed-offset baseline may use: it sees only the past
COLUMNS = ["probe", "label", "layer", "head", "score", "baseline", "n", "mean_attention"]


def offsets(causal: bool) -> tuple[int, ...]:
    """The fixed offsets a head-free baseline may pick: past ones only for a decoder."""
    return PAST if causal else OFFSETS


def attendable(pair: Pair, causal: bool) -> bool:
    """Whether a head could attend from the pair's query word to its target: a decoder's query sees only the target
    at or before it; an encoder's sees every word."""
    return not causal or pair.target <= pair.query


@dataclass(frozen=True)
class Pair:
    query: int  # index of the query word (the word whose attention is read)
    target: int  # index of the gold target word
    label: str
    candidates: tuple[int, ...] = ()  # words the target is chosen among (nearest-candidate baseline)


@dataclass
class Sentence:
    words: list[str]
    pairs: list[Pair] = field(default_factory=list)

    def text_and_spans(self) -> tuple[str, list[tuple[int, int]]]:
        """The words joined by single spaces, and each word's character span in that text."""
        spans, pos = [], 0
        for w in self.words:
            spans.append((pos, pos + len(w)))
            pos += len(w) + 1
        return " ".join(self.words), spans


def word_matrices(word_of: Sequence[int], n_words: int,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``to`` ``[n, W]``: 1 where a token is a piece of a word (summing pieces as targets);
    ``frm`` ``[W, n]``: 1/pieces where a token is a piece of a word (averaging pieces as queries)."""
    n = len(word_of)
    to = torch.zeros(n, n_words, dtype=dtype)
    for t, w in enumerate(word_of):
        if w >= 0:
            to[t, w] = 1.0
    pieces = to.sum(0).clamp_min(1.0)
    return to, (to / pieces).T


def word_attention(attn: torch.Tensor, word_of: Sequence[int], n_words: int) -> torch.Tensor:
    """Token attention ``[..., n, n]`` (any leading dims, e.g. layers × heads) to word attention
    ``[..., W, W]``: rows averaged over a query word's pieces, columns summed over a target's."""
    attn = upcast(attn)
    to, frm = word_matrices(word_of, n_words, attn.dtype)
    return frm @ attn @ to


def best_offset(pairs: list[Pair], causal: bool = False) -> int | None:
    """The fixed relative offset (target − query, in :func:`offsets`: past ones only for a decoder) that is right for
    the most ``pairs`` (the nearest to 0 on a tie; None for no pair)."""
    if not pairs:
        return None
    return max(offsets(causal), key=lambda o: (sum(p.target - p.query == o for p in pairs), -abs(o), o))


def offset_accuracy(pairs: list[Pair], offset: int | None) -> float:
    """The share of ``pairs`` whose target sits at ``offset`` from the query (NaN for no pair or offset)."""
    if not pairs or offset is None:
        return float("nan")
    return sum(p.target - p.query == offset for p in pairs) / len(pairs)


def pair_set_baseline(pairs: list[Pair], kind: str, causal: bool = False) -> float:
    """What a set of gold pairs scores without reading attention: ``offset``, the share the best fixed offset
    gets right; ``nearest_candidate``, the share where the nearest earlier candidate is the target. ``causal``: only
    the pairs a decoder can attend count, and the offsets are past ones."""
    pairs = [p for p in pairs if attendable(p, causal)]
    if not pairs:
        return float("nan")
    if kind == "offset":
        return max(sum(p.target - p.query == o for p in pairs) for o in offsets(causal)) / len(pairs)
    if kind == "nearest_candidate":
        hits = 0
        for p in pairs:
            before = [c for c in p.candidates if c < p.query]
            hits += bool(before) and max(before) == p.target
        return hits / len(pairs)
    raise ValueError(f"unknown baseline {kind!r}")


def token_attention(data: Iterable) -> Iterator[tuple[list[Token], torch.Tensor]]:
    """Per text, its real tokens and their attention for every layer and head ``[layers, heads, n, n]``,
    read from ``data``: Traces (each batch item in turn, as :func:`probes.runner.batches` makes them),
    ``(trace, item)`` pairs (:func:`probes.runner.items`), or ``(tokens, attention)`` pairs already
    (hand-built ones, e.g. planted heads in tests), passed through. A lazy Trace (``sdpa``/``flash``)
    serves as well as a materialised one: attention is asked for through :meth:`Trace.all_attention`."""
    for entry in data:
        if isinstance(entry, TokensAndRules):  # a Trace, or a served model's RemoteTrace
            for item in range(entry.batch_size):
                yield entry.real_tokens(item), entry.all_attention(item)
        elif isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], TokensAndRules):
            trace, item = entry
            yield trace.real_tokens(item), trace.all_attention(item)
        else:
            yield entry


def peek_causal(data: Iterable) -> tuple[bool | None, Iterator]:
    """Whether the Traces in ``data`` (as :func:`token_attention` takes it) come from a causal model,
    read from the first one (None when the first entry holds no Trace; False when there is none at
    all: nothing to score), and ``data`` again, whole."""
    data = iter(data)
    first = next(data, None)
    if first is None:
        return False, iter(())
    trace = first if isinstance(first, TokensAndRules) else first[0] if isinstance(first, tuple) else None
    causal = trace.is_causal if isinstance(trace, TokensAndRules) else None
    return causal, itertools.chain([first], data)


def sentence_attention(sentences: Iterable[Sentence],
                       data: Iterable) -> Iterator[tuple[Sentence, torch.Tensor, list[int]]]:
    """Word-segmented sentences and the Traces of their texts (``Sentence.text_and_spans``, in order; any
    ``data`` :func:`token_attention` takes): yields (sentence, attention ``[layers, heads, n, n]``,
    each token's word index, -1 for special tokens), what :func:`score_pairs` scores."""
    for sentence, (tokens, layers) in zip(sentences, token_attention(data), strict=True):
        yield sentence, layers, align_to_words(tokens, sentence.text_and_spans()[1])


def score_pairs(items: Iterable[tuple[Sentence, torch.Tensor, Sequence[int]]], probe: str,
                baseline: str = "offset", causal: bool = False) -> pd.DataFrame:
    """Score every (layer, head, label) on the word pairs of the sentences in ``items`` (as
    :func:`sentence_attention` yields them, or hand-built), all layers and heads at once. ``causal`` (a decoder):
    only the pairs whose target is at or before the query are scored (:func:`attendable`), so ``n`` counts those, a
    label with none is left out, and the offset baseline uses past offsets; the frame says so (column ``causal``)."""
    correct: dict[str, torch.Tensor] = {}
    mass: dict[str, torch.Tensor] = {}
    by_label: dict[str, list[Pair]] = {}
    shape = None
    for sentence, layers, word_of in items:
        shape = layers.shape[:2]
        words = word_attention(layers, word_of, len(sentence.words))  # [Ly, H, W, W]
        present = set(word_of)
        pairs = [p for p in sentence.pairs if p.query in present and p.target in present  # not truncated
                 and attendable(p, causal)]
        if not pairs:
            continue
        src = torch.tensor([p.query for p in pairs])
        tgt = torch.tensor([p.target for p in pairs])
        rows = words[:, :, src, :]  # [Ly, H, E, W]: where each query word looks
        hit = (rows.argmax(-1) == tgt).float()  # the most attended word is the gold one
        on_gold = rows.gather(-1, tgt.expand(*shape, -1)[..., None]).squeeze(-1)
        for e, p in enumerate(pairs):
            if p.label not in by_label:
                correct[p.label], mass[p.label], by_label[p.label] = (torch.zeros(shape, dtype=words.dtype),
                                                                      torch.zeros(shape, dtype=words.dtype), [])
            correct[p.label] += hit[:, :, e]
            mass[p.label] += on_gold[:, :, e]
            by_label[p.label].append(p)

    out = []
    for label, pairs in by_label.items():
        n = len(pairs)
        base = pair_set_baseline(pairs, baseline, causal)
        acc, mean = (correct[label] / n).tolist(), (mass[label] / n).tolist()
        for layer, (acc_row, mean_row) in enumerate(zip(acc, mean, strict=True)):
            for head, (a, m) in enumerate(zip(acc_row, mean_row, strict=True)):
                out.append(dict(probe=probe, label=label, layer=layer, head=head, score=a, baseline=base, n=n,
                                mean_attention=m, causal=causal))
    return pd.DataFrame(out, columns=[*COLUMNS, "causal"])


def unattendable(pairs: Iterable[Pair], causal: bool) -> list[str]:
    """The labels of ``pairs`` none of whose pairs a head could attend (a decoder's query before its target in every
    one), in the order they first come: what a causal run leaves out, said in a note."""
    seen: dict[str, bool] = {}
    for p in pairs:
        seen[p.label] = seen.get(p.label, False) or attendable(p, causal)
    return [label for label, any_ in seen.items() if not any_]


def top_heads(frame: pd.DataFrame, k: int = 3) -> pd.DataFrame:
    """The ``k`` best heads of each (probe, label), best first."""
    return (frame.sort_values(["probe", "label", "score"], ascending=[True, True, False])
            .groupby(["probe", "label"], sort=False).head(k).reset_index(drop=True))
