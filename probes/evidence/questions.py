"""Questions about one word of a text, "who is 'she'?", and every head's answer to each of them.

A :class:`Question` is a text, the word whose attention is read (the *query*: a pronoun), the words it could
refer to (the *candidates*) and which of them is the answer. A head answers a question by where the query's
attention goes: the candidate whose pieces get the most of it (summed over its pieces; the first token, where
heads park the attention they do not need, counts for no candidate: :func:`counted`). So every head of a model
answers every question, and :class:`Scored` holds their weights, from which the evidence is made
(:mod:`probes.evidence.claims`): the head's picks, whether they are right, and what a head-free rule would have
picked (the most recent candidate before the query, the first-mentioned one).

Questions come from a user's file (:func:`read_questions`: JSONL, one ``{"text", "pronoun", "candidates",
"answer"}`` a line) or are built as controls of one sentence (:mod:`probes.evidence.controls`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..datasets import BadItem, Items
from ..datasets.utf8 import read_text
from ..errors import BadData
from ..precision import upcast
from ..tokens import span_tokens, word_occurrences

if TYPE_CHECKING:
    from ..seam import ModelLike, TraceLike

SINK = 0  # the attention sink: the first real token (BOS, [CLS], or the text's first token where there is none)
MAX_CANDIDATES = 8  # candidates one question may name
MAX_TEXT = 2000  # characters of one question's text
MAX_LINE = 16 * MAX_TEXT  # characters of one line: its text even if every character is written \uXXXX, and the rest


@dataclass(frozen=True)
class Question:
    text: str
    query: str  # the word whose attention is read (a pronoun)
    candidates: tuple[str, ...]  # the words it could refer to; the answer is one of them
    answer: str
    made: str = "given"  # how it was made: a control's recipe ("verb flipped"), or where it was read from
    line: int = 0  # its line in the file it was read from (0: built here)

    @property
    def answer_index(self) -> int:
        return [c.lower() for c in self.candidates].index(self.answer.lower())

    def place(self) -> tuple[list[tuple[int, int]], tuple[int, int]] | str:
        """The character spans of the candidates (each one's first occurrence) and of the query (its first
        occurrence after every candidate's, else its first), or why the question cannot be placed in its text."""
        spans = []
        for c in self.candidates:
            found = word_occurrences(self.text, c)
            if not found:
                return f"the candidate {c!r} is not a word of the text"
            spans.append(found[0])
        found = word_occurrences(self.text, self.query)
        if not found:
            return f"the pronoun {self.query!r} is not a word of the text"
        after = [s for s in found if s[0] >= max(lo for lo, _ in spans)]
        query = (after or found)[0]
        if any(lo < query[1] and query[0] < hi for lo, hi in spans):
            return f"the pronoun {self.query!r} is one of the candidates"
        return spans, query


def query_token(causal: bool, pieces: list[int]) -> int:
    """The piece of a query word whose attention stands for the word's: in a decoder its last piece, the first
    that has read the whole word (the first byte of 她 could still be 好 or 妈); in an encoder its first, as the
    head probes take it."""
    return pieces[-1] if causal else pieces[0]


def counted(keys: list[int], sink: bool = False) -> list[int]:
    """The pieces of a key word whose weight counts as the word's: all of them, less the first token (the sink,
    where heads park the attention they do not need) unless ``sink`` or it is the word's only piece."""
    kept = [k for k in keys if sink or k != SINK]
    return kept or list(keys)


# -- reading a user's questions ----------------------------------------------------------------------

FIELDS = ("text", "pronoun", "candidates", "answer")


def question_of(row, line: int = 0, made: str = "given") -> Question | str:
    """The question of one JSON object (``text``, ``pronoun``, ``candidates``, ``answer``; optional ``made``), or
    why it cannot be used."""
    if not isinstance(row, dict):
        return f"not an object with {', '.join(FIELDS)}"
    missing = [k for k in FIELDS if k not in row or row[k] in (None, "", [])]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    wrong = [f"{k} is {type(row[k]).__name__}" for k in ("text", "pronoun", "answer") if not isinstance(row[k], str)]
    if wrong:
        return f"{', '.join(wrong)}, not text: give it as a string"
    candidates = row["candidates"]
    if not isinstance(candidates, list) or not all(isinstance(c, str) and c.strip() for c in candidates):
        return "candidates must be a list of words (strings)"
    candidates = tuple(c.strip() for c in candidates)
    if not 2 <= len(candidates) <= MAX_CANDIDATES:
        return f"{len(candidates)} candidate(s): give 2 to {MAX_CANDIDATES}"
    if len({c.lower() for c in candidates}) < len(candidates):
        return "a candidate is named twice"
    if len(row["text"]) > MAX_TEXT:
        return f"the text is {len(row['text']):,} characters: a question's text takes up to {MAX_TEXT:,}"
    answer = row["answer"].strip()
    if answer.lower() not in {c.lower() for c in candidates}:
        return f"the answer {answer!r} is not among the candidates ({', '.join(map(repr, candidates))})"
    given = row.get("made")
    made = given if isinstance(given, str) and given.strip() else made
    q = Question(row["text"], row["pronoun"].strip(), candidates, answer, made[:80], line)
    placed = q.place()
    return placed if isinstance(placed, str) else q


def read_questions(path: str | Path) -> Items:
    """A JSONL file of questions, one ``{"text", "pronoun", "candidates": [...], "answer"}`` object a line. A line
    that cannot be used (not JSON, a missing field, a pronoun or candidate that is not a word of its text, an
    answer not among the candidates) is skipped and listed in ``bad`` with its line and why; a file with no item
    at all raises :class:`~probes.errors.BadData`."""
    path = Path(path)
    if path.is_dir():
        raise BadData(f"{path} is a folder: give a .jsonl file of questions")
    if not path.is_file():
        raise BadData(f"no file {str(path)!r}: give a .jsonl file of questions")
    return parse_questions(read_text(path), str(path))


def parse_questions(text: str, name: str) -> Items:
    """:func:`read_questions` of a file's text (an upload), ``name`` naming it in the bad items."""
    items: list[Question] = []
    bad: list[BadItem] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:  # before it is parsed: one line of a 2 MB upload is no question
            bad.append(BadItem(name, n, f"a line of {len(line):,} characters; a question takes up to {MAX_LINE:,}"))
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            bad.append(BadItem(name, n, f"not JSON ({exc.msg})"))
            continue
        except RecursionError:  # [[[[…: Python's parser recurses once per level
            bad.append(BadItem(name, n, "not a question: JSON nested too deeply"))
            continue
        q = question_of(row, n, made=Path(name).name)
        if isinstance(q, Question):
            items.append(q)
        else:
            bad.append(BadItem(name, n, q))
    if not items and not bad:
        raise BadData(f"{name}:1: no questions found (one JSON object a line: {', '.join(FIELDS)})")
    return Items(items, bad)


# -- every head's answer ------------------------------------------------------------------------------

@dataclass
class Scored:
    """Every head's attention from each question's query on each of its candidates: ``weights`` ``[N, L, H, K]``
    (NaN past an item's own candidates), with each item's answer and the picks of two head-free rules (indices
    among its candidates)."""

    questions: list[Question]
    weights: np.ndarray
    answer: np.ndarray  # [N]
    recent: np.ndarray  # [N] the candidate nearest before the query (the nearest after it when none is before)
    first: np.ndarray  # [N] the candidate mentioned first
    causal: bool
    dropped: list[BadItem] = field(default_factory=list)  # questions the model's tokens could not place

    @property
    def n(self) -> int:
        return len(self.questions)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weights.shape[1:3])

    @property
    def chance(self) -> np.ndarray:
        """[N] what a uniform pick among an item's candidates gets right."""
        return 1.0 / np.isfinite(self.weights[:, 0, 0, :]).sum(-1)

    def picks(self) -> np.ndarray:
        """``[N, L, H]``: the candidate each head gives the most weight; −1 where two tie (no pick)."""
        w = np.where(np.isfinite(self.weights), self.weights, -np.inf)
        best = w.argmax(-1)
        top = np.take_along_axis(w, best[..., None], -1)
        ties = (w == top).sum(-1) > 1
        return np.where(ties, -1, best)

    def correct(self) -> np.ndarray:
        """``[N, L, H]`` bool: the head picks the answer."""
        return self.picks() == self.answer[:, None, None]

    def margins(self) -> np.ndarray:
        """``[N, L, H]``: the weight on the answer minus the most any other candidate gets."""
        w = np.where(np.isfinite(self.weights), self.weights, -np.inf)
        on_answer = np.take_along_axis(w, self.answer[:, None, None, None], -1)[..., 0]
        others = w.copy()
        np.put_along_axis(others, self.answer[:, None, None, None], -np.inf, -1)
        return on_answer - others.max(-1)

    def made(self) -> dict[str, int]:
        """How the items were made: recipe -> count, in the order they first appear."""
        out: dict[str, int] = {}
        for q in self.questions:
            out[q.made] = out.get(q.made, 0) + 1
        return out


