"""A stalled server for ``tests/dashboard/test_serve.py``: Python imports this module as it starts a process whose
PYTHONPATH begins with this folder. Once the file ``$STALL_FLAG`` exists, the server's event loop (the main thread,
which carries out the normal shutdown) runs one slow step of ``$STALL_S`` seconds (600 by default), in Python, as
a long parse would: so a SIGTERM sent then finds the normal shutdown held up for as long as the step lasts."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

if os.environ.get("STALL_FLAG"):  # only in the server that test_serve.py starts
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout, as dashboard/serve.py adds it

    import asyncio

    from dashboard import warm

    FLAG = Path(os.environ["STALL_FLAG"])
    STALL_S = float(os.environ.get("STALL_S", "600"))
    _start = warm.start

    def stall() -> None:
        end = time.monotonic() + STALL_S
        x = 0
        while time.monotonic() < end:  # bytecodes: the main thread runs Python's signal handlers between them
            x = (x + 1) % 1_000_003

    def watch(loop) -> None:
        if FLAG.exists():
            stall()
        else:
            loop.call_later(0.1, watch, loop)

    def start():
        """The warm start, and the watch for the flag on the event loop (serve.py is imported on it)."""
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, watch, loop)
        return _start()

    warm.start = start
