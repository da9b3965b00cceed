"""``python -m probes kv`` as a user runs it, a layer at a time (the default) against token by token, and streamed
decoding per token beside Hugging Face's cached decoding (issue 61, item 3).

(a) **The command**: ``python -m probes kv --model smollm2 --ewt TOKENS --policies P --json`` in a fresh process, once
with ``--method layers`` and once with ``--method stream`` (the command's only method before), each choosing its own
threads (``torch threads: …``, its last line on stderr, is in the table), the two taking turns round by round. Goal:
2,000 tokens × 5 policies (the command's default policies) in ≤ 2 minutes, the model's load included. The same
perplexities from both methods are checked (fp32: within 1e-4 relative).

(b) **Per token**, in this process, one thread: ``stream(model, text, full, method="streamed")`` (the cache that
forgets, holding everything) and ``window:W`` against Hugging Face's cached decoding of the same tokens (the model's
own ``hf`` module, eager attention as probes loads it, one token a step through ``past_key_values`` under
``torch.inference_mode()``, each step's logits scored as the stream scores them), ``--rounds`` rounds alternating.
Goal: streamed ≤ 1.2× Hugging Face per token (median of the rounds' ratios).

    PYTHONPATH=. .venv/bin/python benchmarks/kv_cli.py [--tokens 2000] [--decode-tokens 512] [--rounds 2] \\
        [--stream-policies all|N] [--out DIR]

``--stream-policies 1`` runs (a)'s token-by-token command on the first policy only (and scales its time by the number
of policies, said so in the table; 0: not at all): the full run is many minutes on two busy cores. Beside each
command's wall time, its CPU time (user + system, from ``getrusage``): on a machine busy with other work the wall
time is many times the CPU time, which is about what the run takes alone on one thread. Writes ``DIR/kv_cli.txt``
(default DIR: a fresh temporary folder, printed; the committed table with ``--out benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import alternate, out_folder, publish, ratios  # noqa: E402

GOAL_COMMAND_S = 120.0  # (a): 2,000 tokens × 5 policies
GOAL_PER_TOKEN = 1.2  # (b): streamed ÷ Hugging Face's cached decoding
FIXED = 2**18  # (a) --threshold both: probes.memory.MMAP_THRESHOLD, what the command fixed before it chose glibc's
FIXED_NAME = "layers, threshold fixed"
HF = "Hugging Face cached"


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


# -- (a) the command -----------------------------------------------------------------------------------------------

def run_command(model: str, tokens: int, policies: str, method: str, threshold: int | None = None) -> dict:
    """One ``python -m probes kv`` in a fresh process: its wall seconds, CPU seconds, peak resident memory, its JSON
    and its thread line. ``threshold``: glibc's mmap threshold fixed at that many bytes (``PROBES_MMAP_THRESHOLD``),
    as every other command fixes it; None: the command's own choice (glibc's moving threshold)."""
    import tempfile

    argv = [sys.executable, "-m", "probes", "kv", "--model", model, "--ewt", str(tokens), "--policies", policies,
            "--method", method, "--json"]
    mine = ("PROBES_THREADS", "OMP_NUM_THREADS", "PROBES_MMAP_THRESHOLD")  # its own choices
    env = {k: v for k, v in os.environ.items() if k not in mine}
    if threshold is not None:
        env["PROBES_MMAP_THRESHOLD"] = str(threshold)
    before = load_text()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own CPU time and peak, not every child's so far
        seconds = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}):\n{stderr}")
    threads = next((line for line in reversed(stderr.splitlines()) if line.startswith("torch threads")), "?")
    return dict(seconds=seconds, cpu=usage.ru_utime + usage.ru_stime, system=usage.ru_stime,
                peak_mib=usage.ru_maxrss / 1024, data=json.loads(stdout), threads=threads,
                load=f"{before} → {load_text()}")


# -- (b) per token -------------------------------------------------------------------------------------------------

def hf_cached(model, ids) -> tuple[float, float]:
    """Hugging Face's cached decoding of ``ids`` one token a step: (seconds, perplexity)."""
    import torch
    import torch.nn.functional as F
    from transformers import DynamicCache

    hf = model.hf
    n = ids.shape[1]
    losses = torch.empty(n - 1, dtype=torch.float64)
    t0 = time.perf_counter()
    with torch.inference_mode():
        cache = DynamicCache()
        for t in range(n):
            out = hf(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True,
                     position_ids=torch.tensor([[t]]), cache_position=torch.tensor([t]))
            cache = out.past_key_values
            if t + 1 < n:
                losses[t] = F.cross_entropy(out.logits[0, -1].double()[None], ids[0, t + 1:t + 2]).item()
    return time.perf_counter() - t0, math.exp(float(losses.mean()))


