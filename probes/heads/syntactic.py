"""Syntactic heads (Clark et al. 2019): for each dependency relation, how often does a head's most
attended word find the syntactic head of a dependent (``rel (dep→head)``), or the dependent of a
head (``rel (head→dep)``)? Baseline: the best fixed relative offset for that relation and direction.
Data: any CoNLL-U file, or the built-in UD English-EWT (``probes.datasets.dependencies``)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..datasets.dependencies import DepSentence
from .engine import Pair, Sentence, score_pairs, sentence_attention


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


def syntactic_scores(model, sentences: Iterable[DepSentence], batch_size: int = 16, backend: str = "eager",
                     progress=None) -> pd.DataFrame:
    items = sentence_attention(model, [dependency_sentence(s) for s in sentences], batch_size, backend, progress)
    return score_pairs(items, probe="syntactic", baseline="offset")
