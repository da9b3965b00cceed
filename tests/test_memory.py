"""probes.memory: glibc's mmap threshold fixed, so that large freed tensors go back to the system."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from probes import memory
from probes.errors import BadOption

# A child that keeps up to four blocks of 1–8 MiB alive at a time, each made after a small block that stays (a
# long computation's temporaries, between results it keeps), 300 of them, then frees them all and prints how far
# its resident memory stayed above where it began.
CHURN = textwrap.dedent("""
    import random
    import torch
    from probes import memory
    steady = memory.steady()
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    draw, kept, live, base = random.Random(0), [], [], rss()
    for _ in range(300):
        live.append(torch.ones(draw.randrange(2**18, 2**21)))
        kept.append(torch.ones(1024))
        if len(live) > 4:
            live.pop(draw.randrange(len(live)))
    live.clear()
    print(steady, (rss() - base) / 2**20)
""")


def _churn(threshold: str) -> tuple[str, float]:
    env = {"PROBES_MMAP_THRESHOLD": threshold, "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", CHURN], env=env, capture_output=True, text=True, check=True)
    steady, grown = out.stdout.split()
    return steady, float(grown)


@pytest.mark.skipif(memory._glibc() is None, reason="glibc's allocator only (elsewhere steady() changes nothing)")
def test_freed_large_tensors_go_back_to_the_system_once_steady():
    # glibc's moving threshold: once a large block is freed, the next ones come from the heap, between kept small
    # blocks, and the heap keeps 95–145 MiB it cannot give back (the heap's state before the loop decides which);
    # fixed at 256 KiB, each is mapped and unmapped (under 3 MiB left)
    moving, held = _churn("0")
    fixed, kept = _churn(str(memory.MMAP_THRESHOLD))
    assert (moving, fixed) == ("False", "True")
    assert kept < 20 < 50 < held, (held, kept)


def test_the_threshold_setting(monkeypatch):
    monkeypatch.delenv(memory.ENV, raising=False)
    assert memory.threshold_setting() == memory.MMAP_THRESHOLD == 256 * 1024
    monkeypatch.setenv(memory.ENV, "0")
    assert memory.threshold_setting() is None  # glibc's own
    monkeypatch.setenv(memory.ENV, " 1048576 ")
    assert memory.threshold_setting() == 2**20
    for bad in ("256k", "-1", "１２", "²", "1e6"):
        monkeypatch.setenv(memory.ENV, bad)
        with pytest.raises(BadOption, match="PROBES_MMAP_THRESHOLD=.* is not a number of bytes: give one in digits"):
            memory.threshold_setting()


def test_a_malformed_threshold_is_one_line_and_exit_2_from_the_cli():
    env = {"PROBES_MMAP_THRESHOLD": "lots", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "probes", "parity", "--text", "hi"], env=env, capture_output=True,
                         text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: PROBES_MMAP_THRESHOLD='lots' is not a number of bytes: give one in digits (0 leaves glibc's threshold)"]
