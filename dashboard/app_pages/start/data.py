"""What the tour asks the library for: each finding's work (:func:`probes.evidence.findings.gather`), computed once per
model for every session, on a thread of its own (a click that ends the run leaves it going for the next run, which
waits for the same computation), and read into the finding's verdict (:func:`probes.evidence.findings.read`). A
question's finding is the question's evidence that Explore's answer box reads (:mod:`dashboard.core.questions`), so
opening Explore on it computes nothing again."""

from __future__ import annotations

from collections.abc import Callable

from dashboard.core import models, questions
from dashboard.core.models import Input
from dashboard.core.shared_work import Job, SharedWork
from probes.evidence import findings
from probes.evidence.findings import FINDINGS, Finding, Judged

# works done and being done, by (model, work, options): every one kept (the findings are a fixed list); a run that
# ends while it waits leaves its work going for the next run (no `stops`)
_works = SharedWork("finding", len(FINDINGS))


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
    if _key(finding) not in _works:
        return None
    return findings.read(finding, _works.kept(_key(finding)))


def judged(finding: Finding, progress: Callable[[int, int], None] | None = None) -> Judged:
    """The finding's verdict, its work computed if no session has computed it yet (waiting for it when another run
    is computing it); ``progress(done, total)`` while it runs."""
    if finding.question is not None:
        inp, asked = _question_input(finding)
        return findings.read(finding, questions.question_evidence(inp, asked, progress=progress))
    return findings.read(finding, _works.get(_key(finding), lambda: _start(finding), progress))


def _start(finding: Finding) -> Job:
    model = models.model_named(finding.model)  # in the run: the app's cache of models
    return _works.start(_key(finding), lambda step: findings.gather(finding, model, progress=step))
