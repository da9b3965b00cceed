"""Minimal pairs: two texts that differ in a few words ("… because she was hungry" / "… because he was
hungry"), aligned word by word, compared head by head.

For a query word and a key word, every layer × head's attention from the query word to the key word in each
text (a word's weight on another: the mean over the query word's pieces of the sum over the key word's
pieces, as the head probes count it), and the difference; the same for any ablation measure.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import runner
from ..errors import BadOption
from ..seam import reader
from ..tokens import covered_words

if TYPE_CHECKING:
    from ..seam import ModelLike, TraceLike


def align(words_a: list[str], words_b: list[str]) -> dict[int, int]:
    """Word i of a -> its counterpart in b: words in unchanged runs, and words of a changed run replaced by a run
    of the same length, position by position ("she" -> "he"). Inserted or deleted words have none."""
    matcher = difflib.SequenceMatcher(a=[w.lower() for w in words_a], b=[w.lower() for w in words_b], autojunk=False)
    pairs = {}
    for kind, a0, a1, b0, b1 in matcher.get_opcodes():
        if kind == "equal" or (kind == "replace" and a1 - a0 == b1 - b0):
            pairs.update({a0 + i: b0 + i for i in range(a1 - a0)})
    return pairs


def changed(words_a: list[str], words_b: list[str]) -> list[tuple[str, str]]:
    """The runs of words that differ, as (a's words, b's words)."""
    matcher = difflib.SequenceMatcher(a=[w.lower() for w in words_a], b=[w.lower() for w in words_b], autojunk=False)
    return [(" ".join(words_a[a0:a1]), " ".join(words_b[b0:b1]))
            for kind, a0, a1, b0, b1 in matcher.get_opcodes() if kind != "equal"]


@dataclass
class Pair:
    text_a: str
    text_b: str
    words_a: list[str]
    words_b: list[str]
    query: tuple[int, int]  # the query word's index in a and in b
    key: tuple[int, int]  # the key word's index in a and in b
    changed: list[tuple[str, str]]
    weights: pd.DataFrame  # layer, head, a, b, diff (= b − a)
    trace_a: object
    trace_b: object


def _find(word: str, found: list[tuple[str, list[int]]], role: str, text: str) -> int:
    hits = [i for i, (w, _) in enumerate(found) if w.lower() == word.lower()]
    if not hits:
        raise BadOption(f"the {role} word {word!r} is not a word of {text!r}: choose one of its words")
    return hits[0]


def word_weight(trace: TraceLike, layer_rows: list, query_pieces: list[int], key_pieces: list[int]) -> np.ndarray:
    """``[layers, H]``: the query word's weight on the key word from each layer's rows ``[H, r, n]``."""
    return np.stack([rows[:, :, key_pieces].sum(-1).mean(-1).cpu().numpy() for rows in layer_rows])


@reader
def minimal_pair(model: ModelLike, text_a: str, text_b: str, query_word: str, key_word: str, source: str = "auto",
                 truncate: bool = False) -> Pair:
    """Attention from ``query_word`` to ``key_word`` (words of ``text_a``; their counterparts in ``text_b`` are
    found by alignment, so the query may be the changed word) in every layer × head of both texts (traced by
    ``source``: hf, scratch or auto; ``truncate``: each cut to the context window)."""
    if text_a.strip() == text_b.strip():
        raise BadOption("the two texts are the same: change a few words in the second one")
    trace_a = runner.trace(model, text_a, source=source, truncate=truncate)
    trace_b = runner.trace(model, text_b, source=source, truncate=truncate)
    found_a, found_b = covered_words(trace_a.real_tokens(0), text_a), covered_words(trace_b.real_tokens(0), text_b)
    words_a, words_b = [w for w, _ in found_a], [w for w, _ in found_b]
    pairs = align(words_a, words_b)
    ends = []
    for word, role in ((query_word, "query"), (key_word, "key")):
        i = _find(word, found_a, role, text_a)
        if i not in pairs:
            raise BadOption(f"the {role} word {word!r} has no counterpart in the second text (the texts differ "
                            "there by more than a word-for-word change)")
        ends.append((i, pairs[i]))
    (qa, qb), (ka, kb) = ends
    rows_a = [trace_a.attention(layer, None, 0, found_a[qa][1]) for layer in range(trace_a.n_layers)]
    rows_b = [trace_b.attention(layer, None, 0, found_b[qb][1]) for layer in range(trace_b.n_layers)]
    wa = word_weight(trace_a, rows_a, found_a[qa][1], found_a[ka][1])
    wb = word_weight(trace_b, rows_b, found_b[qb][1], found_b[kb][1])
    layer, head = np.meshgrid(range(wa.shape[0]), range(wa.shape[1]), indexing="ij")
    frame = pd.DataFrame({"layer": layer.ravel(), "head": head.ravel(), "a": wa.ravel(), "b": wb.ravel()})
    frame["diff"] = frame["b"] - frame["a"]
    return Pair(text_a, text_b, words_a, words_b, (qa, qb), (ka, kb), changed(words_a, words_b), frame, trace_a,
                trace_b)


def effect_difference(model: ModelLike, text_a: str, text_b: str, measure: str, **options) -> pd.DataFrame:
    """Every single-head ablation on both texts: layer, head, a, b, diff (= b − a) of one measure."""
    from .ablation import ablate_each

    a, b = ablate_each(model, text_a, **options), ablate_each(model, text_b, **options)
    if measure not in a:
        raise BadOption(f"unknown measure {measure!r} for {model.name}: choose one of "
                        f"{', '.join(c for c in a.columns if c not in ('layer', 'head'))}")
    frame = a[["layer", "head"]].copy()
    frame["a"], frame["b"] = a[measure].to_numpy(), b[measure].to_numpy()
    frame["diff"] = frame["b"] - frame["a"]
    return frame
