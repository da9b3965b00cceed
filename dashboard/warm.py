"""The warm start: load what the default view needs while the first browser is still loading the page.

Streamlit runs ``dashboard/app.py`` only once a browser has connected, so without this the first visitor
waits for Python to import torch and transformers, load the model and run it *after* their browser has
loaded the page. ``dashboard/serve.py`` (what ``make app`` runs) calls :func:`start` as it is loaded,
before the server listens (earlier than Streamlit's start-up hook, which waits for the server: docs/app.md, "Cold
start", says what it saves): a background thread imports the app's
modules, loads the offline default and traces the default sentence into the app's own caches
(``dashboard.core``), so the first visitor's run finds them there.

The first script run waits for that thread (:func:`wait_in_page`) before it imports anything: two threads
that import the same packages at once can meet in a circular import and see a half-initialised module, and
the run needs the same work anyway. While it waits, the page says so, and holds an empty chart for that
time: the browser fetches and compiles its chart library (Vega) then, not after the first heatmap has
arrived (``benchmarks/cold_start.py`` measures it: docs/app.md, "Cold start"). A link to another
model waits at most the few seconds the warm start takes, once per server. ``streamlit run
dashboard/app.py`` starts no thread, and both waits return at once.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("dashboard")
_done = threading.Event()
_started = threading.Event()
WAIT_S = 300.0


def warm() -> None:
    """Import the app's modules and compute the default view into the app's caches."""
    try:
        from probes import threads

        # torch's threads for an app, as the app's run sets them; choosing watches the machine for a quarter
        # of a second, so it runs beside the imports and the load, and is done before the first pass
        choosing = threading.Thread(target=threads.apply, args=("app",), name="warm-start threads")
        choosing.start()
        import dashboard.app_pages
        import dashboard.app_pages.explore.view  # noqa: F401
        from dashboard.core import models, questions, trace, ui  # noqa: F401
        from dashboard.core.state import STORIES, ViewState

        v = ViewState()
        allowed = models.allowed_models()
        if allowed is None or v.model in allowed:
            inp = models.Input(v.model, v.text, None, v.source, v.backend, False)
            models.model_of(inp)
            choosing.join()
            n = len(trace.run_info(inp).tokens)
            answer = questions.story(inp)  # the default text has a question: the app opens on the head chosen for it
            layer, head = (answer.layer, answer.head) if answer else (v.layer, v.head)
            story = STORIES.get(v.text.strip())
            if story:  # …on half of its controls: the answer box's evidence, computed once for every session
                layer, head = questions.question_evidence(inp, questions.Asked(*story)).head or (layer, head)
            trace.head(inp, layer, head, (0, n))
        choosing.join()
    except Exception:  # the visitor's own run meets the same problem and shows it in the page
        log.warning("warm start failed; the first visitor's run does the work", exc_info=True)
    finally:
        _done.set()


class _ExpectedNoContext(logging.Filter):
    """The warm start calls the app's cached functions outside any browser's script run, on purpose; Streamlit notes
    each such call in the server's log ("Thread 'warm-start': missing ScriptRunContext! This warning can be
    ignored…"), which only alarms whoever reads it. This drops that note for the warm start's threads alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        warm_start = (record.threadName or "").startswith("warm-start")
        return not (warm_start and "missing ScriptRunContext" in record.getMessage())


NO_CONTEXT_LOGGER = "streamlit.runtime.scriptrunner_utils.script_run_context"  # where Streamlit writes that note
_NO_CONTEXT = _ExpectedNoContext()  # one instance: logging adds a filter already on the logger only once


def start() -> threading.Thread:
    _started.set()
    logging.getLogger(NO_CONTEXT_LOGGER).addFilter(_NO_CONTEXT)
    thread = threading.Thread(target=warm, name="warm-start", daemon=True)
    thread.start()
    return thread


def pending() -> bool:
    """A warm start has begun and not finished."""
    return _started.is_set() and not _done.is_set()


def wait_in_page() -> bool:
    """:func:`wait`, saying so in the page meanwhile (and letting the browser load its chart library). True if it
    drew in the page (a placeholder, left empty)."""
    if not pending():
        return False
    import streamlit as st

    spot = st.empty()
    with spot.container():
        st.caption("Loading the model: the server has just started…")
        st.vega_lite_chart({"mark": "point", "data": {"values": []}}, width=1, height=1)  # fetches Vega now
    wait()
    spot.empty()
    return True


def wait() -> None:
    """Block until the warm start (if one was started) has finished."""
    if _started.is_set() and not _done.wait(WAIT_S):
        log.warning("the warm start has not finished after %.0f s; going on without it", WAIT_S)
