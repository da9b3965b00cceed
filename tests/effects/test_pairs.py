"""Minimal pairs: word alignment, and each text's weights equal the head's word-level attention."""

import pytest
from numeric import F64

from probes.effects.pairs import align, changed, minimal_pair
from probes.errors import BadOption
from probes.explain import word_level

A = "Xiaoming gave the apple to Xiaohong because she was hungry"
B = "Xiaoming gave the apple to Xiaohong because he was hungry"


def test_alignment():
    a, b = A.split(), B.split()
    assert align(a, b) == {i: i for i in range(len(a))}
    assert changed(a, b) == [("she", "he")]
    inserted = align(["she", "was", "hungry"], ["she", "was", "very", "hungry"])
    assert inserted == {0: 0, 1: 1, 2: 3}


@pytest.mark.numeric
def test_weights_equal_word_level_attention(minilm64):
    # float64: the pair's sums over pieces and word_level's matrix products of the same rows differ by rounding only
    pair = minimal_pair(minilm64, A, B, "she", "Xiaohong")
    assert pair.query == (7, 7) and pair.key == (5, 5) and pair.changed == [("she", "he")]
    for layer, head in [(1, 2), (4, 7)]:
        w = pair.weights
        row = w[(w["layer"] == layer) & (w["head"] == head)].iloc[0]
        words_a, attn_a = word_level(pair.trace_a, layer, head, A)
        words_b, attn_b = word_level(pair.trace_b, layer, head, B)
        assert row["a"] == pytest.approx(float(attn_a[7, 5]), abs=F64, rel=0)
        assert row["b"] == pytest.approx(float(attn_b[7, 5]), abs=F64, rel=0)
        assert row["diff"] == row["b"] - row["a"]  # the same subtraction


def test_refused_with_advice(minilm):
    with pytest.raises(BadOption, match="the same"):
        minimal_pair(minilm, A, A, "she", "Xiaohong")
    with pytest.raises(BadOption, match="not a word"):
        minimal_pair(minilm, A, B, "they", "Xiaohong")
    with pytest.raises(BadOption, match="no counterpart"):
        minimal_pair(minilm, A, "Xiaoming gave it to Xiaohong", "apple", "Xiaoming")


@pytest.mark.numeric
def test_effect_difference_is_the_two_ablation_grids_apart(minilm):
    from probes.effects.ablation import ablate_each
    from probes.effects.pairs import effect_difference

    got = effect_difference(minilm, A, B, "hidden_change")
    a, b = ablate_each(minilm, A), ablate_each(minilm, B)
    # the same ablations of the same texts, the same subtraction: the same floats
    assert (got["diff"].to_numpy() == (b["hidden_change"] - a["hidden_change"]).to_numpy()).all()
    assert got["diff"].abs().max() > 1e-4
    with pytest.raises(BadOption, match="unknown measure 'loss' for minilm"):
        effect_difference(minilm, A, B, "loss")
