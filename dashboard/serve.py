"""The app with a warm start: ``streamlit run dashboard/serve.py`` (what ``make app`` runs).

The same app as ``streamlit run dashboard/app.py``, served through Streamlit's ``st.App``; loading this
file starts the work of the default view (``dashboard/warm.py``) before the server even listens, so it
runs while the server starts and the first browser loads the page, not after the browser has connected.

SIGTERM (how a host stops a container) ends the server within :data:`GRACE_S` seconds whatever it is doing
(:func:`stop_on_sigterm`).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `streamlit run` from a plain checkout

from dashboard import warm

# the normal shutdown (uvicorn closes the connections, Streamlit stops its sessions) ends well within it, busy or not
# (benchmarks/upload_bombs.py; docs/app.md, "Uploads"); past this the process ends anyway, well inside a host's usual
# 5-10 s before SIGKILL
GRACE_S = 3.0


def stop_on_sigterm(grace: float = GRACE_S) -> None:
    """On SIGTERM, start the server's normal shutdown (the handler already installed: uvicorn's, which ``streamlit
    run`` installs before it imports this file) and end the process ``grace`` seconds later if it is still there.

    The normal shutdown runs on the event loop, which one slow step on it (a long parse, a blocking call) holds up
    for as long as the step lasts, and Python runs its signal handlers between bytecodes of the main thread only.
    So the deadline is kept by faulthandler's watchdog: a thread of C code that needs no interpreter lock to end the
    process (``_exit(1)``), after writing every thread's stack to stderr: what kept the server from stopping. Only
    a C call that holds the lock from before the signal delays the handler, and so the deadline, until it returns;
    the uploads' readers are bounded so that none takes more than a second (benchmarks/upload_bombs.py)."""
    if threading.current_thread() is not threading.main_thread():  # handlers are the main thread's (tests import)
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        faulthandler.dump_traceback_later(grace, exit=True)
        if callable(previous):
            previous(signum, frame)
        else:  # no handler before this one: the signal's own effect, the process ends now
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)


stop_on_sigterm()
warm.start()
app = st.App("app.py")
