"""Parity reuse: what the sidebar's parity badge costs on a new text, before and now, beside the trace the
page itself needs.

* **the page's trace**: Hugging Face's pass of the text (``probes.run``), which the page draws from;
* **badge before**: ``parity.check`` — encode the text again and run Hugging Face *and* the scratch pass,
  then compare (what the badge did until it reused the page's trace);
* **badge now**: the app's way (``dashboard.data.parity_report``) — the scratch pass once, then
  ``parity.compare`` against the Hugging Face trace the page already made.

The offline default (minilm) on texts of about 12, 128 and 500 tokens; median of ``--repeats`` runs,
the three taking turns. Both badges must give the same verdict and the same max |Δ|.

    .venv/bin/python benchmarks/parity_reuse.py [--repeats 5] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import publish  # noqa: E402  (benchmarks/, this script's folder)

import probes  # noqa: E402
from probes import parity, scratch  # noqa: E402

SENTENCE = "Xiaoming gave the apple to Xiaohong because she was hungry."
STORY = ("Xiaoming gave the apple to Xiaohong because she was hungry, and then the two friends walked home "
         "together along the quiet river while the sun went down behind the old mill. ")


def texts(model) -> dict[int, str]:
    out = {}
    for target, base in ((12, SENTENCE), (128, STORY * 4), (500, STORY * 16)):
        words = base.split()
        while len(model.encode(" ".join(words), truncate=True).tokens[0]) > target:
            words = words[:-1]
        text = " ".join(words)
        out[len(model.encode(text).tokens[0])] = text
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    model = probes.load("minilm")
    scratch.build(model)
    probes.run(model, "warm up", source="scratch")
    lines = [f"parity badge on a new text, offline default (minilm), CPU, {torch.get_num_threads()} threads; median of "
             f"{args.repeats} runs, taking turns", "",
             "| tokens | the page's trace (HF) | badge before: parity.check | badge now: scratch pass + compare | "
             "before / trace | now / trace | same verdict and max abs diff |",
             "|---|---|---|---|---|---|---|"]
    for n, text in texts(model).items():
        page, before, now = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            hf_trace = probes.run(model, text)
            page.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            old = parity.check(model, text)
            before.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            new = parity.compare(hf_trace, probes.run(model, text, source="scratch"))
            now.append(time.perf_counter() - t0)
        same = old.passed == new.passed and old.attention_max_abs_diff == new.attention_max_abs_diff
        p, b, w = (statistics.median(x) for x in (page, before, now))
        lines.append(f"| {n} | {p * 1000:,.0f} ms | {b * 1000:,.0f} ms | {w * 1000:,.0f} ms | {b / p:.1f}× | "
                     f"{w / p:.1f}× | {'yes' if same else 'NO'} |")
        print(lines[-1], file=sys.stderr)
    lines += ["", "Before, the badge also ran ahead of the page; now it is drawn after it (an empty sidebar slot "
              "filled once the page has run), so it never delays the first chart."]
    text = "\n".join(lines)
    publish(text, args.out, "parity_reuse.txt")


if __name__ == "__main__":
    main()