def _answer(q: Question, trace: TraceLike, item: int) -> tuple | str:
    """Every head's weight on each of ``q``'s candidates in batch ``item`` of ``trace`` (its text's Trace), with the
    answer's index and the two rules' picks; or why the question cannot be read there."""
    placed = q.place()
    if isinstance(placed, str):
        return placed
    spans, at = placed
    tokens = trace.real_tokens(item)
    pieces = [span_tokens(tokens, s) for s in spans]
    asking = span_tokens(tokens, at)
    if not asking or not all(pieces):
        return "a word of it is cut off (the text is longer than the model reads)"
    query = query_token(trace.is_causal, asking)
    keys = [counted(p) for p in pieces]
    if any(query in k for k in keys):
        return f"the pronoun {q.query!r} shares a token with a candidate"
    if trace.is_causal and min(keys[q.answer_index]) > query:
        return f"the answer {q.answer!r} comes after the pronoun: a decoder's query cannot attend to a later word"
    row = np.stack([upcast(trace.attention(layer, item=item, rows=[query])[:, 0]).cpu().numpy()
                    for layer in range(trace.n_layers)])  # [L, H, n]
    weights = np.full((*row.shape[:2], MAX_CANDIDATES), np.nan)
    for c, k in enumerate(keys):
        weights[:, :, c] = row[:, :, k].sum(-1)
    ends = [max(k) for k in keys]
    before = [c for c, e in enumerate(ends) if e < query]
    recent = max(before, key=lambda c: ends[c]) if before else min(range(len(ends)), key=lambda c: ends[c] - query)
    first = min(range(len(keys)), key=lambda c: min(keys[c]))
    return weights, q.answer_index, recent, first


