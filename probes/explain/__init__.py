"""Answers for people: the floor above the evidence and the readers, below the CLI and the app, where the library's
numbers become what a person reads.

* :mod:`.steps`: one query token's path through softmax(q·kᵀ·scale)·v by hand (:func:`query_steps`,
  :func:`work_key`), a head at word level (:func:`word_level`), and which head answers "what does this word refer
  to?" (:func:`answering_head`, :func:`margins`);
* :mod:`.why`: QK attribution in words (``python -m probes why`` and Explore's "Why this weight?"): what each term
  does to the score, position against content, the band groups, what each bucket of the grid holds; the numbers are
  :mod:`probes.effects.why`'s.

The names of :mod:`.steps` are this package's too (``from probes import explain; explain.query_steps(...)``).
"""

from .steps import (
    SINK,
    Answer,
    KeyWorked,
    Margins,
    QuerySteps,
    answering_head,
    counted,
    likely_key,
    margins,
    query_steps,
    query_token,
    word_level,
    word_tokens,
    words,
    work_key,
)

__all__ = ["SINK", "Answer", "KeyWorked", "Margins", "QuerySteps", "answering_head", "counted", "likely_key",
           "margins", "query_steps", "query_token", "word_level", "word_tokens", "words", "work_key"]
