"""The question's evidence is heavy work that belongs to the answer box: a page without the box never computes it,
the pages with the box compute it after they have drawn and then open on the head it chooses, and one question is
computed once, however many runs ask for it while it is computed."""

from __future__ import annotations

import threading

from apptest import open_app, opening_header, texts

from dashboard.core import questions
from dashboard.core.models import Input
from dashboard.core.shared_work import SharedWork, Stopped
from dashboard.core.state import DEFAULT_TEXT, STORIES


def _forget(monkeypatch) -> None:
    """Forget every kept question's evidence (for this test)."""
    monkeypatch.setattr(questions, "_evidence", SharedWork("question-evidence", questions.EVIDENCE_KEPT))


def _counted(monkeypatch) -> list[str]:
    """Forget every kept question's evidence, and count the library's computations of one (their texts)."""
    from probes.evidence import claims

    _forget(monkeypatch)
    run, asked = claims.question_evidence, []

    def counted(model, text, *args, **kw):
        asked.append(text)
        return run(model, text, *args, **kw)

    monkeypatch.setattr(claims, "question_evidence", counted)
    return asked


def test_a_page_without_the_answer_box_never_computes_the_question(monkeypatch):
    asked = _counted(monkeypatch)
    at = open_app(page="qkv")  # the story sentence, no layer or head in the link
    assert asked == []
    assert "Judging every head" not in texts(at.main.markdown)
    assert (at.sidebar.slider(key="w_layer").value, at.sidebar.slider(key="w_head").value) == (0, 0)


def test_explore_draws_first_then_opens_on_the_chosen_head_computing_it_once(monkeypatch):
    header = opening_header()  # (the library's own choice, computed before the app's are counted)
    asked = _counted(monkeypatch)
    at = open_app(page="explore")  # the story sentence: the page, then the evidence, then the chosen head's page
    assert asked == [DEFAULT_TEXT]
    assert at.header[0].value == header
    assert "Who is “she”?" in texts(at.warning) + texts(at.success)
    at.run()  # kept: not computed again
    assert asked == [DEFAULT_TEXT] and at.header[0].value == header


def test_one_question_asked_by_two_runs_at_once_is_computed_once(monkeypatch):
    """Two runs (two sessions, or a run a click ended and the next) ask while it is computed: one computation, the
    same evidence for both."""
    from probes.evidence import claims

    _forget(monkeypatch)
    started, release, calls = threading.Event(), threading.Event(), []

    def slow(model, text, *args, **kw):
        calls.append(text)
        started.set()
        release.wait(30)
        return ("evidence of", text)

    monkeypatch.setattr(claims, "question_evidence", slow)
    inp = Input("minilm", DEFAULT_TEXT, None, "hf", "eager", False)
    asked = questions.Asked(*STORIES[DEFAULT_TEXT])
    got: list[object] = []
    waiters = [threading.Thread(target=lambda: got.append(questions.question_evidence(inp, asked))) for _ in range(2)]
    waiters[0].start()
    assert started.wait(60)
    waiters[1].start()
    release.set()
    for waiter in waiters:
        waiter.join(60)
    assert calls == [DEFAULT_TEXT] and got == [("evidence of", DEFAULT_TEXT)] * 2
    assert questions.kept_evidence(inp, asked) == ("evidence of", DEFAULT_TEXT)


def test_a_stopped_question_keeps_nothing_and_says_so(monkeypatch):
    """Cancel stops the computation at its next item: the run waiting on it gets the stop, nothing is kept."""
    import pytest

    from probes.evidence import claims

    _forget(monkeypatch)
    inp = Input("minilm", DEFAULT_TEXT, None, "hf", "eager", False)
    asked = questions.Asked(*STORIES[DEFAULT_TEXT])
    first = threading.Event()

    def stepping(model, text, *args, progress=None, **kw):
        for done in range(1000):
            progress(done, 1000)
            first.set()
            threading.Event().wait(0.01)
        return "finished"

    monkeypatch.setattr(claims, "question_evidence", stepping)
    def cancel() -> None:  # the Cancel button, once the computation has begun
        first.wait(60)
        questions.stop_evidence(inp, asked)

    threading.Thread(target=cancel).start()
    with pytest.raises(Stopped):
        questions.question_evidence(inp, asked)
    assert questions.kept_evidence(inp, asked) is None
