"""Claims about a question, judged on items the head was not chosen on: planted heads whose truth is known."""

from __future__ import annotations

import numpy as np
import pytest
from checkpoints import PRONOUN_TEXT, gender_questions
from numeric import fp32

from probes.errors import BadOption
from probes.evidence.claims import box_sentence, items_frame, question_evidence
from probes.evidence.questions import question_of


def _gender(count: int = 80):
    return [question_of(row, i + 1) for i, row in enumerate(gender_questions(count))]


def test_a_head_that_follows_gender_is_supported_where_gender_decides(pronoun_model):
    ev = question_evidence(pronoun_model, questions=_gender())
    assert ev.head == (0, 1) and ev.verdict == "supported"
    assert ev.score == 1.0 and ev.n == 40 and ev.low > max(b.score for b in ev.baselines)
    assert ev.said.startswith("supported: 100 % (95 % interval 91–100 %, n = 40)")
    assert box_sentence(ev).startswith("Head 0.1 picks the answer on 40 held-out items 100 %")


def test_a_head_that_follows_the_nearer_name_is_no_better_than_the_most_recent_candidate(pronoun_model):
    on_gender = question_evidence(pronoun_model, questions=_gender(), head=(0, 0))
    assert on_gender.split is None and on_gender.n == 80  # a given head is judged on every item
    assert on_gender.tracked is not None  # the baseline it follows
    assert on_gender.tracked.name == "the most recent candidate" and on_gender.tracked.agreement == 1.0
    assert on_gender.said.startswith("no better than the most recent candidate:")
    on_controls = question_evidence(pronoun_model, PRONOUN_TEXT, "she", "Xiaohong", "Xiaoming", head=(0, 0),
                                    winobias=False)
    assert on_controls.tracked is not None and on_controls.tracked.agreement is not None  # the baseline it follows
    assert on_controls.verdict == "baseline" and on_controls.tracked.name == "the most recent candidate"
    assert on_controls.tracked.agreement > 0.9 and on_controls.low < 0.5 < on_controls.high
    assert box_sentence(on_controls).startswith("Head 0.0 follows the nearer candidate: on 96 controls it picks")
    # on the story sentence itself it looks right: that is why one sentence decides nothing
    assert on_controls.on_key is not None and on_controls.on_against is not None
    assert on_controls.text_margin is not None
    assert on_controls.on_key > on_controls.on_against and on_controls.text_margin > 0.5


@pytest.mark.numeric
def test_evidence_within_an_attention_budget_is_the_same_evidence(pronoun_model):
    # a budget of one byte: every batch's trace is lazy, each question's row recomputed from its q and k (the
    # public app's evidence on long texts); the same head, verdict and scores, the weights equal up to fp32 rounding
    kept = question_evidence(pronoun_model, PRONOUN_TEXT, "she", "Xiaohong", "Xiaoming", winobias=False)
    lazy = question_evidence(pronoun_model, PRONOUN_TEXT, "she", "Xiaohong", "Xiaoming", winobias=False,
                             attention_budget=1)
    assert (lazy.head, lazy.verdict, lazy.score, lazy.n) == (kept.head, kept.verdict, kept.score, kept.n)
    assert lazy.said == kept.said and lazy.text_best == kept.text_best
    # a weight from one logsumexp against eager's softmax: both sum exponentials over the row's keys (the sentence's
    # ≤ 64 tokens) of weights ≤ 1, in another order
    assert lazy.on_key == pytest.approx(kept.on_key, abs=fp32(64), rel=0)


def test_the_head_is_chosen_on_one_half_and_judged_on_the_other(pronoun_model):
    ev = question_evidence(pronoun_model, PRONOUN_TEXT, "she", "Xiaohong", "Xiaoming", winobias=False, seed=7)
    split, scored = ev.split, ev.scored
    assert split is not None and scored is not None and ev.chosen_grid is not None and ev.head is not None
    assert split.seed == 7 and not set(split.chosen_on) & set(split.judged_on)
    assert len(split.chosen_on) + len(split.judged_on) == scored.n == 96
    correct = scored.correct()
    assert np.array_equal(ev.chosen_grid, correct[list(split.chosen_on)].mean(0))
    assert ev.head == np.unravel_index(ev.chosen_grid.argmax(), ev.chosen_grid.shape)
    assert ev.score == correct[list(split.judged_on), ev.head[0], ev.head[1]].mean()
    again = question_evidence(pronoun_model, PRONOUN_TEXT, "she", "Xiaohong", "Xiaoming", winobias=False, seed=7)
    assert again.split == split and again.head == ev.head and again.score == ev.score
    frame = items_frame(ev)
    assert (frame["half"] == "judged on").sum() == 48 and frame.loc[frame["half"] == "judged on", "right"].mean() == \
        ev.score


def test_fewer_than_thirty_judged_items_is_too_few(pronoun_model):
    ev = question_evidence(pronoun_model, questions=_gender(40))
    assert ev.n == 20 and ev.verdict == "too few" and ev.said.startswith("too few items (n = 20 < 30)")


def test_bad_questions_are_refused_in_one_line(pronoun_model):
    with pytest.raises(BadOption, match="the pronoun 'they' is not a word of the text"):
        question_evidence(pronoun_model, PRONOUN_TEXT, "they", "Xiaohong", "Xiaoming")
    with pytest.raises(BadOption, match="against missing"):
        question_evidence(pronoun_model, PRONOUN_TEXT, "she", "Xiaohong", "")
    with pytest.raises(BadOption, match="outside the model: layers 0–0, heads 0–1"):
        question_evidence(pronoun_model, questions=_gender(), head=(3, 0))
