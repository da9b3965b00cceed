"""dashboard/serve.py, what ``make app`` runs: SIGTERM ends the server whatever it is doing (issue 40). A real
server (``streamlit run dashboard/serve.py`` on a free loopback port) has its event loop, the thread that carries
out the normal shutdown, held up by a slow step (``stop_hooks/sitecustomize.py``: 600 s of Python); SIGTERM is sent,
and the process must be gone before a deadline. The deadline is generous (a liveness check on a busy machine, not a
speed test): the mechanism ends the process ``serve.GRACE_S`` (3 s) after the signal by design, and
``benchmarks/upload_bombs.py`` measures it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from browser import started_server

HOOKS = Path(__file__).resolve().parent / "stop_hooks"
DEADLINE_S = 600  # a hang guard on a busy machine: the mechanism itself acts after serve.GRACE_S


def _answers(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


def test_sigterm_ends_a_server_whose_event_loop_is_held_up(tmp_path):
    flag = tmp_path / "stall"
    server, url = started_server(tmp_path, {"STALL_FLAG": str(flag), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))})
    deadline = time.monotonic() + DEADLINE_S
    try:
        flag.touch()
        while _answers(url):  # the stub sees the flag on the event loop's next turn (every 0.1 s), however busy
            assert time.monotonic() < deadline, "the stub did not hold up the event loop"
            time.sleep(0.5)
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server still runs {DEADLINE_S} s after SIGTERM")
        assert code != 0  # ended by the deadline, not a normal exit
        assert "stall" in (tmp_path / "server.log").read_text()  # and it says where it was held up
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
