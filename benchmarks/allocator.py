"""glibc's mmap threshold against memory and time: what ``probes.memory.steady`` trades.

Each case runs in a fresh process with ``PROBES_MMAP_THRESHOLD`` set (0: glibc's own moving threshold) and
``probes.memory.steady()`` called as the app and ``python -m probes`` do; smollm2 is loaded and its weights touched,
then, sampling the resident memory every 10 ms: two traces of the public app's 2,000-character story (442 tokens;
a lazy trace within 64 MiB of probabilities, as the public app makes it), then path patching of 6 senders (0.0–0.5)
into 18.6's key with the she → he text, within a 96 MiB budget (the public app's). The table gives the peak and
the level at the end above the loaded model, and each part's time; ``--repeats`` runs every case that many times
(interleaved: a busy machine slows them alike).

    .venv/bin/python benchmarks/allocator.py [--repeats 2] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import publish  # noqa: E402

MIB = 2**20
THRESHOLDS = (0, 2**20, 2**18)  # glibc's moving threshold; 1 MiB; 256 KiB (probes.memory.MMAP_THRESHOLD)


def case() -> dict:
    """One case in this process (the child): the figures as a dict."""
    import threading
    import time

    import psutil
    import torch
    from public_memory import story

    from probes import memory, run
    from probes.effects import path_patching
    from probes.models import load

    memory.steady()
    model = load("smollm2")
    with torch.inference_mode():
        for tensor in model.hf.state_dict().values():
            float(tensor.sum())  # every weight resident before the level is read
    read = lambda: psutil.Process().memory_info().rss  # noqa: E731
    text, corrupted = story()
    base = read()
    peak, done = [base], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], read())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    for _ in range(2):
        run(model, text, logits=False, attention_budget=64 * MIB)
    t1 = time.perf_counter()
    path_patching.path_patch(model, text, corrupted, (18, 6), "k", senders=[(0, h) for h in range(6)], budget=96 * MIB)
    t2 = time.perf_counter()
    done.set()
    sampler.join()
    return {"peak": (peak[0] - base) / MIB, "end": (read() - base) / MIB, "traces": t1 - t0, "patch": t2 - t1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--case", action="store_true", help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.case:
        print(json.dumps(case()))
        return
    rows = []
    for _ in range(args.repeats):
        for threshold in THRESHOLDS:
            env = os.environ | {"PROBES_MMAP_THRESHOLD": str(threshold), "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, __file__, "--case"], env=env, capture_output=True, text=True,
                                 check=True)
            rows.append((threshold, json.loads(out.stdout.strip().splitlines()[-1])))
    lines = ["glibc's mmap threshold: smollm2, the 2,000-character story (442 tokens), two lazy traces then path "
             "patching of 6 senders into 18.6 within 96 MiB; resident memory above the loaded model (MiB) and time, "
             "each run in a fresh process, one torch thread (`.venv/bin/python benchmarks/allocator.py --out "
             "benchmarks/results`)",
             "| threshold | peak | at the end | two traces | path patching |", "|---|---|---|---|---|"]
    for threshold, got in rows:
        name = "glibc's own (moving)" if threshold == 0 else f"{threshold // 1024:,} KiB"
        lines.append(f"| {name} | {got['peak']:,.0f} | {got['end']:,.0f} | {got['traces']:.1f} s | "
                     f"{got['patch']:.1f} s |")
    publish("\n".join(lines), args.out, "allocator.txt")


if __name__ == "__main__":
    main()
