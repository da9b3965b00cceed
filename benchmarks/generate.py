"""Generation with the KV cache: time per new token against the context length, cached against
recomputing the whole prefix, and the bytes the cache holds (measured on its tensors and by the formula
2 × layers × kv_heads × d_head × tokens × 4).

On the offline SmolLM2-135M (30 layers, 9 query heads reading 3 key/value heads, fp32) on the CPU: for
each context length, a prefill of that many random tokens, then 16 cached steps of one token (median);
and the whole prefix run again for one token (median of 3 after a warm-up). Goals (issue 10): the cached
step flat in context within 2× from 128 to 2,048 tokens, and ≥ 5× faster than recompute at 1,024.

    .venv/bin/python benchmarks/generate.py [--model smollm2] [--contexts 128 512 1024 2048] [--out benchmarks/results]

Writes ``OUT/generate.txt`` (the table) and ``OUT/generate.json`` (the rows; the app's Cost page reads the committed
ones, ``--out benchmarks/results``); without ``--out``, OUT is a new temporary folder (printed).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import out_folder, publish  # noqa: E402  (benchmarks/, this script's folder)

import probes  # noqa: E402
from probes import cost  # noqa: E402


def table(frame, model) -> str:
    cached = frame[frame.path == cost.CACHED].set_index("tokens")
    full = frame[frame.path == cost.RECOMPUTE].set_index("tokens")
    lines = [f"{model.name}: {model.n_layers} layers, {model.n_heads} query heads, {model.n_kv_heads} key/value "
             f"heads, d_head {model.d_head}; {torch.get_num_threads()} threads, {platform.processor() or 'CPU'}",
             "| context | cached step | recompute | speed-up | cache (measured) | cache (formula) | without GQA |",
             "|---|---|---|---|---|---|---|"]
    for n in cached.index:
        c, r = cached.loc[n, "seconds_per_token"], full.loc[n, "seconds_per_token"]
        lines.append(f"| {n:,} | {c * 1e3:.1f} ms | {r * 1e3:,.0f} ms | {r / c:.1f}× | "
                     f"{cached.loc[n, 'cache_bytes'] / 2**20:.1f} MiB | {cached.loc[n, 'formula_bytes'] / 2**20:.1f} MiB | "
                     f"{cost.kv_cache_bytes(model, n, grouped=False) / 2**20:.1f} MiB |")
    first, last = cached.index.min(), cached.index.max()
    flat = cached.loc[last, "seconds_per_token"] / cached.loc[first, "seconds_per_token"]
    lines.append(f"\ncached step at {last:,} ÷ at {first:,}: {flat:.2f}× (goal ≤ 2×)")
    if 1024 in cached.index:
        lines.append(f"speed-up at 1,024: {full.loc[1024, 'seconds_per_token'] / cached.loc[1024, 'seconds_per_token']:.1f}× "
                     "(goal ≥ 5×)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 1024, 2048])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for generate.txt and generate.json (default: a new temporary folder, printed)")
    args = parser.parse_args()
    model = probes.load(args.model, device="cpu")
    frame = cost.measure_decoding(model, args.contexts, steps=args.steps)
    text = table(frame, model)
    out = out_folder(args.out)
    publish(text, out, "generate.txt")
    (out / "generate.json").write_text(json.dumps(dict(model=model.name, rows=frame.to_dict("records")), indent=1))


if __name__ == "__main__":
    main()
