"""What the tour asks the library for: each finding's work (:func:`probes.evidence.findings.gather`), computed once per
model for every session, on a thread of its own (a click that ends the run leaves it going for the next run, which
waits for the same computation), and read into the finding's verdict (:func:`probes.evidence.findings.read`). A
question's finding is the question's evidence that Explore's answer box reads (:mod:`dashboard.core.questions`), so
opening Explore on it computes nothing again."""

from __future__ import annotations

import threading
from collections.abc import Callable

from dashboard.core import models, questions
from dashboard.core.models import Input
from probes.evidence import findings
from probes.evidence.findings import Finding, Judged

_kept: dict[tuple, object] = {}  # works done, by (model, work, options): a few (the findings are a fixed list)
_running: dict[tuple, _Job] = {}
_lock = threading.Lock()


class _Job:
    """One work being computed on its own thread, and its progress for the runs that wait on it."""

    def __init__(self) -> None:
        self.done, self.total = 0, 0
        self.finished = threading.Event()
        self.result: object = None
        self.error: BaseException | None = None

    def step(self, done: int, total: int) -> None:
        self.done, self.total = done, total


def _key(finding: Finding) -> tuple:
    return finding.model, finding.work, finding.options


def _question_input(finding: Finding) -> tuple[Input, questions.Asked]:
    assert finding.question is not None  # (asked of a question finding only)
    text, query, key, against = finding.question
    return Input(finding.model, text, None, "hf", "eager", False), questions.Asked(query, key, against)


def ready(finding: Finding) -> Judged | None:
    """The finding's verdict if its work is done (for any session), else None: nothing is computed."""
    if finding.question is not None:
        inp, asked = _question_input(finding)
        if not questions.has_evidence(inp, asked):
            return None
        return findings.read(finding, questions.question_evidence(inp, asked))
    with _lock:
        if _key(finding) not in _kept:
            return None
        result = _kept[_key(finding)]
    return findings.read(finding, result)


def judged(finding: Finding, progress: Callable[[int, int], None] | None = None) -> Judged:
    """The finding's verdict, its work computed if no session has computed it yet (waiting for it when another run
    is computing it); ``progress(done, total)`` while it runs."""
    if finding.question is not None:
        inp, asked = _question_input(finding)
        return findings.read(finding, questions.question_evidence(inp, asked, progress=progress))
    key = _key(finding)
    with _lock:
        if key in _kept:
            return findings.read(finding, _kept[key])
        job = _running.get(key)
    if job is None:
        job = _start(finding)
    while not job.finished.wait(0.1):
        if progress is not None:
            progress(job.done, job.total)
    if job.error is not None:
        raise job.error
    return findings.read(finding, job.result)


def _start(finding: Finding) -> _Job:
    model = models.model_named(finding.model)  # in the run: the app's cache of models
    key = _key(finding)
    with _lock:
        if (job := _running.get(key)) is not None:
            return job
        job = _running[key] = _Job()

    def work() -> None:
        try:
            result = findings.gather(finding, model, progress=job.step)
            with _lock:
                _kept[key] = result
            job.result = result
        except Exception as exc:  # noqa: BLE001 - raised in every run that waits on it
            job.error = exc
        finally:
            with _lock:
                if _running.get(key) is job:
                    del _running[key]
            job.finished.set()

    threading.Thread(target=work, name="finding", daemon=True).start()
    return job
