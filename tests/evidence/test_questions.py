"""Questions: read from a user's file (every bad line named with its number and why), placed in their text, and
answered by every head of a model."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from numeric import fp32

from probes.errors import BadData
from probes.evidence.questions import MAX_LINE, Question, parse_questions, read_questions, score_questions

GOOD: dict[str, Any] = {"text": "Mary gave the apple to John because he was hungry.", "pronoun": "he",
                        "candidates": ["Mary", "John"], "answer": "John"}


def _lines(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def test_every_bad_line_is_named_with_its_number_and_reason(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(_lines(
        GOOD,
        {k: v for k, v in GOOD.items() if k != "answer"},  # 2: missing field
        dict(GOOD, pronoun="she"),  # 3: the pronoun is not in the text
        dict(GOOD, candidates=["Peter", "John"]),  # 4: a candidate not in the text
        dict(GOOD, answer="Anna"),  # 5: an answer not among the candidates
        "{not json",  # 6
        "",  # 7: blank, skipped without a word
        dict(GOOD, candidates="Mary, John"),  # 8: not a list
        dict(GOOD, candidates=["Mary", "mary"]),  # 9: named twice
        dict(GOOD, text=5),  # 10: not text
    ))
    items = read_questions(path)
    assert [q.text for q in items] == [GOOD["text"]] and items[0].line == 1 and items[0].made == "q.jsonl"
    said = {b.line: b.reason for b in items.bad}
    assert sorted(said) == [2, 3, 4, 5, 6, 8, 9, 10]
    assert said[2] == "missing field(s) answer"
    assert said[3] == "the pronoun 'she' is not a word of the text"
    assert said[4] == "the candidate 'Peter' is not a word of the text"
    assert said[5] == "the answer 'Anna' is not among the candidates ('Mary', 'John')"
    assert said[6].startswith("not JSON")
    assert said[8] == "candidates must be a list of words (strings)"
    assert said[9] == "a candidate is named twice"
    assert said[10] == "text is int, not text: give it as a string"
    assert str(items.bad[0]) == f"{path}:2: missing field(s) answer"


def test_a_deeply_nested_line_and_an_overlong_line_are_bad_items_not_a_crash():
    """An upload's line is bounded before it is parsed: JSON nested 5,000 deep (Python's parser recurses once a
    level: RecursionError) and a 1 MB line are each a bad line with its reason, and the good line is still used."""
    deep = "[" * 5_000 + "]" * 5_000
    long = json.dumps(dict(GOOD, made="x" * 1_000_000))
    items = parse_questions(_lines(GOOD, deep, long), "q.jsonl")
    assert len(items) == 1
    said = {b.line: b.reason for b in items.bad}
    assert said == {2: "not a question: JSON nested too deeply",
                    3: f"a line of {len(long):,} characters; a question takes up to {MAX_LINE:,}"}


def test_a_file_with_nothing_in_it_and_a_missing_file_are_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(BadData, match="no questions found"):
        read_questions(empty)
    with pytest.raises(BadData, match="no file"):
        read_questions(tmp_path / "nothing.jsonl")
    with pytest.raises(BadData, match="is a folder"):
        read_questions(tmp_path)


def test_the_pronoun_is_placed_after_the_candidates():
    q = Question("She said that Mary met Anna because she was late.", "she", ("Mary", "Anna"), "Anna")
    placed = q.place()
    assert not isinstance(placed, str), placed  # placed, not refused
    spans, at = placed
    assert q.text[at[0]:at[1]] == "she" and at[0] > q.text.index("Anna")  # not the first "She"
    assert [q.text[a:b] for a, b in spans] == ["Mary", "Anna"]


@pytest.mark.numeric
def test_every_head_answers_and_the_rules_pick_by_position(pronoun_model):
    """On the planted model: head 0.0 picks the nearer name, head 0.1 the name of the pronoun's gender; the two
    head-free rules pick the nearer and the first name; the weights are the query row's on the names."""
    import probes

    qs = [Question("Mary gave the apple to John because he was hungry.", "he", ("Mary", "John"), "John"),
          Question("John took the apple from Mary because he was hungry.", "he", ("John", "Mary"), "John")]
    scored = score_questions(pronoun_model, qs)
    assert scored.n == 2 and scored.weights.shape == (2, 1, 2, 2)
    assert scored.recent.tolist() == [1, 1] and scored.first.tolist() == [0, 0] and scored.answer.tolist() == [1, 0]
    picks = scored.picks()
    assert picks[:, 0, 0].tolist() == [1, 1]  # the nearer name, both times
    assert picks[:, 0, 1].tolist() == [1, 0]  # John, the male name, both times: right both times
    assert scored.correct()[:, 0, 1].all() and scored.correct()[:, 0, 0].tolist() == [True, False]
    trace = probes.run(pronoun_model, qs[0].text, source="scratch")  # the pass "auto" picks for a GPT-2
    assert [t.strip() for t in trace.token_strings()[:8]] == ["Mary", "gave", "the", "apple", "to", "John",
                                                              "because", "he"]
    row = trace.attention(0, 1)[7].double().numpy()  # "he" (token 7) on every token
    # the question ran in a padded batch of two, the row here alone: the same up to fp32 rounding of a softmax over
    # 12 keys of weights ≤ 1
    assert scored.weights[0, 0, 1, 1] == pytest.approx(row[5], abs=fp32(12), rel=0)  # John's one token
    assert scored.margins()[0, 0, 1] == pytest.approx(row[5] - row[0], abs=2 * fp32(12), rel=0)


def test_a_decoder_question_whose_answer_comes_after_the_pronoun_is_dropped_with_its_reason(pronoun_model):
    qs = [Question("He said that Mary met John.", "He", ("Mary", "John"), "John"),
          Question(text=GOOD["text"], query="he", candidates=("Mary", "John"), answer="John")]
    scored = score_questions(pronoun_model, qs)
    assert scored.n == 1 and len(scored.dropped) == 1
    assert "comes after the pronoun: a decoder's query cannot attend to a later word" in scored.dropped[0].reason
    assert np.isfinite(scored.weights).all()
