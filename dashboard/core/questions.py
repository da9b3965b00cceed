"""The question asked of a text (which of two words a word refers to, Explore's answer box and Find heads), and
its evidence: the head chosen to answer it on half of the question's controls (or of a user's uploaded
questions) and judged on the other half, computed once per question and model for every session."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import streamlit as st
from streamlit.runtime.scriptrunner import RerunException

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



class _Job:
    """One question's evidence being computed on its own thread: every run that asks for it waits on this one (a click
    that ends a run while it waits does not start it again), and its items run so far, for their progress bars."""

    def __init__(self) -> None:
        self.done, self.total, self.waiting, self.stop = 0, 0, 0, False
        self.finished = threading.Event()
        self.result: object = None
        self.error: BaseException | None = None

    def step(self, done: int, total: int) -> None:
        if self.stop:  # cancelled, or nobody waits any more: the library's loop ends at its next item
            raise _Stopped
        self.done, self.total = done, total


class _Stopped(Exception):
    """The evidence's computation was stopped: nothing of it is kept."""


_running: dict[tuple, _Job] = {}  # questions' evidence being computed now, by _evidence_key


def stop_evidence(inp: Input, asked: Asked) -> None:
    """Stop computing this question's evidence, if it is being computed (its Cancel button): nothing is kept."""
    with _evidence_lock:
        job = _running.get(_evidence_key(inp, asked))
    if job is not None:
        job.stop = True


def kept_evidence(inp: Input, asked: Asked):
    """This question's evidence if it is kept already, else None (nothing is computed)."""
    with _evidence_lock:
        return _evidence.get(_evidence_key(inp, asked))


def question_evidence(inp: Input, asked: Asked, raw: bytes | None = None, progress=None):
    """Which head finds ``asked.key`` for ``asked.query`` in the text, judged on items it was not chosen on
    (:func:`probes.evidence.claims.question_evidence`): on the question's controls, or on an upload's questions
    (``raw``, the file ``asked.upload`` names). Computed once per question and model, for every session (the last
    :data:`EVIDENCE_KEPT`), on a thread of its own: a run that asks while it is computed waits for the same
    computation, and a run that ends while it waits (a click) leaves it going for the next; ``progress(done, total)``
    while it runs, bounded on a public deployment."""
    key = _evidence_key(inp, asked)
    with _evidence_lock:
        if key in _evidence:
            _evidence.move_to_end(key)
            return _evidence[key]
        job = _running.get(key)
    if job is None or job.stop:  # (a stopped one ends at its next item, keeping nothing: this question starts anew)
        job = _start(key, inp, asked, raw)
    watched = budgets.watched(progress, "ask on a shorter text or upload fewer questions")
    job.waiting += 1
    try:
        while not job.finished.wait(0.1):
            watched(job.done, job.total)
    except BaseException as exc:
        # a click ended this run (Streamlit's rerun): the next run waits for the same computation. Anything else (the
        # public time bound, a closed tab's stop) stops it, unless another run waits for it too
        if not isinstance(exc, RerunException) and job.waiting == 1:
            job.stop = True
        raise
    finally:
        job.waiting -= 1
    if job.error is not None:
        raise job.error
    return job.result


def _start(key: tuple, inp: Input, asked: Asked, raw: bytes | None) -> _Job:
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
    with _evidence_lock:
        if (job := _running.get(key)) is not None and not job.stop:  # another run started it meanwhile
            return job
        job = _running[key] = _Job()

    def work() -> None:
        try:
            found = judged(model, inp.text, asked.query, asked.key, asked.against, questions=questions,
                           progress=job.step, **batch)
            with _evidence_lock:
                _evidence[key] = found
                while len(_evidence) > EVIDENCE_KEPT:
                    _evidence.popitem(last=False)
            job.result = found
        except Exception as exc:  # noqa: BLE001 - raised in every run that waits on it (a stop: nothing kept)
            job.error = exc
        finally:
            with _evidence_lock:
                if _running.get(key) is job:
                    del _running[key]
            job.finished.set()

    threading.Thread(target=work, name="question-evidence", daemon=True).start()
    return job



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