def _scored(questions: Sequence[Question], answers: Sequence[tuple | str], causal: bool) -> Scored:
    kept, rows, dropped = [], [], []
    for q, got in zip(questions, answers, strict=True):
        if isinstance(got, str):
            dropped.append(BadItem(q.made, q.line, got))
        else:
            kept.append(q)
            rows.append(got)
    if not rows:
        none = np.zeros(0, dtype=int)
        return Scored([], np.zeros((0, 0, 0, 2)), none, none.copy(), none.copy(), causal, dropped)
    k = max(len(q.candidates) for q in kept)
    answer, recent, first = (np.array([r[i] for r in rows]) for i in (1, 2, 3))
    return Scored(kept, np.stack([r[0][..., :k] for r in rows]), answer, recent, first, causal, dropped)


def score_traced(questions: Sequence[Question], traced: Sequence[tuple[TraceLike, int]]) -> Scored:
    """:class:`Scored` from each question's ``(trace, item)`` (the Trace of its text, in the same order). A question
    whose words the tokens do not cover (cut by truncation), whose query shares a token with a candidate, or whose
    answer comes after the query in a decoder (which cannot attend to it) is dropped, with its reason."""
    answers = [_answer(q, trace, item) for q, (trace, item) in zip(questions, traced, strict=True)]
    return _scored(questions, answers, bool(traced) and traced[0][0].is_causal)


def score_questions(model: ModelLike, questions: Sequence[Question], source: str = "auto", backend: str = "eager",
                    batch_size: int = 16, progress: Callable[[int, int], None] | None = None,
                    attention_budget: int | None = None) -> Scored:
    """Run every question's text through ``model`` (in batches, shortest first; each cut to the context window) and
    read every head's answer (:func:`score_traced`), one batch's Traces at a time. ``progress(done, total)`` after
    each batch. ``attention_budget`` (bytes): a batch whose probabilities would take more keeps one logsumexp per
    row instead, and each question's row is recomputed (:func:`probes.run`; the same weights up to float32
    rounding)."""
    from ..runner import batches

    questions = list(questions)
    order = sorted(range(len(questions)), key=lambda i: len(questions[i].text))
    answers: list = [None] * len(questions)
    done = 0
    for b, trace in enumerate(batches(model, [questions[i].text for i in order], batch_size, source=source,
                                      backend=backend, attention_budget=attention_budget)):
        for item in range(trace.batch_size):
            i = order[b * batch_size + item]
            answers[i] = _answer(questions[i], trace, item)
        done += trace.batch_size
        if progress is not None:
            progress(done, len(questions))
    return _scored(questions, answers, model.is_causal)
