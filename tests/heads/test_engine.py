"""The word-pair engine: piece <-> word aggregation by hand, and planted heads ranked first."""

import pytest
import torch
from numeric import F64

from probes import runner
from probes.datasets.catalog import texts
from probes.heads.engine import (
    Pair,
    Sentence,
    pair_set_baseline,
    score_pairs,
    sentence_attention,
    top_heads,
    word_attention,
)


@pytest.mark.numeric
def test_pieces_are_summed_as_targets_and_averaged_as_sources():
    # tokens: [CLS] xiao ##ming gave [SEP]  ->  words: 0 = Xiaoming (2 pieces), 1 = gave
    word_of = [-1, 0, 0, 1, -1]
    a = torch.tensor([
        [0.2, 0.2, 0.2, 0.2, 0.2],
        [0.1, 0.1, 0.3, 0.4, 0.1],  # xiao
        [0.0, 0.5, 0.1, 0.2, 0.2],  # ##ming
        [0.3, 0.3, 0.3, 0.0, 0.1],  # gave
        [0.2, 0.2, 0.2, 0.2, 0.2],
    ], dtype=torch.float64)
    w = word_attention(a, word_of, 2)
    # from "Xiaoming" = mean of its two rows; to "Xiaoming" = sum of its two columns; specials dropped
    expected = torch.tensor([[(0.4 + 0.6) / 2, (0.4 + 0.2) / 2], [0.6, 0.0]], dtype=torch.float64)
    assert torch.allclose(w, expected, atol=F64, rtol=0)


def _planted(sentence, word_of, layers=2, heads=4, plant=(1, 3), seed=0):
    n = len(word_of)
    g = torch.Generator().manual_seed(seed)
    attn = torch.softmax(torch.randn(layers, heads, n, n, generator=g), dim=-1)
    gold = {p.query: p.target for p in sentence.pairs}
    planted = torch.full((n, n), 0.01)
    for t, w in enumerate(word_of):
        if w in gold:
            for k, wk in enumerate(word_of):
                if wk == gold[w]:
                    planted[t, k] = 1.0
    attn[plant] = planted / planted.sum(-1, keepdim=True)
    return attn


def test_planted_dependency_head_ranks_first():
    words = ["the", "quick", "cat", "sat", "down"]
    pairs = [Pair(0, 2, "det"), Pair(1, 2, "amod"), Pair(2, 3, "nsubj"), Pair(4, 3, "advmod")]
    sentence = Sentence(words, pairs)
    word_of = [-1, 0, 1, 1, 2, 3, 4, -1]  # "quick" in two pieces
    items = [(sentence, _planted(sentence, word_of, seed=s), word_of) for s in range(3)]
    frame = score_pairs(items, probe="syntactic")
    assert list(frame.columns[:7]) == ["probe", "label", "layer", "head", "score", "baseline", "n"]
    best = top_heads(frame, k=1)
    for _, row in best.iterrows():
        assert (row["layer"], row["head"]) == (1, 3) and row["score"] == 1.0, row
        assert row["n"] == 3
    det = frame[frame.label == "det"]
    assert det["baseline"].iloc[0] == 1.0  # always two words to the right: the offset baseline gets it
    assert det.set_index(["layer", "head"]).loc[(1, 3), "mean_attention"] > 0.9


def test_baselines():
    assert pair_set_baseline([Pair(3, 1, "x"), Pair(5, 3, "x"), Pair(2, 3, "x")], "offset") == 2 / 3  # a count over 3
    coref = [Pair(6, 4, "c", candidates=(0, 4)), Pair(6, 0, "c", candidates=(0, 4))]
    assert pair_set_baseline(coref, "nearest_candidate") == 0.5


@pytest.mark.numeric
def test_real_model_word_attention_rows_sum_to_one(minilm64):
    sentence = Sentence(["Xiaoming", "gave", "the", "apple", "to", "Xiaohong"], [Pair(0, 1, "nsubj")])
    (got, layers, word_of), = list(sentence_attention([sentence], runner.batches(minilm64, texts([sentence]))))
    assert got is sentence and layers.shape[:2] == (6, 12)
    assert word_of[0] == -1 and word_of[1] == word_of[2] == 0  # [CLS], xiao, ##ming
    words = word_attention(layers, word_of, 6)
    special = layers[..., [0, -1]].sum(-1)  # what [CLS] and [SEP] receive is not in any word
    special_rows = torch.stack([special[..., [t for t, w in enumerate(word_of) if w == i]].mean(-1) for i in range(6)],
                               -1)
    ones = torch.ones(6, 12, 6, dtype=torch.float64)
    assert layers.dtype == torch.float64 and torch.allclose(words.sum(-1) + special_rows, ones, atol=F64, rtol=0)
