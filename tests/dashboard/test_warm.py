"""The warm start (``dashboard/serve.py`` → ``dashboard/warm.py``): the default view's work is done before the
first browser asks, into the same caches the app reads, and a failed warm start never blocks the app."""

from __future__ import annotations

import logging
import threading

import streamlit as st
from apptest import open_app, opening_header

from dashboard import warm


def _count_forward(monkeypatch) -> list[str]:
    from probes import runner

    calls, real = [], runner.forward

    def forward(model, enc, source="hf", *args, **kwargs):
        calls.append(source)
        return real(model, enc, source, *args, **kwargs)

    monkeypatch.setattr(runner, "forward", forward)
    return calls


STREAMLIT_NOTES = "streamlit.runtime.scriptrunner_utils.script_run_context"  # its "missing ScriptRunContext!"


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _start_and_finish_with_a_clean_log() -> None:
    """The warm start, to its end; Streamlit writes nothing to the server's log meanwhile (its "missing
    ScriptRunContext! This warning can be ignored…" for each cached call outside a browser's run, before)."""
    notes = _Kept()
    logging.getLogger(STREAMLIT_NOTES).addHandler(notes)
    try:
        warm.start().join(timeout=300)
    finally:
        logging.getLogger(STREAMLIT_NOTES).removeHandler(notes)
    assert not notes.records, [r.getMessage() for r in notes.records]


def test_after_the_warm_start_the_default_view_runs_no_hugging_face_pass(monkeypatch):
    from dashboard.core import models, questions
    expected = opening_header()  # (the library's evidence, computed here before the passes are counted)
    monkeypatch.setattr(warm, "_started", threading.Event())
    monkeypatch.setattr(warm, "_done", threading.Event())
    st.cache_data.clear()
    st.cache_resource.clear()
    calls = _count_forward(monkeypatch)
    _start_and_finish_with_a_clean_log()
    # the default view: the offline default, Hugging Face's pass of the default sentence; then the answer box's
    # evidence (its controls and the sentence, through the pass "auto" picks; none when this process has it already)
    assert calls[0] == "hf" and calls.count("hf") == 1 and set(calls[1:]) <= {"auto"}
    from dashboard.core.state import DEFAULT_TEXT, STORIES

    assert questions.has_evidence(models.Input("minilm", DEFAULT_TEXT, None, "hf", "eager", False),
                             questions.Asked(*STORIES[DEFAULT_TEXT]))
    warm.wait()  # finished: returns at once
    calls.clear()
    at = open_app(page="explore")
    assert [h.value for h in at.header][0] == expected
    assert "hf" not in calls  # the page found the trace the warm start made; only the badge's scratch pass ran
    assert calls == ["scratch"]


def test_a_failed_warm_start_is_logged_and_does_not_block(monkeypatch, caplog):
    from dashboard.core import trace
    monkeypatch.setattr(warm, "_started", threading.Event())
    monkeypatch.setattr(warm, "_done", threading.Event())

    def broken(inp):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(trace, "run_info", broken)
    with caplog.at_level(logging.WARNING, logger="dashboard"):
        warm.start().join(timeout=300)
        warm.wait()
    assert "warm start failed" in caplog.text and "disk on fire" in caplog.text


def test_without_a_warm_start_wait_returns_at_once(monkeypatch):
    monkeypatch.setattr(warm, "_started", threading.Event())
    monkeypatch.setattr(warm, "_done", threading.Event())
    monkeypatch.setattr(warm, "WAIT_S", 0.0)
    warm.wait()  # `streamlit run dashboard/app.py`: nothing started, nothing to wait for
    assert not warm._done.is_set()


def test_a_deployment_that_does_not_offer_the_default_model_warms_nothing(monkeypatch):
    monkeypatch.setattr(warm, "_started", threading.Event())
    monkeypatch.setattr(warm, "_done", threading.Event())
    monkeypatch.setenv("PROBES_MODELS", "smollm2")
    calls = _count_forward(monkeypatch)
    _start_and_finish_with_a_clean_log()
    assert calls == [] and warm._done.is_set()


def test_a_run_that_meets_an_unfinished_warm_start_waits_for_it_and_then_draws_the_page(monkeypatch):
    started, done = threading.Event(), threading.Event()
    monkeypatch.setattr(warm, "_started", started)
    monkeypatch.setattr(warm, "_done", done)
    started.set()
    assert warm.pending()
    timer = threading.Timer(1.0, done.set)  # the warm start finishes a second into the visitor's run
    timer.start()
    at = open_app(page="explore")
    timer.join()
    assert not warm.pending()
    assert [h.value for h in at.header][0] == opening_header()
    assert not any("Loading the model" in c.value for c in at.caption)  # the notice is gone once the page draws