def streamed(model, text: str, policy: str) -> tuple[float, float]:
    from probes.kv.policies import parse
    from probes.kv.stream import stream

    t0 = time.perf_counter()
    run = stream(model, text, parse(policy), method="streamed")
    return time.perf_counter() - t0, run.perplexity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=2000, help="(a): tokens of the shipped EWT text")
    parser.add_argument("--policies", default=None, help="(a): the command's policies (default: its default five)")
    parser.add_argument("--stream-policies", default="all", help="(a): how many of the policies the token-by-token "
                        "command runs (all, or the first N, its time then scaled to all; 0: none)")
    parser.add_argument("--decode-tokens", type=int, default=512, help="(b): tokens decoded one at a time")
    parser.add_argument("--window", type=int, default=256, help="(b): the window policy's budget")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip", choices=("command", "decoding"), default=None, help="leave out (a) or (b)")
    parser.add_argument("--threshold", choices=("command", "both"), default="command", help="(a): the command's "
                        "own memory choice only (glibc's moving mmap threshold), or also --method layers with the "
                        f"threshold fixed at {FIXED // 1024} KiB, as the other commands and the app fix it "
                        "(PROBES_MMAP_THRESHOLD)")
    parser.add_argument("--out", type=Path, default=None, help="folder for kv_cli.txt (default: a new temporary "
                        "folder, printed)")
    args = parser.parse_args()
    out = out_folder(args.out)
    t_start, start_load = time.perf_counter(), load_text()
    from probes.cli.kv import DEFAULT_POLICIES

    policies = args.policies or DEFAULT_POLICIES
    names = policies.split(",")
    k = len(names) if args.stream_policies == "all" else min(len(names), int(args.stream_policies))  # 0: layers only
    lines = [f"{platform.processor() or 'CPU'}, {os.cpu_count()} CPUs; load (1/5 min) {start_load} at the start", ""]

    if args.skip != "command":
        runs: dict[str, list[dict]] = {"layers": [], "stream": []} if k else {"layers": []}
        if args.threshold == "both":
            runs[FIXED_NAME] = []

        def command(method: str):
            def go() -> None:
                chosen = ",".join(names[:k]) if method == "stream" else policies
                fixed = FIXED if method == FIXED_NAME else None
                row = run_command(args.model, args.tokens, chosen, "layers" if fixed else method, fixed)
                runs[method].append(row)
                print(f"round {len(runs[method])}: --method {method}: {row['seconds']:.1f} s, {row['threads']}, "
                      f"load {row['load']}", flush=True)
            return go

        alternate({m: command(m) for m in runs}, args.rounds)
        scale = len(names) / k if k else 1.0
        layers0 = runs["layers"][0]["data"]
        stream0 = runs["stream"][0]["data"] if k else {"policies": []}
        worst = max((abs(a["perplexity"] / b["perplexity"] - 1)
                     for a, b in zip(layers0["policies"], stream0["policies"], strict=False)), default=math.nan)
        n = layers0["tokens"]
        lines += [f"(a) python -m probes kv --model {args.model} --ewt {args.tokens} ({n:,} tokens) --policies "
                  f"{policies}: a fresh process each, {args.rounds} rounds alternating",
                  "",
                  "| --method | seconds per round (model load included) | median | goal | met | CPU seconds (user + "
                  "system) | of which system | peak MiB | threads (its stderr) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for method, rows in runs.items():
            seconds = [r["seconds"] * (scale if method == "stream" else 1) for r in rows]
            cpu = [r["cpu"] * (scale if method == "stream" else 1) for r in rows]
            median = statistics.median(seconds)
            said = " (scaled from " + ", ".join(names[:k]) + f" × {scale:g})" if method == "stream" and k < len(
                names) else ""
            goal, met = (f"≤ {GOAL_COMMAND_S:.0f} s", "yes" if median <= GOAL_COMMAND_S else "no") \
                if method == "layers" else ("", "")
            system = " / ".join(f"{r['system'] * (scale if method == 'stream' else 1):.1f}" for r in rows)
            peak = " / ".join(f"{r['peak_mib']:.0f}" for r in rows)
            lines.append(f"| {method}{said} | {' / '.join(f'{s:.1f}' for s in seconds)} | {median:.1f} | {goal} | "
                         f"{met} | {' / '.join(f'{c:.1f}' for c in cpu)} | {system} | {peak} | {rows[0]['threads']} |")
        lines += ["", "| policy | perplexity, layers | perplexity, stream | policy seconds, layers | policy seconds, "
                  "stream |", "|---|---|---|---|---|"]
        for i, a in enumerate(layers0["policies"]):
            b = stream0["policies"][i] if i < len(stream0["policies"]) else None
            b_ppl, b_s = ("", "") if b is None else (f"{b['perplexity']:.4f}", f"{b['seconds']:.1f}")
            lines.append(f"| {a['policy']} | {a['perplexity']:.4f} | {b_ppl} | {a['seconds']:.1f} | {b_s} |")
        lines += [f"the same perplexities: worst relative difference {worst:.1e} (fp32)",
                  "load before → after each run: " + "; ".join(f"{m} {r['load']}" for m, rows in runs.items()
                                                               for r in rows), ""]

    if args.skip != "decoding":
        import torch

        from probes.kv.stream import token_ids
        from probes.kv.texts import ewt_text
        from probes.models import load

        torch.set_num_threads(1)
        model = load(args.model)
        text = ewt_text(model, args.decode_tokens)
        ids = token_ids(model, text)
        n = ids.shape[1]
        window = f"window:{args.window}"
        contenders = {HF: lambda: hf_cached(model, ids), "stream full": lambda: streamed(model, text, "full"),
                      f"stream {window}": lambda: streamed(model, text, window)}
        streamed(model, ewt_text(model, 16), "full")  # warm-ups on a short piece: lazy set-up outside the timing
        hf_cached(model, ids[:, :16])
        timed: dict[str, list[tuple[float, float]]] = {c: [] for c in contenders}

        def contender(name: str):
            def go() -> None:
                before = load_text()
                got = contenders[name]()
                timed[name].append(got)
                print(f"round {len(timed[name])}: {name}: {got[0]:.1f} s ({got[0] / n * 1e3:.1f} ms a token), "
                      f"perplexity {got[1]:.4f}, load {before} → {load_text()}", flush=True)
            return go

        alternate({name: contender(name) for name in contenders}, args.rounds)
        per_round = ratios({name: [s for s, _ in rows] for name, rows in timed.items()}, HF)
        lines += [f"(b) decoding {n:,} tokens of EWT text one at a time, teacher-forced and scored, one thread, "
                  f"{args.rounds} rounds alternating (Hugging Face: {model.name}'s own module, eager attention, "
                  "past_key_values)",
                  "",
                  "| contender | perplexity | ms a token (median) | ÷ Hugging Face, per round | median | goal | met |",
                  "|---|---|---|---|---|---|---|"]
        for name, got in timed.items():
            median = statistics.median(per_round[name])
            ms = statistics.median(s for s, _ in got) / n * 1e3
            goal, met = ("", "") if name == HF else (f"≤ {GOAL_PER_TOKEN:g}×", "yes" if median <= GOAL_PER_TOKEN
                                                      else "no")
            lines.append(f"| {name} | {got[0][1]:.4f} | {ms:.1f} | {' / '.join(f'{x:.2f}×' for x in per_round[name])}"
                         f" | {median:.2f}× | {goal} | {met} |")
        lines.append("")
    lines.append(f"total {time.perf_counter() - t_start:.0f} s; load {start_load} at the start, {load_text()} at the "
                 "end")
    publish("\n".join(lines), out, "kv_cli.txt")


if __name__ == "__main__":
    main()
