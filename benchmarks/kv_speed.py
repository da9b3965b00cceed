"""Streamed perplexity against the full cached pass: time and the KV bytes held, on smollm2.

The same running text as ``kv_streaming.py`` (EWT dev sentences, whole ones up to ``--tokens`` tokens) is decoded
token by token by:

* ``cached pass``: the project's full cached decoding, ``probes.scratch.generate.replay(net, m, ids, 1)`` under
  ``torch.inference_mode()`` (the reference; it also keeps each step's attention rows and logits, as it always does);
* ``stream`` (:func:`probes.kv.stream.stream`) with ``full``, ``window:B``, ``h2o:B``, ``snapkv:B``, ``tova:B``;
* ``… masked``: ``stream(..., method="masked")`` with ``full``, ``h2o:B`` and ``snapkv:B``, the same run one layer at
  a time (what the app runs).

Contenders alternate: round 1 runs each once, round 2 each again in an order rotated by one, and so on (a machine
that gets busier slows every contender alike). Each round's time is divided by that round's cached pass; the table
gives every round's ratio and their median, against the goal: streamed perplexity within 2× the full cached pass's
time. Memory: the KV bytes each cache held at most against the full cache's (the cached pass's, every token).

    PYTHONPATH=. .venv/bin/python benchmarks/kv_speed.py [--model smollm2] [--tokens 2048] [--budget 256] \\
        [--rounds 2] [--out DIR]

A long run: each contender takes minutes at 2,048 tokens on two CPU cores (the table's last line says the run's
total: ``benchmarks/results/kv_speed.txt``). Writes ``DIR/kv_speed.txt`` (default DIR: a fresh temporary folder,
printed; the committed table only with ``--out benchmarks/results``).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import alternate, out_folder, publish, ratios  # noqa: E402

from probes.kv.policies import parse  # noqa: E402
from probes.kv.stream import decoder_network, stream, token_ids  # noqa: E402
from probes.kv.texts import ewt_text  # noqa: E402
from probes.models import load  # noqa: E402
from probes.scratch.generate import cache_bytes, replay  # noqa: E402

MIB = 2**20
CACHED = "cached pass"
MASKED = "masked"  # a contender "<policy> masked": stream(..., method="masked"), the run one layer at a time
GOAL = 2.0


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f}/{five:.2f}"


def cached_pass(model, net, ids: torch.Tensor) -> dict:
    """The full cached decoding, timed; its perplexity from its logits (step t's logits predict token t + 1)."""
    t0 = time.perf_counter()
    with torch.inference_mode():
        _, logits = replay(net, model, ids, 1)
    seconds = time.perf_counter() - t0
    loss = F.cross_entropy(logits[:-1].double(), ids[0, 1:]).item()
    full = cache_bytes(model.n_layers, model.n_kv_heads, model.d_head, ids.shape[1], net.lm_head.element_size())
    return dict(seconds=seconds, ppl=math.exp(loss), kv=full, full_kv=full)


def streamed(model, text: str, name: str) -> dict:
    """``name``: a policy, streamed token by token, or "<policy> masked": the same run one layer at a time."""
    policy, _, how = name.partition(" ")
    t0 = time.perf_counter()
    s = stream(model, text, parse(policy), method="masked" if how == MASKED else "streamed")
    seconds = time.perf_counter() - t0
    return dict(seconds=seconds, ppl=s.perplexity, kv=s.kv_bytes, full_kv=s.full_kv_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--budget", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for kv_speed.txt (default: a new temporary folder, printed)")
    args = parser.parse_args()
    out = out_folder(args.out)
    print(f"results will go to {out / 'kv_speed.txt'}", flush=True)
    t_start = time.perf_counter()
    start_load = load_text()

    model = load(args.model)
    net = decoder_network(model)
    text = ewt_text(model, args.tokens)
    ids = token_ids(model, text)
    n = ids.shape[1]
    b = args.budget
    contenders = [CACHED, "full", f"window:{b}", f"h2o:{b}", f"snapkv:{b}", f"tova:{b}", f"full {MASKED}",
                  f"h2o:{b} {MASKED}", f"snapkv:{b} {MASKED}"]
    print(f"text: {n:,} tokens; load {start_load}", flush=True)
    runs: dict[str, list[dict]] = {c: [] for c in contenders}

    def contender(name: str):
        def go() -> None:
            before = load_text()
            row = cached_pass(model, net, ids) if name == CACHED else streamed(model, text, name)
            row["load"] = f"{before} → {load_text()}"
            runs[name].append(row)
            print(f"round {len(runs[name])}: {name}: {row['seconds']:.1f} s ({row['seconds'] / n * 1e3:.0f} ms a "
                  f"token), perplexity {row['ppl']:.3f}, load {row['load']}", flush=True)
        return go

    # every contender once a round, each round in an order rotated by one (report.alternate)
    alternate({name: contender(name) for name in contenders}, args.rounds)
    per_round = ratios({name: [row["seconds"] for row in rows] for name, rows in runs.items()}, CACHED)

    lines = [f"{model.name}: {model.n_layers} layers, {model.n_heads} query heads, {model.n_kv_heads} key/value heads; "
             f"{torch.get_num_threads()} threads, {platform.processor() or 'CPU'}",
             f"text: EWT dev sentences, {n:,} tokens, decoded token by token; budget {b}; {args.rounds} rounds, "
             "contenders alternating (each round in an order rotated by one)",
             "",
             "| contender | perplexity | KV held (MiB) | full KV (MiB) | held ÷ full | seconds per round | ms a token "
             "(median) | ÷ cached pass, per round | median ÷ cached pass | within 2× |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in contenders:
        rows = runs[name]
        seconds = [row["seconds"] for row in rows]
        median = statistics.median(per_round[name])
        first = rows[0]
        lines.append(f"| {name} | {first['ppl']:.3f} | {first['kv'] / MIB:.1f} | {first['full_kv'] / MIB:.1f} | "
                     f"{first['kv'] / first['full_kv']:.3f} | {' / '.join(f'{s:.0f}' for s in seconds)} | "
                     f"{statistics.median(seconds) / n * 1e3:.0f} | "
                     f"{' / '.join(f'{x:.2f}×' for x in per_round[name])} | "
                     f"{median:.2f}× | {'yes' if median <= GOAL else 'no'} |")
    lines += ["", "load average (1/5 min) before → after each run:"]
    for name in contenders:
        lines.append(f"  {name}: " + "; ".join(row["load"] for row in runs[name]))
    stream_full = runs["full"][0]["ppl"]
    lines += ["", f"perplexity: cached pass {runs[CACHED][0]['ppl']:.6f}, stream full {stream_full:.6f} (the same "
              "decoding, two code paths)",
              f"goal: streamed perplexity within {GOAL:g}× the full cached pass's time (median over rounds)",
              f"total {time.perf_counter() - t_start:.0f} s; load {start_load} at the start, {load_text()} at the end"]
    publish("\n".join(lines), out, "kv_speed.txt")


if __name__ == "__main__":
    main()
