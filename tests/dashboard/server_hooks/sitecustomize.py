"""Counted, slowed steps in a test's Streamlit server: Python imports this module as it starts a process whose
PYTHONPATH begins with this folder, which ``tests/dashboard/test_closed_tab.py`` gives the public server it starts.

Every long loop of the app calls the step that ``dashboard.core.budgets.watched`` returns between its parts (a head
of the effects grid, a pass of path patching), and that step is where a closed tab's run stops. Here each such step
of a script run (a browser's session; the warm start's are left alone) is written to the file ``$CLOSED_TAB_STEPS`` as
one JSON line: ``{"session": id, "by": "ablation", "step": [done, total]}`` when the step let the loop go on (``by``:
the app's function whose loop it is, in ``dashboard/core`` or a page's ``data.py``), the same with ``"stopped":
"StopException"`` (the exception's name) when it stopped it. A step that goes on then sleeps ``$CLOSED_TAB_STEP_S``
seconds (1 by default), so that a grid takes minutes however fast the machine: the test closes its tab long before
the end and reads, not times, what happened after. The public bound (``PUBLIC_SECONDS``, proven with an injected
clock in ``tests/dashboard/core/test_budgets.py``) is lifted to a day here, so that only the closed tab can stop the
work this test watches.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

if os.environ.get("CLOSED_TAB_STEPS"):  # only in the server that test_closed_tab.py starts
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout, as dashboard/serve.py adds it

    from streamlit.runtime.scriptrunner import get_script_run_ctx

    from dashboard.core import budgets

    LOG = Path(os.environ["CLOSED_TAB_STEPS"])
    STEP_S = float(os.environ.get("CLOSED_TAB_STEP_S", "1"))
    _lock = threading.Lock()
    _watched = budgets.watched

    def _write(row: dict) -> None:
        with _lock, LOG.open("a") as out:
            out.write(json.dumps(row) + "\n")

    def watched(progress=None, advice: str | None = None):
        """``budgets.watched``'s step, written down and slowed (in a browser's session)."""
        step = _watched(progress, advice)
        ctx = get_script_run_ctx(suppress_warning=True)
        if ctx is None:  # the warm start: no browser, nothing to watch
            return step
        row = {"session": ctx.session_id, "by": sys._getframe(1).f_code.co_name}

        def counted(*args) -> None:
            shown = [a if isinstance(a, (int, float, str)) else repr(a) for a in args]
            try:
                step(*args)
            except BaseException as exc:  # st.stop's StopException, TookTooLong, anything else
                _write({**row, "stopped": type(exc).__name__, "step": shown})
                raise
            _write({**row, "step": shown})
            time.sleep(STEP_S)

        return counted

    budgets.watched = watched
    budgets.PUBLIC_SECONDS = 24 * 3600
