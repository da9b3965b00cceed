"""Scratch eager forward vs Hugging Face eager with output_attentions=True, side by side.

Two models: GPT-2-small shapes (random init, 12 layers × 12 heads, d=768, vocab 50,257) and the
offline SmolLM2-135M (real weights, Llama architecture: 30 layers, 9 query heads reading 3 key/value
heads, rotary positions). The same random token ids for both paths, at 128, 512 and 1024 tokens, on
the CPU. Both return what a Trace holds (every layer's attention probabilities, every hidden state,
the logits). Prints one table per model: median wall time of each (the two take turns round by round,
``report.alternate``; the ratio is each round's own, its median and min–max) and peak extra
memory of one call (RSS above the level before it, sampled every millisecond, in a fresh process),
side by side. Goal: scratch time ≤ 1.0× Hugging Face's, and no more peak memory.

    .venv/bin/python benchmarks/forward.py [--models gpt2-small smollm2] [--lengths 128 512 1024]
                                           [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import alternate, ratios  # benchmarks/, this script's folder

from probes import scratch
from probes.families import family_of
from probes.models import Encoding, LocalModel

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRSS:
    """Peak resident memory above the starting level while the block runs (polled every ``every`` seconds, 1 ms by
    default): this process's, or what ``read()`` returns (another process's, in bytes)."""

    def __init__(self, read=None, every: float = 0.001):
        self.read, self.every = read or rss, every

    def __enter__(self):
        self.start = self.peak = self.read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            time.sleep(self.every)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())
        self.extra = self.peak - self.start


def gpt2_small() -> LocalModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    config._attn_implementation = "eager"
    hf = GPT2LMHeadModel(config).eval()
    hf.requires_grad_(False)
    return LocalModel(name="gpt2-small (random init)", location="random init, in memory", family=family_of(config),
                      hf=hf, tokenizer=None, config=hf.config)


def smollm2() -> LocalModel:
    from probes.models import load  # probes.load's model here (its .hf), not a served one

    return load("smollm2")


MODELS = {"gpt2-small": gpt2_small, "smollm2": smollm2}


def encoding(n: int, vocab: int) -> Encoding:
    ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))
    return Encoding(ids, torch.ones_like(ids), None, [[]], ["random"], [None], [None])


def run_hf(model: LocalModel, enc: Encoding):
    """What a Trace needs from Hugging Face, as ``probes.hf.forward`` asks for it: every layer's attention,
    every hidden state and the logits (the scratch Trace holds the same)."""
    with torch.inference_mode():
        out = model.hf(input_ids=enc.input_ids, attention_mask=enc.attention_mask, output_attentions=True,
                       output_hidden_states=True)
    assert len(out.attentions) == model.n_layers and len(out.hidden_states) == model.n_layers + 1
    return out


def run_scratch(model: LocalModel, enc: Encoding):
    return scratch.forward(model, enc)


PATHS = {"hf": run_hf, "scratch": run_scratch}


MIN_SECONDS = 10.0  # short inputs repeat until each path has run this long: their medians are noisier


def measure_time(model: LocalModel, enc: Encoding, repeats: int) -> tuple[dict[str, float], int, list[float]]:
    """Median wall time of each path, how many rounds it took: at least ``repeats``, and at least ``MIN_SECONDS``
    of runs per path (at most 60), and each round's scratch ÷ Hugging Face ratio. The paths take turns round by
    round (``report.alternate``) so that a drift in machine load hits them alike."""
    t0 = time.perf_counter()
    for fn in PATHS.values():
        fn(model, enc)  # warm-up
    once = (time.perf_counter() - t0) / len(PATHS)
    repeats = max(repeats, min(60, int(MIN_SECONDS / once)))
    timing = alternate({name: (lambda fn=fn: fn(model, enc)) for name, fn in PATHS.items()}, repeats)
    return {name: timing.median(name) for name in PATHS}, repeats, ratios(timing.seconds, "hf")["scratch"]


def measure_memory(name: str, path: str, n: int) -> float:
    """Peak extra RSS of one call, in a fresh process where glibc hands large blocks straight back to
    the OS (so RSS follows live memory, not what an earlier call left cached)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, __file__, "--memory-of", name, path, str(n)], env=env, check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def memory_child(name: str, path: str, n: int) -> None:
    model = MODELS[name]()
    scratch.build(model)
    enc = encoding(n, model.config.vocab_size)
    PATHS[path](model, enc)  # warm-up, as in the timing runs
    with PeakRSS() as mem:
        out = PATHS[path](model, enc)
        del out
    print(mem.extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    parser.add_argument("--memory-of", nargs=3, metavar=("MODEL", "PATH", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_of:
        memory_child(args.memory_of[0], args.memory_of[1], int(args.memory_of[2]))
        return
    rows = []
    for name in args.models:
        rows += compare(name, args.lengths, args.repeats)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


def compare(name: str, lengths: list[int], repeats: int) -> list[dict]:
    model = MODELS[name]()
    scratch.build(model)
    rows: list[dict[str, Any]] = []
    print(f"\n{model.name}: {model.n_layers} layers × {model.n_heads} heads ({model.n_kv_heads} key/value heads), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, median time of ≥ {repeats} rounds (and ≥ "
          f"{MIN_SECONDS:.0f} s of runs) per path, the two taking turns; time ratio: scratch ÷ HF, each round's "
          "own: median (min–max); peak memory of one call in a fresh process")
    header = f"{'tokens':>6} | {'runs':>4} | {'HF eager ms':>11} | {'scratch ms':>10} | " \
             f"{'time ratio, per round':>23} | {'HF peak MiB':>11} | {'scratch peak MiB':>16} | {'attn |Δ|':>8} | " \
             f"{'logit |Δ|':>8}"
    print(header)
    print("-" * len(header))
    for n in lengths:
        enc = encoding(n, model.config.vocab_size)
        t, runs, per_round = measure_time(model, enc, repeats)
        hf, mine = run_hf(model, enc), run_scratch(model, enc)
        attn_diff = max(float((a - b).abs().max()) for a, b in zip(hf.attentions, mine.attn, strict=True))
        logits_diff = float((hf.logits - mine.logits).abs().max())
        del hf, mine
        row = dict(model=name, tokens=n, runs=runs, hf_ms=t["hf"] * 1e3, scratch_ms=t["scratch"] * 1e3,
                   ratio=statistics.median(per_round), ratio_min=min(per_round), ratio_max=max(per_round),
                   hf_peak_mib=measure_memory(name, "hf", n) / 2**20,
                   scratch_peak_mib=measure_memory(name, "scratch", n) / 2**20,
                   attention_max_abs_diff=attn_diff, logits_max_abs_diff=logits_diff)
        rows.append(row)
        print(f"{n:>6} | {runs:>4} | {row['hf_ms']:>11.1f} | {row['scratch_ms']:>10.1f} | "
              f"{row['ratio']:>5.2f}× ({row['ratio_min']:.2f}–{row['ratio_max']:.2f}×){'':>4} | "
              f"{row['hf_peak_mib']:>11.0f} | {row['scratch_peak_mib']:>16.0f} | {attn_diff:>8.1e} | "
              f"{logits_diff:>8.1e}", flush=True)
    worst = max(r["ratio"] for r in rows)
    memory = max(r["scratch_peak_mib"] / r["hf_peak_mib"] for r in rows)
    print(f"goal scratch ≤ 1.0× HF time: {'met' if worst <= 1.0 else 'NOT met'} (worst ratio {worst:.2f}×); "
          f"no more peak memory: {'met' if memory <= 1.0 else 'NOT met'} (worst ratio {memory:.2f}×)")
    print("both return what a Trace holds: every layer's attention, every hidden state and the logits "
          "(q, k, v are recomputed from the hidden states when asked for)")
    return rows


if __name__ == "__main__":
    main()
