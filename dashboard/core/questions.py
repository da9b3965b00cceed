"""The question asked of a text (which of two words a word refers to, Explore's answer box and Find heads), and
its evidence: the head chosen to answer it on half of the question's controls (or of a user's uploaded
questions) and judged on the other half, computed once per question and model for every session."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
from streamlit.runtime.scriptrunner import RerunException

import probes
from probes import explain

from . import budgets
from .models import Input, model_of, served_from
from .shared_work import Job, SharedWork
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

_evidence = SharedWork("question-evidence", EVIDENCE_KEPT)  # by _evidence_key, for every session


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



def stop_evidence(inp: Input, asked: Asked) -> None:
    """Stop computing this question's evidence, if it is being computed (its Cancel button): nothing is kept."""
    _evidence.stop(_evidence_key(inp, asked))


def kept_evidence(inp: Input, asked: Asked):
    """This question's evidence if it is kept already, else None (nothing is computed)."""
    return _evidence.kept(_evidence_key(inp, asked))


def question_evidence(inp: Input, asked: Asked, raw: bytes | None = None, progress=None):
    """Which head finds ``asked.key`` for ``asked.query`` in the text, judged on items it was not chosen on
    (:func:`probes.evidence.claims.question_evidence`): on the question's controls, or on an upload's questions
    (``raw``, the file ``asked.upload`` names). Computed once per question and model, for every session (the last
    :data:`EVIDENCE_KEPT`), on a thread of its own: a run that asks while it is computed waits for the same
    computation, and a run that ends while it waits (a click) leaves it going for the next; ``progress(done, total)``
    while it runs, bounded on a public deployment."""
    key = _evidence_key(inp, asked)
    if (found := _evidence.kept(key, touch=True)) is not None:
        return found
    # (a stopped computation ends at its next item, keeping nothing: this question starts anew)
    job = _evidence.running(key) or _start(key, inp, asked, raw)
    watched = budgets.watched(progress, "ask on a shorter text or upload fewer questions")  # (bound from here)
    return _evidence.wait(job, watched, stops=_stops)


def _stops(exc: BaseException) -> bool:
    """Whether ``exc``, ending the only run that waits on a question's evidence, stops its computation: a click
    ended the run (Streamlit's rerun) and the next run waits for the same computation; anything else (the public
    time bound, a closed tab's stop) stops it."""
    return not isinstance(exc, RerunException)


def _start(key: tuple, inp: Input, asked: Asked, raw: bytes | None) -> Job:
    """Start computing a question's evidence on its own thread (what it reads is gathered here, in the run: the
    upload's questions and the model, from the app's caches)."""
    from probes.evidence.claims import question_evidence as judged

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
    return _evidence.start(key, lambda step: judged(model, inp.text, asked.query, asked.key, asked.against,
                                                    questions=questions, progress=step, **batch))



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
