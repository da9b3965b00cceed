"""A command killed mid-run: what the resume tests of ``profile`` (one process, or on Ray) start from."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def killed_after_chunks(args: list[str], out: Path, chunks: int, timeout: float, **popen) -> int:
    """Run the command ``args``, SIGKILL it once ``chunks`` chunks of ``OUT.partial/`` are checkpointed (or when it has
    ended, or after ``timeout`` seconds: a guard against a hang, to be generous, since a busy machine is many times
    slower), and return how many were."""
    done = lambda: len(list(out.parent.glob(f"{out.name}.partial/*/chunk-*.csv")))  # noqa: E731
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)
    deadline = time.monotonic() + timeout
    while done() < chunks and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    return done()
