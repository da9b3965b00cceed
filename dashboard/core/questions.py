"""The question asked of a text (which of two words a word refers to, Explore's answer box and Find heads), and
its evidence: the head chosen to answer it on half of the question's controls (or of a user's uploaded
questions) and judged on the other half, computed once per question and model for every session."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import streamlit as st

import probes
from probes import explain

from . import budgets
from .models import Input, model_of, served_from
from .state import STORIES
from .trace import text_words, trace


@st.cache_data(max_entries=64, show_spinner=False)
def story(inp: Input) -> explain.Answer | None:
    """For a text with a question (``state.STORIES``), the head that answers it best on this model (None for
    any other text)."""

    words = STORIES.get(inp.text.strip())
    if words is None or inp.pair:
        return None
    return explain.answering_head(trace(inp), inp.text, *words)


EVIDENCE_KEPT = 16  # questions' evidence kept at once, for every session (each holds every head's weights: ~0.5 MB)

MAX_QUESTIONS = 2000  # questions one upload may hold (each is one forward pass)

PUBLIC_QUESTIONS = 300  # …on a public deployment, within its time bound on SmolLM2 (docs/app.md, "Uploads")

MAX_QUESTION_BYTES = 2_000_000  # bytes of one upload of questions

_evidence: OrderedDict[tuple, object] = OrderedDict()

_evidence_lock = threading.Lock()


@dataclass(frozen=True)
class Asked:
    """A question asked of a text: which of ``key`` and ``against`` the ``query`` word refers to; ``upload``: a
    user's own questions to judge it on instead of the controls (a name and the file's sha256, read by
    :func:`question_upload`)."""

    query: str
    key: str
    against: str
    upload: tuple[str, str] | None = None



def _evidence_key(inp: Input, asked: Asked) -> tuple:
    where = served_from(inp)
    return inp.model, where, inp.text, asked



def has_evidence(inp: Input, asked: Asked) -> bool:
    """Whether :func:`question_evidence` of this question is kept already (the page draws no progress bar then)."""
    with _evidence_lock:
        return _evidence_key(inp, asked) in _evidence



@st.cache_data(max_entries=8, show_spinner=False)
def question_upload(name: str, raw: bytes) -> probes.datasets.Items:
    """A user's questions (.jsonl: text, pronoun, candidates, answer), read once per file: the usable ones and every
    bad line with its number and why (:func:`probes.evidence.questions.parse_questions`)."""
    from probes.datasets.utf8 import decode
    from probes.errors import BadData
    from probes.evidence.questions import parse_questions

    if len(raw) > MAX_QUESTION_BYTES:  # before it is decoded: 2,000 questions of a sentence each are ~0.5 MB
        raise BadData(f"{name} is {len(raw) / 1e6:,.1f} MB; a file of questions here takes up to "
                      f"{MAX_QUESTION_BYTES / 1e6:.0f} MB: keep fewer questions")
    text = decode(raw, name)
    most = PUBLIC_QUESTIONS if budgets.public() else MAX_QUESTIONS
    lines = sum(1 for line in text.splitlines() if line.strip())
    if lines > most:
        raise BadData(f"{name} holds {lines:,} questions; this app judges up to {most:,} at once: keep the first "
                      f"{most:,} (or run python -m probes claim --data on your own machine)")
    return parse_questions(text, name)



def question_evidence(inp: Input, asked: Asked, raw: bytes | None = None, progress=None):
    """Which head finds ``asked.key`` for ``asked.query`` in the text, judged on items it was not chosen on
    (:func:`probes.evidence.claims.question_evidence`): on the question's controls, or on an upload's questions
    (``raw``, the file ``asked.upload`` names). Computed once per question and model, for every session (the last
    :data:`EVIDENCE_KEPT`); ``progress(done, total)`` while it runs, bounded on a public deployment."""
    from probes.evidence.claims import question_evidence as judged

    key = _evidence_key(inp, asked)
    with _evidence_lock:
        if key in _evidence:
            _evidence.move_to_end(key)
            return _evidence[key]
    questions = None
    if asked.upload is not None:
        if raw is None:  # not kept (see above): the upload's own bytes are needed to judge on it
            raise TypeError(f"question_evidence: the questions of {asked.upload[0]} were not given (raw)")
        questions = list(question_upload(asked.upload[0], raw))
    model = model_of(inp)
    batch: budgets.Budgeted = {}
    if budgets.public():  # texts traced at once within the public work budget: what a trace keeps of each text, its
        # probabilities (every head's) or, past the public attention budget, its hidden states (a lazy trace: each
        # question's row recomputed), and one layer's scores, probabilities and mask while the pass runs
        texts = [inp.text] if questions is None else [q.text for q in questions]
        longest = max(model.encode(t, truncate=True).input_ids.shape[-1] for t in texts)
        probs = model.n_layers * model.n_heads * longest**2 * 4
        states = (model.n_layers + 1) * longest * model.config.hidden_size * 4
        per_text = (probs if probs <= budgets.PUBLIC_ATTENTION_BUDGET else states) + 3 * model.n_heads * longest**2 * 4
        batch = {"batch_size": max(1, min(16, budgets.PUBLIC_WORK_BYTES // per_text)),
                 "attention_budget": budgets.PUBLIC_ATTENTION_BUDGET}
    found = judged(model, inp.text, asked.query, asked.key, asked.against, questions=questions,
                    progress=budgets.watched(progress, "ask on a shorter text or upload fewer questions"), **batch)
    with _evidence_lock:
        _evidence[key] = found
        while len(_evidence) > EVIDENCE_KEPT:
            _evidence.popitem(last=False)
    return found



@st.cache_data(max_entries=64, show_spinner=False)
def question(inp: Input, query: int, asked: Asked | None = None) -> tuple[int | None, int | None]:
    """The key word and the distractor word (indices among :func:`text_words`) the pages open on for this query
    token: those of the question asked of the text (``asked``: typed, or a story's own, ``state.STORIES``) when
    they are words of it, else the word the query attends to most (never the sink) and no distractor. One place
    for Find heads, the minimal pair and the callout, so 小红 is the default everywhere."""

    words = [w.lower() for w, _ in text_words(inp)]
    story = STORIES.get(inp.text.strip()) if not inp.pair else None
    if asked is None and story:
        asked = Asked(*story)
    if asked and asked.key.lower() in words:
        other = words.index(asked.against.lower()) if asked.against.lower() in words else None
        return words.index(asked.key.lower()), other
    return explain.likely_key(trace(inp), inp.text, query), None
