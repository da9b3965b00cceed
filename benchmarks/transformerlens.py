"""The library beside TransformerLens on the same weights, one instrument at a time, time and peak memory side by side.

Instruments (``--instruments``):

* **trace**: a forward pass that keeps everything, on ``--tokens`` random token ids: ours is
  ``probes.scratch.forward`` (every layer's attention probabilities, every hidden state, the logits; q, k, v are
  recomputed from the hidden states when asked), TransformerLens's ``run_with_cache`` (every hook point);
* **patch**: path patching of every head of the layers before 18 into head 18.6's key on smollm2, the induction text
  of ``path_patching_memory.py`` (25 random tokens, then the same again; the first half drawn anew in the corrupted
  one): ours is ``probes.effects.path_patching.path_patch``; TransformerLens's the same patch with hooks: the
  senders' outputs on the corrupted text minus the clean ones (``hook_z`` · W_O) added to the receiver layer's
  clean input, normed and fed to its key projection (``attn.k.hook_in``; the key/value head the receiver reads,
  which its two grouped query heads read too: TransformerLens has no per-query-head key), up to 64 senders a pass
  started at the receiver's layer (``start_at_layer``), the receiver's pattern and the logits kept, and the next-token
  loss (float64) and top prediction read from the logits, as ours reports.

Each side runs in a process of its own (ours in this venv; TransformerLens in ``--transformerlens PYTHON``'s, which
must have ``transformer_lens``; ``--before DIR``: also ours from another copy of ``probes/``, e.g. ``git archive``
of an older commit), one torch thread each (``OMP_NUM_THREADS=1``), loaded once; then the sides take turns, round by
round, in an order that rotates, so that a drift in the machine's load hits them alike. Time: the median of the rounds
(each round's ratio to TransformerLens, median and range). Memory: the process's peak resident memory (``VmHWM``)
above its level once the model and inputs were loaded: what the instrument needed, whatever the allocator kept.
The load average is printed beside the table.

    python3.11 -m venv /tmp/tlvenv && /tmp/tlvenv/bin/pip install torch==2.13.0 transformer_lens
    .venv/bin/python benchmarks/transformerlens.py --transformerlens /tmp/tlvenv/bin/python \\
        [--instruments trace patch] [--model smollm2] [--tokens 1000] [--rounds 5] [--before DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECEIVER, LENGTH, BATCH = (18, 6), 25, 64

# Both sides' worker: argv = instrument, the model's folder, the inputs' .pt file, then its side's own setup. It
# loads, says "ready", then runs the instrument once per "go" line and answers {"s", "hwm", "loaded"} in JSON.
COMMON = r"""
import json, os, sys, time, torch
torch.set_num_threads(1)
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))
def serve(once):
    loaded = status("VmRSS")
    print("ready", flush=True)
    for line in sys.stdin:
        t = time.perf_counter()
        out = once()
        seconds = time.perf_counter() - t
        del out
        print(json.dumps({"s": seconds, "hwm": status("VmHWM"), "loaded": loaded}), flush=True)
"""

OURS = COMMON + r"""
sys.path.insert(0, sys.argv[4])
import probes
from probes import memory, scratch
from probes.models import Encoding
memory.steady()  # as python -m probes and the app do when they start
instrument, folder, inputs = sys.argv[1:4]
data = torch.load(inputs)
model = probes.load(folder)
scratch.build(model)
def enc(ids):
    return Encoding(ids, torch.ones_like(ids), None, [[]], ["ids"], [None], [None])
if instrument == "trace":
    e = enc(data["ids"])
    once = lambda: scratch.forward(model, e)
else:
    from probes.effects.path_patching import path_patch
    clean, corrupted = enc(data["clean"]), enc(data["corrupted"])
    cells = [tuple(c) for c in data["cells"].tolist()]
    senders = [tuple(s) for s in data["senders"].tolist()]
    once = lambda: path_patch(model, clean, corrupted, tuple(data["receiver"].tolist()), into="k", cells=cells,
                              senders=senders)
