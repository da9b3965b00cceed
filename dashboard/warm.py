"""The warm start: load what the default view needs while the first browser is still loading the page.

Streamlit runs ``dashboard/app.py`` only once a browser has connected, so without this the first visitor
waits for Python to import torch and transformers, load the model and run it *after* their browser has
loaded the page. ``dashboard/serve.py`` (what ``make app`` runs) calls :func:`start` when the server
starts: a background thread imports the app's modules, loads the offline default and traces the default
sentence into the app's own caches (``dashboard.data``), so the first visitor's run finds them there.

The first script run waits for that thread (:func:`wait`) before it imports anything: two threads that
import the same packages at once can meet in a circular import and see a half-initialised module, and the
run needs the same work anyway. A link to another model waits at most the few seconds the warm start
takes, once per server. ``streamlit run dashboard/app.py`` starts no thread, and :func:`wait` returns at
once.
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

        threads.apply("app")  # before the model's first pass, as the app's run would
        from dashboard import data, ui  # noqa: F401 - the modules the first run imports (probes, altair…)
        from dashboard.state import ViewState
        import dashboard.views.explore  # noqa: F401

        v = ViewState()
        allowed = data.allowed_models()
        if allowed is None or v.model in allowed:
            inp = data.Input(v.model, v.text, None, v.source, v.backend, False)
            n = len(data.run_info(inp).tokens)
            data.head(inp, v.layer, v.head, (0, n))
    except Exception:  # noqa: BLE001 - the visitor's own run meets the same problem and shows it in the page
        log.warning("warm start failed; the first visitor's run does the work", exc_info=True)
    finally:
        _done.set()


def start() -> threading.Thread:
    _started.set()
    thread = threading.Thread(target=warm, name="warm-start", daemon=True)
    thread.start()
    return thread


def wait() -> None:
    """Block until the warm start (if one was started) has finished."""
    if _started.is_set() and not _done.wait(WAIT_S):
        log.warning("the warm start has not finished after %.0f s; going on without it", WAIT_S)
