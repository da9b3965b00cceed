"""Syntactic heads (Clark et al. 2019): for each dependency relation, how often does a head's most
attended word find the syntactic head of a dependent (``rel (dep→head)``), or the dependent of a
head (``rel (head→dep)``)? Baseline: the best fixed relative offset for that relation and direction.
Data: any CoNLL-U file, or the built-in UD English-EWT (``probes.datasets.dependencies``)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..datasets.dependencies import DepSentence
from ..errors import BadData
from .combine import mean, pair_baseline
from .engine import Pair, Sentence, best_offset, offset_accuracy, score_pairs, sentence_attention
from .registry import Probe, loader


def dependency_sentence(dep: DepSentence) -> Sentence:
    """The word pairs of one parsed sentence, in both directions (the root relation has no pair)."""
    pairs = []
    for i, (head, rel) in enumerate(zip(dep.heads, dep.deprels)):
        if head == 0:
            continue
        rel = rel.split(":")[0] if rel else "dep"  # subtypes (nmod:poss) pool with their relation
        pairs.append(Pair(i, head - 1, f"{rel} (dep→head)"))
        pairs.append(Pair(head - 1, i, f"{rel} (head→dep)"))
    return Sentence(list(dep.words), pairs)


def syntactic_scores(sentences: Iterable[DepSentence], data: Iterable) -> pd.DataFrame:
    """Score every (relation, layer, head) on parsed ``sentences`` from ``data``, the Traces of their
    texts in order (the words joined by spaces; see :func:`~probes.heads.engine.sentence_attention`)."""
    items = sentence_attention([dependency_sentence(s) for s in sentences], data)
    return score_pairs(items, probe="syntactic", baseline="offset")


def heldout_offsets(chosen: list[DepSentence], judged: list[DepSentence]) -> dict[str, float]:
    """Each relation-direction's best fixed offset chosen on the ``chosen`` sentences, scored on the ``judged``
    ones: the head-free baseline a held-out head must clear."""
    by_label: dict[str, tuple[list[Pair], list[Pair]]] = {}
    for side, sentences in ((0, chosen), (1, judged)):
        for s in sentences:
            for p in dependency_sentence(s).pairs:
                by_label.setdefault(p.label, ([], []))[side].append(p)
    return {label: offset_accuracy(held, best_offset(picked)) for label, (picked, held) in by_label.items()}


def _parsed(data: str, items: list) -> None:
    if not hasattr(items[0], "heads"):
        raise BadData(f"{data}: the syntactic probe needs parsed sentences (ewt-* or a .conllu)")


PROBES = (Probe(
    name="syntactic",
    about="attention from a word to its dependency head and back, per relation (UD English-EWT)",
    order=20,
    default_data="ewt-dev",
    load=loader(_parsed),
    score=syntactic_scores,
    combine=mean(finish=pair_baseline(lambda items: [p for s in items for p in dependency_sentence(s).pairs],
                                      "offset")),
    heldout_baseline=heldout_offsets,
),)