serve(once)
"""

THEIRS = COMMON + r"""
from transformer_lens.model_bridge import TransformerBridge
instrument, folder, inputs = sys.argv[1:4]
data = torch.load(inputs)
b = TransformerBridge.boot_transformers(folder, device="cpu")
b.enable_compatibility_mode(disable_warnings=True)
if instrument == "trace":
    once = lambda: b.run_with_cache(data["ids"])
else:
    r_layer, r_head = data["receiver"].tolist()
    clean, corrupted, cells = data["clean"], data["corrupted"], data["cells"]
    n = clean.shape[1]
    group = b.cfg.n_heads // (getattr(b.cfg, "n_key_value_heads", None) or b.cfg.n_heads)
    senders = [tuple(s) for s in data["senders"].tolist()]
    ln1 = b.blocks[r_layer].ln1
    def once():
        with torch.no_grad():
            x_at = f"blocks.{r_layer}.hook_resid_pre"
            _, cc = b.run_with_cache(clean, names_filter=lambda m: m.endswith("attn.hook_z") or m == x_at)
            _, kc = b.run_with_cache(corrupted, names_filter=lambda m: m.endswith("attn.hook_z"),
                                     stop_at_layer=r_layer)
            x, W_O = cc[x_at], b.W_O
            clean_logits = b(clean)
            clean_loss = torch.log_softmax(clean_logits[0, :n - 1].double(), -1).gather(-1, clean[0, 1:, None])
            rows = []
            for start in range(0, len(senders), BATCH):
                part = senders[start:start + BATCH]
                delta = torch.stack([(kc[f"blocks.{s}.attn.hook_z"][0, :, h] - cc[f"blocks.{s}.attn.hook_z"][0, :, h])
                                     @ W_O[s, h] for s, h in part])
                patched = ln1(x + delta)  # the receiver layer's input plus each sender's write, normed
                pattern = []
                def key_input(k_in, hook):
                    return patched
                def keep(p, hook):
                    pattern.append(p[:, r_head])
                logits = b.run_with_hooks(x.expand(len(part), -1, -1), start_at_layer=r_layer,
                                          fwd_hooks=[(f"blocks.{r_layer}.attn.k.hook_in", key_input),
                                                     (f"blocks.{r_layer}.attn.hook_pattern", keep)])
                loss = -torch.log_softmax(logits[:, :n - 1].double(), -1).gather(
                    -1, clean[0, 1:, None].expand(len(part), -1, -1))
                rows.append(((loss + clean_loss).mean((1, 2)), logits.argmax(-1),
                             pattern[0][:, cells[:, 0], cells[:, 1]].mean(-1)))
            return rows
