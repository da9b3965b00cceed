"""Syntactic heads (Clark et al. 2019): for each dependency relation, how often does a head's most
attended word find the syntactic head of a dependent (``rel (dep→head)``), or the dependent of a
head (``rel (head→dep)``)? Baseline: the best fixed relative offset for that relation and direction.
Data: any CoNLL-U file, or the built-in UD English-EWT (``probes.datasets.dependencies``).

A subtype (``nmod:poss``, ``acl:relcl``, ``compound:prt``…) is its own label, and its pairs count for its base
relation too (``nmod``). On a decoder a direction is scored only on the pairs it can attend (the target at or before
the query: a noun looks back at its determiner, ``det (head→dep)``; a determiner cannot look ahead at its noun), so
``n`` counts those, a direction with none is left out (the run says which), and the offset baseline uses past
offsets only."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..datasets.dependencies import DepSentence
from ..errors import BadData
from .combine import mean, pair_baseline
from .engine import (
    Pair,
    Sentence,
    attendable,
    best_offset,
    offset_accuracy,
    peek_causal,
    score_pairs,
    sentence_attention,
)
from .registry import Probe, from_data


def relations(rel: str | None) -> list[str]:
    """The labels a dependency relation is scored under: itself, and for a subtype (``nmod:poss``) its base relation
    too (``nmod``), so that both the subtype (Clark et al.'s ``poss``) and the pooled relation can be read."""
    rel = rel or "dep"
    base = rel.split(":")[0]
    return [rel] if base == rel else [rel, base]


def dependency_sentence(dep: DepSentence) -> Sentence:
    """The word pairs of one parsed sentence, in both directions (the root relation has no pair); a subtype's pairs
    once under the subtype and once under its base relation (:func:`relations`)."""
    pairs = []
    for i, (head, rel) in enumerate(zip(dep.heads, dep.deprels, strict=True)):
        if head == 0:
            continue
        for label in relations(rel):
            pairs.append(Pair(i, head - 1, f"{label} (dep→head)"))
            pairs.append(Pair(head - 1, i, f"{label} (head→dep)"))
    return Sentence(list(dep.words), pairs)


def syntactic_scores(sentences: Iterable[DepSentence], data: Iterable) -> pd.DataFrame:
    """Score every (relation, layer, head) on parsed ``sentences`` from ``data``, the Traces of their
    texts in order (the words joined by spaces; see :func:`~probes.heads.engine.sentence_attention`). On a decoder
    only the pairs it can attend are scored (the target at or before the query)."""
    causal, data = peek_causal(data)
    items = sentence_attention([dependency_sentence(s) for s in sentences], data)
    return score_pairs(items, probe="syntactic", baseline="offset", causal=bool(causal))


def sentence_pairs(items: list) -> list[Pair]:
    """Every pair of the parsed sentences ``items``."""
    return [p for s in items for p in dependency_sentence(s).pairs]


def heldout_offsets(chosen: list[DepSentence], judged: list[DepSentence], causal: bool = False) -> dict[str, float]:
    """Each relation-direction's best fixed offset chosen on the ``chosen`` sentences, scored on the ``judged``
    ones: the head-free baseline a held-out head must clear (a decoder: its attendable pairs, past offsets)."""
    by_label: dict[str, tuple[list[Pair], list[Pair]]] = {}
    for side, sentences in ((0, chosen), (1, judged)):
        for p in sentence_pairs(sentences):
            if attendable(p, causal):
                by_label.setdefault(p.label, ([], []))[side].append(p)
    return {label: offset_accuracy(held, best_offset(picked, causal)) for label, (picked, held) in by_label.items()}


def _parsed(data: str, items: list) -> None:
    if not hasattr(items[0], "heads"):
        raise BadData(f"{data}: the syntactic probe needs parsed sentences (ewt-* or a .conllu)")


PROBES = (Probe(
    name="syntactic",
    about="attention from a word to its dependency head and back, per relation (UD English-EWT)",
    order=20,
    default_data="ewt-dev",
    read_items=from_data(_parsed),
    score=syntactic_scores,
    combine=mean(finish=pair_baseline(sentence_pairs, "offset")),
    heldout_baseline=heldout_offsets,
    pairs=sentence_pairs,
),)
