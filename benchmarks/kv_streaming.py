"""StreamingLLM's attention sinks on smollm2: streamed perplexity through a cache bounded by one budget.

A running text of UD English-EWT's dev sentences (:func:`probes.kv.texts.ewt_text`, whole sentences up to
``--tokens`` tokens; its exact count is printed) is read one token at a time (:func:`probes.kv.stream.stream`) with:

* ``full``: every past key (the reference);
* ``window:B``: the last B keys alone;
* ``sinks:S+window:B−S`` for S = 1, 2, 4, 8: the first S tokens kept as attention sinks, the same budget B in all;
* ``h2o:B``, ``tova:B``, ``snapkv:B``: the attention-scored evictions at that budget.

For each: the perplexity over every predicted token, and over the steps from B on (the same steps for every
policy: before step B nothing is evicted, so every policy is the full cache there); the KV bytes the cache held at
most against the full cache's; and the time (÷ full's). The paper's figures are printed beside (Xiao et al.,
*Efficient Streaming Language Models with Attention Sinks*, ICLR 2024, Table 1). Positions here stay the text's own
(no re-numbering inside the cache) and the text fits the model's context, unlike the paper's runs.

    PYTHONPATH=. .venv/bin/python benchmarks/kv_streaming.py [--model smollm2] [--tokens 2048] [--budget 256] \\
        [--policies full,window:256,...] [--out DIR]

A long run: every policy streams every token (the table's last line says the run's total:
``benchmarks/results/kv_streaming.txt``). Writes ``DIR/kv_streaming.txt`` (default DIR: a fresh temporary folder,
printed; the committed table is written only with ``--out benchmarks/results``).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import out_folder, publish  # noqa: E402

from probes.kv.policies import parse_list  # noqa: E402
from probes.kv.stream import stream, token_ids  # noqa: E402
from probes.kv.texts import ewt_text  # noqa: E402
from probes.models import load  # noqa: E402

MIB = 2**20
SINKS = (1, 2, 4, 8)
PAPER = """The paper (Xiao et al., StreamingLLM, ICLR 2024), for comparison:
  Llama-2-7B, cache of 4,096 = sinks + window (Table 2), perplexity: 0 sinks 3,359.95 | 1 sink 11.88 |
    2 sinks 10.51 | 4 sinks 9.59 | 8 sinks 9.54
  Llama-2-13B over 65K tokens of PG19 (Table 1): window 1,024 alone 5,158.07 | 4 sinks + 1,020 window 5.40
  There the text is far longer than the cache and positions are re-numbered inside the cache."""


def default_policies(budget: int) -> str:
    sinks = ",".join(f"sinks:{s}+window:{budget - s}" for s in SINKS)
    return f"full,window:{budget},{sinks},h2o:{budget},tova:{budget},snapkv:{budget}"


def load_text() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def past(losses: torch.Tensor, budget: int) -> float:
    """Perplexity over the steps from ``budget`` on, the same steps for every policy: step t predicts token t + 1,
    and step ``budget`` is the first whose query misses a key under a cache of ``budget`` keys (steps before it
    read every key, whatever the policy)."""
    return math.exp(float(losses[budget:].mean())) if budget < len(losses) else float("nan")


def summary(rows: list[dict], budget: int) -> str:
    """What smollm2 shows, from the numbers (perplexity from step ``budget`` on)."""
    by = {r["policy"]: r for r in rows}
    full, window = by.get("full"), by.get(f"window:{budget}")
    sinks = {n: by[k]["ppl_past"] for n in SINKS if (k := f"sinks:{n}+window:{budget - n}") in by}
    if not (full and window and sinks):
        return ""
    f, w = full["ppl_past"], window["ppl_past"]
    best = min(sinks, key=lambda n: sinks[n])
    return (f"smollm2, perplexity from step {budget} on: full {f:.2f}; window:{budget} alone {w:.2f} ({w / f:.2f}× "
            f"full); with sinks " + ", ".join(f"{n}: {p:.2f} ({p / f:.2f}×)" for n, p in sinks.items())
            + f". The sinks take window-only's {w / f:.2f}× down to {sinks[best] / f:.2f}× ({best} sink"
            f"{'s' if best > 1 else ''} best), against 3,359.95 → 9.59 in the paper, whose text ran past the cache "
            f"with positions re-numbered; here the {full['tokens']:,}-token text fits the 8,192 context and each key "
            f"keeps its own position.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=2048, help="the text: whole EWT sentences up to this many")
    parser.add_argument("--budget", type=int, default=256, help="keys each head holds (sinks + window)")
    parser.add_argument("--policies", default=None, help="comma-separated (default: full, window, sinks 1/2/4/8 + "
                        "window, h2o, tova, snapkv, all at --budget)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for kv_streaming.txt (default: a new temporary folder, printed)")
    args = parser.parse_args()
    out = out_folder(args.out)
    print(f"results will go to {out / 'kv_streaming.txt'}", flush=True)
    t_start = time.perf_counter()
    start_load = load_text()

    model = load(args.model)
    text = ewt_text(model, args.tokens)
    n = token_ids(model, text).shape[1]
    print(f"text: {n:,} tokens of EWT dev ({len(text):,} characters), {start_load}", flush=True)
    policies = parse_list(args.policies or default_policies(args.budget))
    rows: list[dict] = []
    for policy in policies:
        t0 = time.perf_counter()
        before = load_text()

        def tick(done: int, total: int, name: str = policy.name, t0: float = t0) -> None:
            if done % 256 == 0 or done == total:
                print(f"  {name}: {done}/{total} tokens, {time.perf_counter() - t0:.0f} s, {load_text()}", flush=True)

        s = stream(model, text, policy, progress=tick)
        row: dict[str, Any] = dict(policy=policy.name, tokens=s.tokens, ppl=s.perplexity,
                                   ppl_past=past(s.losses, args.budget), kv=s.kv_bytes, full_kv=s.full_kv_bytes,
                                   seen=s.seen_fraction, seconds=s.seconds, load=f"{before} → {load_text()}")
        rows.append(row)
        print(f"{policy.name}: perplexity {row['ppl']:.3f} (past the budget {row['ppl_past']:.3f}), "
              f"{row['kv'] / MIB:.1f} of {row['full_kv'] / MIB:.1f} MiB, {row['seconds']:.0f} s, {row['load']}",
              flush=True)

    full_s = next((r["seconds"] for r in rows if r["policy"] == "full"), None)
    lines = [f"{model.name}: {model.n_layers} layers, {model.n_heads} query heads, {model.n_kv_heads} key/value heads; "
             f"{torch.get_num_threads()} threads, {platform.processor() or 'CPU'}",
             f"text: EWT dev sentences as running text, {n:,} tokens (ewt_text(m, {args.tokens})); budget "
             f"{args.budget} keys per head; streamed token by token, each key at its own position",
             "",
             f"| policy | tokens | perplexity | perplexity past step {args.budget} | KV held (MiB) | full KV (MiB) | "
             "held ÷ full | keys seen | seconds | ÷ full's | load (1/5 min) before → after |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['seconds'] / full_s:.2f}×" if full_s else "–"
        lines.append(f"| {r['policy']} | {r['tokens']:,} | {r['ppl']:.3f} | {r['ppl_past']:.3f} | "
                     f"{r['kv'] / MIB:.1f} | {r['full_kv'] / MIB:.1f} | {r['kv'] / r['full_kv']:.3f} | "
                     f"{r['seen']:.3f} | {r['seconds']:.0f} | {ratio} | {r['load']} |")
    lines += ["", "keys seen: the keys each query read over the keys before it, averaged over steps and heads.", "",
              PAPER, "", summary(rows, args.budget),
              f"total {time.perf_counter() - t_start:.0f} s; {start_load} at the start, {load_text()} at the end"]
    publish("\n".join(lines), out, "kv_streaming.txt")


if __name__ == "__main__":
    main()