serve(once)
""".replace("BATCH", str(BATCH))


def inputs(model, tokens: int, path: Path, sender_layers: int) -> None:
    """The token ids both sides read: random ids for the trace, the induction pair for path patching."""

    import torch

    from probes.heads.induction import repeated_tokens

    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(tokens))
    clean = repeated_tokens(model, 1, LENGTH, seed=0)
    other = repeated_tokens(model, 1, LENGTH, seed=1)
    start = clean.input_ids.shape[1] - 2 * LENGTH
    corrupted = clean.input_ids.clone()
    corrupted[0, start:start + LENGTH] = other.input_ids[0, start:start + LENGTH]
    cells = torch.tensor([(start + LENGTH + i, start + i + 1) for i in range(LENGTH - 1)])
    torch.save({"ids": ids, "clean": clean.input_ids, "corrupted": corrupted, "cells": cells,
                "receiver": torch.tensor(RECEIVER),
                "senders": torch.tensor([(s, h) for s in range(sender_layers) for h in range(model.n_heads)])}, path)


class Worker:
    def __init__(self, name: str, cmd: list[str]):
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1",
                   TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     cwd=tempfile.gettempdir())
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "ready":
                break
        else:
            raise RuntimeError(f"{name} did not start: {' '.join(cmd)}")
        self.rounds: list[dict] = []

    def go(self) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        got = json.loads(self.proc.stdout.readline())
        self.rounds.append(got)
        return got

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def compare(instrument: str, folder: str, data: Path, sides: dict[str, tuple[list[str], list[str]]],
            rounds: int) -> list[str]:
    workers = {name: Worker(name, cmd + [instrument, folder, str(data)] + extra)
               for name, (cmd, extra) in sides.items()}
    names = list(workers)
    loads = [load()]
    for w in workers.values():
        w.go()  # warm-up
        w.rounds.clear()
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # the order rotates each round
            workers[name].go()
        loads.append(load())
    for w in workers.values():
        w.close()
    tl = workers["TransformerLens"].rounds
    lines = [f"{instrument}: {rounds} rounds, one thread each; load average (1, 5, 15 min) at start {loads[0]}, "
             f"at the end {loads[-1]}",
             "| side | median s | ÷ TransformerLens, each round (min–max) | peak above loaded MiB | ÷ TL |",
             "|---|---|---|---|---|"]
    tl_peak = max(x["hwm"] for x in tl) - tl[0]["loaded"]
    for name, w in workers.items():
        s = statistics.median(x["s"] for x in w.rounds)
        per = [x["s"] / t["s"] for x, t in zip(w.rounds, tl, strict=True)]
        peak = max(x["hwm"] for x in w.rounds) - w.rounds[0]["loaded"]
        lines.append(f"| {name} | {s:.2f} | {statistics.median(per):.2f}× ({min(per):.2f}–{max(per):.2f}) | "
                     f"{peak / 2**20:,.0f} | {peak / tl_peak:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transformerlens", metavar="PYTHON", required=True,
                        help="the interpreter of a venv with transformer_lens (never this one's)")
    parser.add_argument("--instruments", nargs="+", choices=("trace", "patch"), default=["trace", "patch"])
    parser.add_argument("--model", default="smollm2",
                        help="a model name or folder probes.load reads, or random-gpt2 (compose.py's GPT-2 shape)")
    parser.add_argument("--tokens", type=int, default=1000, help="the trace's length in tokens")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sender-layers", type=int, default=RECEIVER[0],
                        help="path patching's senders: every head of the layers before this one (default: all)")
    parser.add_argument("--before", type=Path, help="also ours from this folder (holding probes/)")
    parser.add_argument("--out", type=Path, help="also write transformerlens_MODEL.txt into this folder")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import probes

    sides = {"ours": ([sys.executable, "-c", OURS], [str(ROOT)]),
             "TransformerLens": ([args.transformerlens, "-c", THEIRS], [])}
    if args.before:
        sides = {"ours, before": ([sys.executable, "-c", OURS], [str(args.before.resolve())]), **sides}
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "random-gpt2":  # compose.py's GPT-2-small shape, Hugging Face's random initialisation
            sys.path.insert(0, str(ROOT / "tests"))
            from compose import random_gpt2

            model = probes.load(str(random_gpt2(Path(tmp) / "random-gpt2")))
        else:
            model = probes.load(args.model)
        run(args, model, sides, Path(tmp))


def run(args, model, sides: dict, tmp: Path) -> None:
    from report import publish

    folder = str(model.location)
    lines = [f"The library beside TransformerLens on {args.model} ({folder}), the trace at {args.tokens} tokens "
             "(`.venv/bin/python benchmarks/transformerlens.py --transformerlens /tmp/tlvenv/bin/python`)"]
    data = tmp / "inputs.pt"
    inputs(model, args.tokens, data, args.sender_layers)
    for instrument in args.instruments:
        lines += ["", *compare(instrument, folder, data, sides, args.rounds)]
        print("\n".join(lines[-(len(sides) + 3):]), flush=True)
    publish("\n".join(lines), args.out, f"transformerlens_{Path(args.model).name}.txt")


if __name__ == "__main__":
    main()
