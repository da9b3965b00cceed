"""SmolLM2's induction head and the heads it reads from: the circuit proof on a real model.

1. The induction probe (repeated random tokens) ranks SmolLM2's heads; the first is the receiver (18.6 so far).
2. Its top-5 K-composition senders from the weights (``probes.effects.compose``, against random matrices).
3. Its top-5 path-patching senders into its key (``probes.effects.path_patching``): 25 random tokens then the same 25
   again (clean), and the same with the first half drawn anew (corrupted); each earlier head's output on the corrupted
   text patched into only the receiver's key, ranked by how far its pattern moves (``pattern_shift``), with the mean
   weight on the induction cells (each repeated token's query on the token after its first occurrence).
4. How many of those senders are among the positional probe's previous-token heads (its ``previous`` label, the 10
   best heads over the probe's first 50 built-in items), said plainly either way.

    .venv/bin/python benchmarks/circuit_smollm2.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
from report import publish  # noqa: E402

import probes  # noqa: E402
from probes.effects.compose import composition_scores  # noqa: E402
from probes.effects.path_patching import path_patch  # noqa: E402
from probes.heads.induction import repeated_tokens  # noqa: E402
from probes.heads.profile import run_probe  # noqa: E402

LENGTH = 25  # random tokens, then the same again
TOP = 5
PREVIOUS = 10  # the positional probe's best previous-token heads counted as such


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model = probes.load("smollm2")
    lines = ["SmolLM2-135M: its induction head and the heads it reads from "
             "(`.venv/bin/python benchmarks/circuit_smollm2.py --out benchmarks/results`)"]

    t = time.perf_counter()
    induction = run_probe(model, "induction")
    scores = induction[induction.label == "induction"].sort_values("score", ascending=False)
    best = scores.iloc[0]
    receiver = (int(best["layer"]), int(best["head"]))
    lines.append(f"receiver: head {receiver[0]}.{receiver[1]}, the induction probe's first (score {best['score']:.3f}; "
                 f"next {scores.iloc[1]['layer']}.{scores.iloc[1]['head']} at {scores.iloc[1]['score']:.3f}) "
                 f"[{time.perf_counter() - t:.0f} s]")

    t = time.perf_counter()
    comp = composition_scores(model, kind="k", receivers=[receiver])
    top_k = comp.nlargest(TOP, "score")
    mean, sd = comp.baseline_mean.iloc[0], comp.baseline_sd.iloc[0]
    lines.append(f"top-{TOP} K-composition senders from the weights (random: {mean:.4f} ± {sd:.4f}) "
                 f"[{time.perf_counter() - t:.0f} s]:")
    lines += [f"  {r.sender_layer}.{r.sender_head}  {r.score:.4f}  (+{(r.score - mean) / sd:.0f} sd)"
              for r in top_k.itertuples()]

    t = time.perf_counter()
    clean = repeated_tokens(model, 1, LENGTH, seed=0)
    other = repeated_tokens(model, 1, LENGTH, seed=1)
    start = clean.input_ids.shape[1] - 2 * LENGTH  # the BOS, where the tokenizer adds one
    ids = clean.input_ids.clone()
    ids[0, start:start + LENGTH] = other.input_ids[0, start:start + LENGTH]  # the first half drawn anew
    corrupted = replace(clean, input_ids=ids)
    cells = [(start + LENGTH + i, start + i + 1) for i in range(LENGTH - 1)]  # a repeat → the token after its first
    patched = path_patch(model, clean, corrupted, receiver, into="k", cells=cells)
    frame = patched.frame.sort_values("pattern_shift", ascending=False)
    lines.append(f"top-{TOP} path-patching senders into its key ({len(frame)} earlier heads; the receiver's mean "
                 f"weight on the induction cells, clean: {patched.clean_cells:.3f}) [{time.perf_counter() - t:.0f} s]:")
    lines += [f"  {int(r.layer)}.{int(r.head)}  pattern_shift {r.pattern_shift:.3f}  induction weight {r.cells:.3f}"
              + (f"  loss {r.loss:+.3f} nats" if hasattr(r, "loss") else "") for r in frame.head(TOP).itertuples()]

    t = time.perf_counter()
    positional = run_probe(model, "positional", limit=50)
    previous = positional[positional.label == "previous"].nlargest(PREVIOUS, "score")
    prev_heads = {(int(r.layer), int(r.head)) for r in previous.itertuples()}
    lines.append(f"the positional probe's {PREVIOUS} best previous-token heads (50 items): "
                 + ", ".join(f"{int(r.layer)}.{int(r.head)} ({r.score:.2f})" for r in previous.itertuples())
                 + f" [{time.perf_counter() - t:.0f} s]")
    for name, heads in (("K-composition", [(int(r.sender_layer), int(r.sender_head)) for r in top_k.itertuples()]),
                        ("path patching", [(int(r.layer), int(r.head)) for r in frame.head(TOP).itertuples()])):
        found = [f"{a}.{b}" for a, b in heads if (a, b) in prev_heads]
        lines.append(f"{name}: {len(found)} of its top {TOP} are previous-token heads"
                     + (f" ({', '.join(found)})" if found else " (none: the senders are not the probe's "
                                                                  "previous-token heads)"))
    both = {f"{a}.{b}" for a, b in [(int(r.sender_layer), int(r.sender_head)) for r in top_k.itertuples()]} & \
        {f"{int(r.layer)}.{int(r.head)}" for r in frame.head(TOP).itertuples()}
    lines.append(f"in both top-{TOP} lists: {', '.join(sorted(both)) or 'none'}")
    publish("\n".join(lines), args.out, "circuit_smollm2.txt")


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
