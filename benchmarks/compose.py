"""Composition scores of every head pair of smollm2 (30 layers × 9 heads, 270 heads, D = 576, d = 64), from the
weights alone: the time per kind (Q, K, V) in float64 and float32, with the random baseline, and the largest
K-composition scores. Goal: all pairs of one kind in ≤ 30 s on a 2-core machine.

    .venv/bin/python benchmarks/compose.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report import publish  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write compose.txt into this folder")
    parser.add_argument("--model", default="smollm2")
    args = parser.parse_args()

    import torch

    from probes.effects.compose import HeadMaps, composition_scores, notes
    from probes.models import load
    from probes.scratch import build

    model = load(args.model)
    net = build(model)
    start = time.perf_counter()
    HeadMaps(net)
    gather = time.perf_counter() - start
    lines = [f"composition scores, {model.name}: {model.n_layers} layers × {model.n_heads} heads "
             f"({model.n_kv_heads} key/value heads), {torch.get_num_threads()} threads "
             f"(os.cpu_count() = {os.cpu_count()}); {'; '.join(notes(model))}",
             f"gathering the weights (float64): {gather:.2f} s", "",
             "time for all pairs (every earlier head → every head from layer 1), 20 baseline draws:",
             f"{'kind':<6} {'dtype':<8} {'pairs':>7} {'seconds':>8} {'baseline':>16}"]
    frames = {}
    for dtype in (torch.float64, torch.float32):
        for kind in "qkv":
            start = time.perf_counter()
            frame = composition_scores(net, kind, dtype=dtype)
            took = time.perf_counter() - start
            frames[kind, dtype] = frame
            lines.append(f"{kind.upper():<6} {str(dtype).removeprefix('torch.'):<8} {len(frame):>7} {took:>8.2f} "
                         f"{frame.baseline_mean.iloc[0]:>8.4f} ± {frame.baseline_sd.iloc[0]:.4f}")
    all_kinds = time.perf_counter()
    composition_scores(net, "all")
    lines.append(f"all three kinds in one call (float64): {time.perf_counter() - all_kinds:.2f} s")
    gap = max(float((frames[k, torch.float64].score - frames[k, torch.float32].score).abs().max()) for k in "qkv")
    lines.append(f"largest |float64 − float32| score: {gap:.2g}")
    lines += ["", "the largest K-composition scores (float64):"]
    k = frames["k", torch.float64].sort_values("score", ascending=False).head(10)
    for row in k.itertuples():
        z = (row.score - row.baseline_mean) / row.baseline_sd
        lines.append(f"  {row.sender_layer}.{row.sender_head} → {row.receiver_layer}.{row.receiver_head}  "
                     f"{row.score:.4f}  ({z:+.1f} sd)")
    publish("\n".join(lines), args.out, "compose.txt")


if __name__ == "__main__":
    main()
