"""Generation with the KV cache: time per new token against the context length, cached against
recomputing the whole prefix, and the bytes the cache holds (measured on its tensors and by the formula
2 × layers × kv_heads × d_head × tokens × 4).

On the offline SmolLM2-135M (30 layers, 9 query heads reading 3 key/value heads, fp32) on the CPU: for
each context length, a prefill of that many random tokens, then 16 cached steps of one token (median);
and the whole prefix run again for one token (after a warm-up); ``--rounds`` rounds of both, the two taking turns
at each context in every round: median times, and each round's own speed-up. Goals (issue 10): the cached
step flat in context within 2× from 128 to 2,048 tokens, and ≥ 5× faster than recompute at 1,024.

    .venv/bin/python benchmarks/generate.py [--model smollm2] [--contexts 128 512 1024 2048] [--out benchmarks/results]

Writes ``OUT/generate.txt`` (the table) and ``OUT/generate.json`` (the rows; the app's Cost page reads the committed
ones, ``--out benchmarks/results``); without ``--out``, OUT is a new temporary folder (printed).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import out_folder, publish, summary  # benchmarks/, this script's folder

import probes
from probes import cost


def rounds(model, contexts: list[int], steps: int, count: int):
    """``cost.measure_decoding`` ``count`` times, the two ways taking turns at each context in every round (a cached
    prefill and ``steps`` steps, then the prefix again: one warm-up and one timed pass): the median rows (the
    columns the app's Cost page reads) and each round's recompute ÷ cached step at each context."""
    import pandas as pd

    frames = [cost.measure_decoding(model, contexts, steps=steps, repeats=1) for _ in range(count)]
    every = pd.concat(frames)
    frame = every.groupby(["tokens", "path"], sort=False, as_index=False).agg(
        seconds_per_token=("seconds_per_token", "median"), cache_bytes=("cache_bytes", "first"),
        formula_bytes=("formula_bytes", "first"))
    speedups = {}
    for n in contexts:
        per = [f.set_index(["tokens", "path"]).seconds_per_token for f in frames]
        speedups[n] = [x[n, cost.RECOMPUTE] / x[n, cost.CACHED] for x in per]
    return frame, speedups


def table(frame, model, speedups: dict[int, list[float]]) -> str:
    cached = frame[frame.path == cost.CACHED].set_index("tokens")
    full = frame[frame.path == cost.RECOMPUTE].set_index("tokens")
    lines = [f"{model.name}: {model.n_layers} layers, {model.n_heads} query heads, {model.n_kv_heads} key/value "
             f"heads, d_head {model.d_head}; {torch.get_num_threads()} threads, {platform.processor() or 'CPU'}",
             f"{len(next(iter(speedups.values())))} rounds, cached and recompute taking turns at each context; times "
             "are medians over the rounds, the speed-up each round's own: median (min–max: every round)",
             "| context | cached step | recompute | speed-up, per round | cache (measured) | cache (formula) | "
             "without GQA |",
             "|---|---|---|---|---|---|---|"]
    for n in cached.index:
        c, r = cached.loc[n, "seconds_per_token"], full.loc[n, "seconds_per_token"]
        lines.append(f"| {n:,} | {c * 1e3:.1f} ms | {r * 1e3:,.0f} ms | {summary(speedups[n])} | "
                     f"{cached.loc[n, 'cache_bytes'] / 2**20:.1f} MiB | "
                     f"{cached.loc[n, 'formula_bytes'] / 2**20:.1f} MiB | "
                     f"{cost.kv_cache_bytes(model, n, grouped=False) / 2**20:.1f} MiB |")
    first, last = cached.index.min(), cached.index.max()
    flat = cached.loc[last, "seconds_per_token"] / cached.loc[first, "seconds_per_token"]
    lines.append(f"\ncached step at {last:,} ÷ at {first:,}: {flat:.2f}× (goal ≤ 2×)")
    if 1024 in cached.index:
        lines.append(f"speed-up at 1,024: {statistics.median(speedups[1024]):.1f}× (median of the rounds; goal ≥ 5×)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 1024, 2048])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the two ways, taking turns")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for generate.txt and generate.json (default: a new temporary folder, printed)")
    args = parser.parse_args()
    model = probes.load(args.model, device="cpu")
    frame, speedups = rounds(model, args.contexts, args.steps, args.rounds)
    text = table(frame, model, speedups)
    out = out_folder(args.out)
    publish(text, out, "generate.txt")
    (out / "generate.json").write_text(json.dumps(dict(model=model.name, rows=frame.to_dict("records")), indent=1))


if __name__ == "__main__":
    main()
