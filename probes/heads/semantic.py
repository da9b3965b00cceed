"""Semantic heads: coreference (pronoun -> antecedent, against the nearest-candidate baseline)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ..datasets.coreference import CorefItem
from .engine import Pair, Sentence, score_pairs, sentence_attention


def coreference_scores(model, items: Iterable[CorefItem], batch_size: int = 16, backend: str = "eager",
                       progress=None) -> pd.DataFrame:
    sentences = [Sentence(i.words, [Pair(i.pronoun, i.antecedent, i.label, tuple(i.candidates))]) for i in items]
    return score_pairs(sentence_attention(model, sentences, batch_size, backend, progress), probe="coreference",
                       baseline="nearest_candidate")
