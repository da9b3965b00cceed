"""Memory by source: what one view of a long text costs, for each way the app can trace it.

The offline decoder (SmolLM2-135M: 30 layers × 9 heads, an 8,192-token context; the offline encoder takes
512 tokens, where every source keeps under 100 MiB of probabilities) on one text of L random tokens. For
each source, in a fresh process: the trace as the app makes it (``probes.run``), then one head read out
of it, as the Explore page does. Peak memory is the resident memory above the level with the model
loaded (sampled every millisecond, ``benchmarks/forward.PeakRSS``), the logits included as the app keeps them
(SmolLM2: L × 49,152 × 4 bytes, 0.4 GiB at 2,048 tokens); time is the trace + the head.

* **Hugging Face, every probability**: the app's source before, ``attention_budget=None``;
* **Hugging Face, the app's budget**: what the app runs now (``dashboard.core.budgets.ATTENTION_BUDGET``,
  256 MiB): under it, every probability; over it, Hugging Face's own q, k, v and a logsumexp per row;
* **scratch eager**, every probability, and with the app's budget (over it, eager still runs and a
  logsumexp per row is kept);
* **scratch sdpa**: the lazy path.

The last column is the largest difference of the head read out against Hugging Face with every
probability (the same head, the same text): the numbers a view shows.

    .venv/bin/python benchmarks/memory_by_source.py [--lengths 512 1024 2048] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from report import publish  # noqa: E402  (benchmarks/, this script's folder)

LAYER, HEAD = 5, 3
MIB = 2**20
SOURCES = {  # name -> (source, backend, budget: None = every probability, "app" = the app's)
    "Hugging Face, every probability (the app before)": ("hf", "eager", None),
    "Hugging Face, the app's budget (the app now)": ("hf", "eager", "app"),
    "scratch eager, every probability": ("scratch", "eager", None),
    "scratch eager, the app's budget (the app now)": ("scratch", "eager", "app"),
    "scratch sdpa (lazy)": ("scratch", "sdpa", None),
}


def text_ids(model, n: int) -> torch.Tensor:
    return torch.randint(0, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(n))


def child(name: str, n: int) -> None:
    from forward import PeakRSS

    import probes
    from dashboard.core.budgets import ATTENTION_BUDGET
    from probes import runner
    from probes.models import Encoding

    source, backend, asked = SOURCES[name]
    budget = ATTENTION_BUDGET if asked == "app" else None  # SOURCES: None or "app"
    model = probes.load("smollm2")

    def view(n_tokens: int) -> tuple[torch.Tensor, bool]:
        ids = text_ids(model, n_tokens)
        enc = Encoding(ids, torch.ones_like(ids), None, [[]], ["random"], [None], [None])
        trace = runner.forward(model, enc, source, backend, logits=True, attention_budget=budget)  # as the app
        return trace.attention(LAYER, HEAD), trace.lazy

    view(16)  # warm-up: first-call set-up is not what we measure
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        head, lazy = view(n)
        seconds = time.perf_counter() - t0
    torch.save(head, os.environ["HEAD_OUT"])
    print(json.dumps(dict(peak=mem.extra, seconds=seconds, lazy=lazy)))


def run_child(name: str, n: int, head_file: Path) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", HEAD_OUT=str(head_file), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, __file__, "--child", name, str(n)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        return dict(error=(out.stderr.strip().splitlines() or ["killed"])[-1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    import tempfile

    from dashboard.core.budgets import ATTENTION_BUDGET

    lines = [f"smollm2 (30 layers × 9 heads), CPU, torch {torch.__version__}; one text of L random tokens, traced "
             f"and one head read (layer {LAYER}, head {HEAD}); peak memory above the loaded model; the app's budget: "
             f"{ATTENTION_BUDGET // MIB} MiB of probabilities per trace", "",
             "| tokens | source | kept | peak MiB | seconds | max abs diff of the head vs HF, every probability |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.lengths:
            reference = None
            for name in SOURCES:
                head_file = Path(tmp) / "head.pt"
                r = run_child(name, n, head_file)
                if "error" in r:
                    lines.append(f"| {n} | {name} | — | — | — | failed: {r['error']} |")
                    continue
                head = torch.load(head_file, weights_only=True)
                if reference is None:
                    reference = head
                diff = (head - reference).abs().max().item()
                kept = "logsumexp per row" if r["lazy"] else "every probability"
                lines.append(f"| {n} | {name} | {kept} | {r['peak'] / MIB:,.0f} | {r['seconds']:.1f} | "
                             f"{'0 (the reference)' if name.startswith('Hugging Face, every') else f'{diff:.1e}'} |")
                print(lines[-1], file=sys.stderr)
    text = "\n".join(lines)
    publish(text, args.out, "memory_by_source.txt")


if __name__ == "__main__":
    main()
