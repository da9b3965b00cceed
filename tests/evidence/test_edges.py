"""Noise floors of edges: a planted composition clears the random-matrix floor and random heads do not; a planted path
clears the floor of null corruptions (the same patch from a change elsewhere in the text) and a tiny effect does not;
null corruptions change as many tokens as the user's, elsewhere, never a special token, the same for the same seed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from checkpoints import make_induction
from numeric import F64, rounded

import probes
from probes.effects.compose import composition_scores
from probes.effects.path_patching import path_patch
from probes.errors import BadOption
from probes.evidence.edges import (
    COMPOSITION_RULE,
    FLOORED,
    PatchEvidence,
    composition_floors,
    null_corruptions,
    patch_floors,
    patch_rule,
)


@pytest.fixture(scope="module")
def induction(tmp_path_factory):
    """make_induction's two-layer GPT-2 (head 0.0 writes the previous token, head 1.0's key reads it; the other heads
    are small random noise) and its planted text: six tokens, then the same six again."""
    path, text = make_induction(tmp_path_factory.mktemp("induction") / "gpt2")
    return probes.load(str(path)), text


def rotated(model, text: str) -> str:
    """The planted text with its first six tokens rotated by one: every first occurrence of a repeated token changes,
    so the previous token head 0.0 writes at positions 1–6 (what the induction head's key reads) changes."""
    ids = model.encode(text).input_ids[0].tolist()
    return model.tokenizer.decode(ids[1:6] + ids[:1] + ids[6:])


def last_changed(model, text: str) -> str:
    """The planted text with its last token changed: head 0.0 writes that token at no later position, so the path
    0.0 → 1.0's key barely moves."""
    ids = model.encode(text).input_ids[0].tolist()
    return model.tokenizer.decode(ids[:-1] + [ids[0]])


@pytest.mark.numeric
def test_composition_floors_are_bonferroni_over_the_senders_scored():
    from scipy.stats import norm

    frame = pd.DataFrame(dict(sender_layer=[0, 0, 0, 0, 0], sender_head=[0, 1, 2, 0, 1], receiver_layer=1,
                              receiver_head=[0, 0, 0, 1, 1], kind="k", score=[0.5, 0.11, math.nan, 0.1, 0.2],
                              baseline_mean=0.1, baseline_sd=0.01))
    got = composition_floors(frame)
    assert got.senders.tolist() == [2, 2, 2, 2, 2]  # the NaN score (a head with no map) is not a sender scored
    z = norm.isf(0.05 / 2)  # 2.24
    assert got.z_crit.to_numpy() == pytest.approx(np.full(5, z), abs=F64, rel=0)
    assert got.floor.to_numpy() == pytest.approx(np.full(5, 0.1 + z * 0.01), abs=F64, rel=0)
    assert got.z.to_numpy()[[0, 1, 3, 4]] == pytest.approx([40, 1, 0, 10], abs=F64, rel=0)
    assert got.random_low.iloc[0] == pytest.approx(0.1 - 1.96 * 0.01, abs=F64, rel=0)
    assert got.random_high.iloc[0] == pytest.approx(0.1 + 1.96 * 0.01, abs=F64, rel=0)
    assert got.above_floor.tolist() == [True, False, False, False, True]
    assert list(frame.columns) == list(got.columns[:len(frame.columns)]) and "floor" not in frame  # a copy
    assert composition_floors(frame, alpha=0.5).z_crit.iloc[0] == pytest.approx(norm.isf(0.25), abs=F64, rel=0)
    with pytest.raises(BadOption, match="between 0 and 1"):
        composition_floors(frame, alpha=0)
    assert "Bonferroni" in COMPOSITION_RULE


@pytest.mark.numeric
def test_the_planted_k_composition_clears_its_floor_and_random_heads_do_not(induction):
    from scipy.stats import norm

    model, _text = induction
    frame = composition_floors(composition_scores(model))
    scored = frame.dropna(subset=["score"])
    planted = scored[(scored.kind == "k") & (scored.sender_head == 0) & (scored.receiver_head == 0)].iloc[0]
    # two senders per receiver: z = Φ⁻¹(1 − 0.05/2) = 1.96 above random matrices' 0.127 ± 0.003
    assert planted.senders == 2 and planted.z_crit == pytest.approx(norm.isf(0.025), abs=F64, rel=0)
    assert planted.score == pytest.approx(0.2501, abs=rounded(1e-4), rel=0)
    assert planted.floor == pytest.approx(0.1329, abs=rounded(1e-4), rel=0)
    assert planted.above_floor and planted.z > 40
    assert scored.above_floor.sum() == 1  # nothing else
    noise = scored[(scored.sender_head == 1) | (scored.receiver_head == 1)]  # heads of small random noise
    assert len(noise) == 8 and noise.z.abs().max() < 1.7  # within random matrices' spread (|z| at most 1.66 here)
    assert frame[frame.score.isna()].kind.eq("v").all() and not frame[frame.score.isna()].above_floor.any()


def test_null_corruptions_change_as_many_tokens_elsewhere(bert_dir):
    model = probes.load(str(bert_dir))
    clean, corrupt = "the cat sat on the mat and the dog ran", "the dog sat on the mat and the dog ran"
    enc = model.encode(clean)
    ids = enc.input_ids[0]
    special = {i for i, t in enumerate(enc.tokens[0]) if t.special}
    assert special == {0, len(ids) - 1}  # [CLS] and [SEP]
    user = {2}  # cat -> dog
    own = set(ids[[i for i in range(len(ids)) if i not in special]].tolist())
    nulls = null_corruptions(model, clean, corrupt, count=12, seed=3)
    assert len(nulls) == 12
    for null in nulls:
        assert null.input_ids.shape == enc.input_ids.shape
        moved = set((null.input_ids[0] != ids).nonzero().flatten().tolist())
        assert len(moved) == 1 and not moved & user and not moved & special
        (pos,) = moved
        assert int(null.input_ids[0, pos]) in own  # a token of the clean text's own
        assert null.tokens[0][pos].text == model.tokenizer.convert_ids_to_tokens(int(null.input_ids[0, pos]))
    again = null_corruptions(model, clean, corrupt, count=12, seed=3)
    # the same seed: the same nulls
    assert all((a.input_ids == b.input_ids).all() for a, b in zip(nulls, again, strict=True))
    other = null_corruptions(model, clean, corrupt, count=12, seed=4)
    assert any((a.input_ids != b.input_ids).any() for a, b in zip(nulls, other, strict=True))
    # two tokens changed by the user: two changed in every null, never those two
    two = null_corruptions(model, clean, "the dog sat on the rug and the dog ran", count=8)
    for null in two:
        moved = set((null.input_ids[0] != ids).nonzero().flatten().tolist())
        assert len(moved) == 2 and not moved & {2, 6} and not moved & special


@pytest.mark.parametrize("clean, corrupt, count, message", [
    ("the cat sat on the mat", "the dog sat", 8, "same length in tokens"),
    ("the cat sat on the mat", "the dog sat on the mat", 1, "2 null corruptions or more"),
    ("the cat sat on the mat", "the cat sat on the mat", 8, "same tokens"),
    ("cat", "dog", 8, "use a longer text"),  # [CLS] cat [SEP]: no other token to change
    ("the cat", "a dog", 8, "use a longer text"),  # both tokens changed
    ("the the the", "dog the the", 8, "use a longer text"),  # one distinct token: nothing to draw in its place
])
def test_null_corruptions_refuse_in_words(bert_dir, clean, corrupt, count, message):
    model = probes.load(str(bert_dir))
    with pytest.raises(BadOption, match=message):
        null_corruptions(model, clean, corrupt, count=count)


@pytest.mark.numeric
def test_the_planted_path_clears_its_floor(induction):
    model, text = induction
    corrupt = rotated(model, text)
    calls = []
    got = patch_floors(model, text, corrupt, (1, 0), "k", progress=lambda done, total: calls.append((done, total)))
    assert isinstance(got, PatchEvidence) and got.nulls == 8 and got.seed == 0
    assert calls == [(i, 8) for i in range(1, 9)]
    # head 1.0 reads no value (its W_V is zero): its pattern moves, the loss cannot, so the ranking measure (loss) is 0
    assert got.measure == "loss" and (got.frame.loss == 0).all() and got.above.empty
    assert got.rule == patch_rule("loss", 8) and "89th percentile" in got.rule
    assert got.checked == [(0, 0), (0, 1)] and got.frame.checked.all()
    assert {f"{m}_{s}" for m in FLOORED if m in got.frame for s in ("floor", "null_mean", "null_sd", "above")} <= set(
        got.frame)
    prev = got.frame.set_index(["layer", "head"]).loc[(0, 0)]
    # rotating the first six tokens moves the induction pattern (0.76 of each row's weight); no six-token change of
    # the second half does more than 0.16 through the same path
    assert prev.pattern_shift > 0.7 and prev.pattern_shift_floor < 0.2 and prev.pattern_shift_above
    assert prev.pattern_shift_null_mean < prev.pattern_shift_floor and prev.pattern_shift_null_sd > 0
    # the floor is the largest |null effect|, from the same patch of the checked senders on the null corruptions
    nulls = null_corruptions(model, text, corrupt)
    effects = [path_patch(model, text, n, (1, 0), "k", senders=got.checked).frame.pattern_shift.iloc[0]
               for n in nulls]  # the same batch of senders as the floor's runs: the same floats
    assert prev.pattern_shift_floor == pytest.approx(max(abs(e) for e in effects), abs=F64, rel=0)
    assert prev.pattern_shift_null_mean == pytest.approx(np.mean(effects), abs=F64, rel=0)
    assert prev.pattern_shift_null_sd == pytest.approx(np.std(effects, ddof=1), abs=F64, rel=0)


@pytest.mark.numeric
def test_a_tiny_effect_is_not_above_its_floor(induction):
    model, text = induction
    got = patch_floors(model, text, last_changed(model, text), (1, 0), "k", seed=1)
    for sender in ((0, 0), (0, 1)):
        row = got.frame.set_index(["layer", "head"]).loc[sender]
        # a change of the last token reaches no later key: the effect is tiny, while a change elsewhere moves the
        # induction pattern (the planted sender's floor is 0.23)
        assert abs(row.pattern_shift) < row.pattern_shift_floor / 1000 and not row.pattern_shift_above
    assert got.frame.set_index(["layer", "head"]).loc[(0, 0)].pattern_shift_floor > 0.2


@pytest.mark.numeric
def test_only_the_top_senders_are_checked_and_a_given_result_is_used(induction):
    model, text = induction
    corrupt = rotated(model, text)
    result = path_patch(model, text, corrupt, (1, 0), "k")
    got = patch_floors(model, text, corrupt, (1, 0), "k", result=result, top=1, count=3, seed=7)
    first = result.ranked().iloc[0]
    assert got.checked == [(int(first["layer"]), int(first["head"]))] and got.nulls == 3
    assert got.frame.checked.sum() == 1
    unchecked = got.frame[~got.frame.checked]
    assert unchecked.pattern_shift_floor.isna().all() and not unchecked.pattern_shift_above.any()
    assert (got.frame[result.frame.columns] == result.frame).all().all() and got.result is result
    every = patch_floors(model, text, corrupt, (1, 0), "k", top=None, count=3, seed=7)
    assert every.frame.checked.all()
    same = every.frame.set_index(["layer", "head"]).loc[got.checked[0]]
    assert same.pattern_shift_floor == pytest.approx(
        got.frame.set_index(["layer", "head"]).loc[got.checked[0]].pattern_shift_floor, abs=F64, rel=0)
    with pytest.raises(BadOption, match="2 null corruptions"):
        patch_floors(model, text, corrupt, (1, 0), "k", count=1)
