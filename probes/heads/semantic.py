"""Semantic heads.

* **Coreference**: pronoun -> antecedent, against the nearest-candidate baseline.
* **Lexical relations** (WordNet 3.0): between content words (UD NOUN, VERB, ADJ, ADV) of a sentence,
  pairs related as ``synonym`` (they share a synset), ``hypernym`` / ``hyponym`` (the target is
  within two steps up / down the source's hypernym tree), ``meronym`` / ``holonym`` (part, member or
  substance), or only in the same lexicographer file (``same-lexname``, e.g. both noun.person).
  The relation is the first of that list that holds for any senses of the two lemmas. Each
  related pair gets a control: an unrelated content-word pair of the same sentence at the same
  distance (label ``unrelated``, when one exists). For this probe ``baseline`` is per head: the
  head's own accuracy on the controls matched to that label's pairs, and ``control_attention`` its
  mean attention on them, so a head is lexical when it beats its own distance-matched controls.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

from ..datasets.catalog import coreference_data
from ..datasets.coreference import CorefItem
from ..errors import BadData
from .combine import SAME, mean, pair_baseline
from .engine import Pair, Sentence, peek_causal, score_pairs, sentence_attention
from .registry import Probe, from_data

CONTENT = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
RELATIONS = ("synonym", "hypernym", "hyponym", "meronym", "holonym", "same-lexname")


def coreference_pairs(items: Iterable[CorefItem]) -> list[Pair]:
    """One pair per item: pronoun -> antecedent, among the item's candidates."""
    return [Pair(i.pronoun, i.antecedent, i.label, tuple(i.candidates)) for i in items]


def coreference_scores(items: Iterable[CorefItem], data: Iterable) -> pd.DataFrame:
    """Score every (condition, layer, head) on coreference ``items`` from ``data``, the Traces of their
    texts in order (the words joined by spaces; see :func:`~probes.heads.engine.sentence_attention`)."""
    items = list(items)
    sentences = [Sentence(i.words, [p]) for i, p in zip(items, coreference_pairs(items), strict=True)]
    causal, data = peek_causal(data)
    return score_pairs(sentence_attention(sentences, data), probe="coreference", baseline="nearest_candidate",
                       causal=bool(causal))


def _synsets(wn, word: str, pos: str) -> list:
    found = wn.synsets(word.lower(), pos)
    return found + wn.synsets(word.lower(), "s") if pos == "a" else found


def _up(synsets, depth: int = 2) -> set:
    seen, frontier = set(), set(synsets)
    for _ in range(depth):
        frontier = {h for s in frontier for h in s.hypernyms() + s.instance_hypernyms()}
        seen |= frontier
    return seen


@dataclass(frozen=True)
class _Senses:
    """What :func:`relation` asks of a word's senses, looked up once per word (a sentence of n content
    words asks n² times; the same words come back sentence after sentence)."""

    synsets: frozenset
    up: frozenset  # hypernyms within two steps
    parts: frozenset  # part, member and substance meronyms
    wholes: frozenset  # part, member and substance holonyms
    lexname: str  # the lexicographer file of the first sense


@lru_cache(maxsize=1 << 16)
def _senses(wn, word: str, pos: str) -> _Senses | None:
    found = _synsets(wn, word, pos)
    if not found:
        return None
    parts = {m for s in found for m in s.part_meronyms() + s.member_meronyms() + s.substance_meronyms()}
    wholes = {m for s in found for m in s.part_holonyms() + s.member_holonyms() + s.substance_holonyms()}
    return _Senses(frozenset(found), frozenset(_up(found)), frozenset(parts), frozenset(wholes), found[0].lexname())


def relation(wn, a: tuple[str, str], b: tuple[str, str]) -> str | None:
    """The WordNet relation from word ``a`` to word ``b`` (each ``(form, wordnet pos)``), or None."""
    sa, sb = _senses(wn, a[0].lower(), a[1]), _senses(wn, b[0].lower(), b[1])
    if sa is None or sb is None:
        return None
    if sa.synsets & sb.synsets:
        return "synonym"
    if sb.synsets & sa.up:
        return "hypernym"
    if sa.synsets & sb.up:
        return "hyponym"
    if sb.synsets & sa.parts:
        return "meronym"
    if sb.synsets & sa.wholes:
        return "holonym"
    if sa.lexname == sb.lexname:
        return "same-lexname"
    return "unrelated"


