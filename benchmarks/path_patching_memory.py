"""Library path patching's peak memory on smollm2: 162 senders (layers 0–17) into head 18.6's key.

The issue's reference is TransformerLens: the same patch with hooks (the senders' outputs on the corrupted text
added to the receiver's key input, one batch of senders per pass) peaks at 1.9 GB resident on smollm2 (given in
issue 40; TransformerLens cannot load the offline GGUF checkpoint here, so it is quoted, not measured). This runs
``probes.effects.path_patching.path_patch`` exactly as ``python -m probes patch --model smollm2 --receiver 18.6
--senders all`` does (glibc's mmap threshold fixed first, :func:`probes.memory.steady`), each case in a fresh process
(so one case's freed memory does not hide the next one's), sampling the process's resident memory every millisecond,
and prints: the level once the model is loaded, the peak while patching, and the peak above the loaded level. The
cases:

* **induction**: docs/head-effects.md's setup (Path patching), 25 random tokens then the same 25 again (clean), the
  first half drawn anew (corrupted), the mean weight on the induction cells reported (``circuit_smollm2.py``);
* **2,000 characters**: the public app's longest text, its pronouns she → he in the corrupted one.

``--budget MIB``: the bytes one pass may hold (``path_patch(budget=...)``; default the library's).

    .venv/bin/python benchmarks/path_patching_memory.py [--budget MIB] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import publish  # noqa: E402

MIB = 2**20
GOAL_MIB = 1.9e9 / MIB  # TransformerLens hooks, the same patch (issue 40)
LENGTH = 25
CASES = ("induction", "2,000 characters")
STORY = ("The teacher walked to the old river because she wanted to see the city. She wrote a letter to her "
         "brother, and she gave it to the man at the window. ")


def long_texts(chars: int = 2000) -> tuple[str, str]:
    """A text of at most ``chars`` characters, and the same with each 'she'/'She' as 'he'/'He' (one token each)."""
    text = (STORY * (chars // len(STORY) + 1))[:chars]
    text = text[:text.rfind(". ") + 1]
    return text, text.replace("she ", "he ").replace("She ", "He ")


def case(name: str, budget: int | None) -> dict:
    """One case in this process: the numbers, as a dict."""
    from dataclasses import replace

    import torch
    from forward import PeakRSS, rss

    import probes
    from probes import memory
    from probes.effects.path_patching import path_patch
    from probes.heads.induction import repeated_tokens

    memory.steady()  # as python -m probes does when it starts (PROBES_MMAP_THRESHOLD=0: glibc's own threshold)
    torch.set_num_threads(2)
    model = probes.load("smollm2")
    if name == "induction":
        clean = repeated_tokens(model, 1, LENGTH, seed=0)
        other = repeated_tokens(model, 1, LENGTH, seed=1)
        start = clean.input_ids.shape[1] - 2 * LENGTH
        ids = clean.input_ids.clone()
        ids[0, start:start + LENGTH] = other.input_ids[0, start:start + LENGTH]
        corrupted = replace(clean, input_ids=ids)
        cells = [(start + LENGTH + i, start + i + 1) for i in range(LENGTH - 1)]
    else:
        text, changed = long_texts()
        clean, corrupted, cells = model.encode(text), model.encode(changed), None
    loaded = rss()
    t = time.perf_counter()
    with PeakRSS() as mem:
        got = path_patch(model, clean, corrupted, (18, 6), into="k", cells=cells, budget=budget)
    return {"tokens": int(clean.input_ids.shape[1]), "senders": len(got.frame), "loaded": loaded,
            "peak": mem.peak, "seconds": time.perf_counter() - t}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, help="MiB one pass may hold (default: the library's)")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # one case, in a child process
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    budget = None if args.budget is None else int(args.budget * MIB)
    if args.case:
        print(json.dumps(case(args.case, budget)))
        return
    from probes.effects.path_patching import WORK_BUDGET

    lines = [f"Library path patching on smollm2, 162 senders (layers 0–17) into 18.6's key, each case in a fresh "
             f"process; budget per pass {(budget or WORK_BUDGET) / MIB:,.0f} MiB; mmap threshold "
             f"{os.environ.get('PROBES_MMAP_THRESHOLD') or 'probes.memory default (256 KiB)'}; resident memory (MiB) "
             "(`.venv/bin/python benchmarks/path_patching_memory.py --out benchmarks/results`)",
             "| text | tokens | senders | model loaded | peak patching | above loaded | goal (TransformerLens hooks) "
             "| time |",
             "|---|---|---|---|---|---|---|---|"]
    for name in CASES:
        cmd = [sys.executable, __file__, "--case", name] + ([] if args.budget is None else ["--budget",
                                                                                             str(args.budget)])
        got = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        peak = got["peak"] / MIB
        lines.append(f"| {name} | {got['tokens']} | {got['senders']} | {got['loaded'] / MIB:,.0f} | {peak:,.0f} | "
                     f"{(got['peak'] - got['loaded']) / MIB:,.0f} | ≤ {GOAL_MIB:,.0f} "
                     f"({'met' if peak <= GOAL_MIB else 'missed'}) | {got['seconds']:.0f} s |")
    publish("\n".join(lines), args.out, "path_patching_memory.txt")


if __name__ == "__main__":
    main()