def lexical_sentence(wn, dep) -> Sentence:
    """Related content-word pairs of one parsed sentence, each with a distance-matched unrelated control."""
    upos = dep.upos or [None] * len(dep.words)  # untagged: no content words
    content = [(i, (w, CONTENT[u])) for i, (w, u) in enumerate(zip(dep.words, upos, strict=True)) if u in CONTENT]
    related: list[Pair] = []
    unrelated: dict[int, list[tuple[int, int]]] = {}
    for i, a in content:
        for j, b in content:
            if i == j or a[0].lower() == b[0].lower():
                continue
            rel = relation(wn, a, b)
            if rel == "unrelated":
                unrelated.setdefault(abs(i - j), []).append((i, j))
            elif rel is not None:
                related.append(Pair(i, j, rel))
    pairs = list(related)
    for p in related:
        pool = unrelated.get(abs(p.query - p.target))
        if pool:
            i, j = pool.pop()
            pairs.append(Pair(i, j, f"unrelated|{p.label}"))
    return Sentence(list(dep.words), pairs)


def lexical_pairs(sentences: Iterable, data: Iterable) -> pd.DataFrame:
    """The lexical scores of one chunk, control rows (``unrelated|REL``) still apart: what
    ``profile`` checkpoints; :func:`controls_as_baseline` folds them in once the chunks are combined."""
    from ..datasets.wordnet import wordnet

    wn = wordnet()
    items = [lexical_sentence(wn, s) for s in sentences]
    causal, data = peek_causal(data)
    return score_pairs(sentence_attention(items, data), probe="lexical", causal=bool(causal))


def lexical_scores(sentences: Iterable, data: Iterable) -> pd.DataFrame:
    """Score every (relation, layer, head) on parsed ``sentences`` with UPOS tags from ``data``, the
    Traces of their texts in order (the words joined by spaces), each against its own controls."""
    return controls_as_baseline(lexical_pairs(sentences, data))


def controls_as_baseline(frame: pd.DataFrame) -> pd.DataFrame:
    """Fold the ``unrelated|REL`` control rows into the REL rows: per head baseline and control
    attention; the controls of all relations together stay as label ``unrelated``."""
    is_control = frame["label"].str.startswith("unrelated|")
    controls = frame[is_control].assign(label=lambda f: f["label"].str.split("|").str[1])
    keys = ["label", "layer", "head"]
    merged = frame[~is_control].merge(
        controls[keys + ["score", "mean_attention"]].rename(columns={"score": "_control",
                                                                     "mean_attention": "control_attention"}),
        on=keys, how="left")
    merged["baseline"] = merged["_control"]
    merged = merged.drop(columns="_control")
    pooled = frame[is_control].copy()
    if len(pooled):
        pooled["_s"] = pooled["score"] * pooled["n"]
        pooled["_m"] = pooled["mean_attention"] * pooled["n"]
        agg = pooled.groupby(["layer", "head"]).agg(n=("n", "sum"), _s=("_s", "sum"), _m=("_m", "sum")).reset_index()
        agg = agg.assign(probe="lexical", label="unrelated", score=agg["_s"] / agg["n"], baseline=float("nan"),
                         mean_attention=agg["_m"] / agg["n"], control_attention=float("nan"))
        for column in SAME:  # (the same for every row: whether a decoder was scored)
            if column in merged:
                agg[column] = pooled[column].iloc[0]
        merged = pd.concat([merged, agg[merged.columns]], ignore_index=True)
    return merged


def _coreference_items(data: str, items: list) -> None:
    if not hasattr(items[0], "pronoun"):
        raise BadData(f"{data}: the coreference probe needs pronoun/antecedent items (winobias or a .jsonl)")


def _tagged(data: str, items: list) -> None:
    if not hasattr(items[0], "upos"):
        raise BadData(f"{data}: the lexical probe needs part-of-speech tags (ewt-* or a .conllu with UPOS)")


def _untagged(item) -> str | None:
    """A sentence without part-of-speech tags (UPOS ``_``) is of no use to the lexical probe."""
    if not item.upos or all(u in ("X", "_") for u in item.upos):
        return "no part-of-speech tags (the UPOS column is _): the lexical probe needs them"
    return None


PROBES = (
    Probe(
        name="coreference",
        about="attention from a pronoun to its antecedent (WinoBias)",
        order=30,
        default_data="winobias",
        read_items=from_data(_coreference_items),
        score=coreference_scores,
        reads=coreference_data,
        combine=mean(finish=pair_baseline(coreference_pairs, "nearest_candidate")),
        pairs=coreference_pairs,
    ),
    Probe(
        name="lexical",
        about="attention between WordNet-related words against distance-matched controls (EWT)",
        order=40,
        default_data="ewt-dev",
        read_items=from_data(_tagged, _untagged),
        score=lexical_pairs,
        combine=mean(finish=lambda frame, items: controls_as_baseline(frame)),
        judged=lambda label: None if label == "unrelated" else "accuracy",  # the controls pooled: no baseline
    ),
)
