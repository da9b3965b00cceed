"""Parity reuse: what the sidebar's parity badge costs on a new text, before and now, beside the trace the
page itself needs.

* **the page's trace**: Hugging Face's pass of the text (``probes.run``), which the page draws from;
* **badge before**: ``parity.check`` — encode the text again and run Hugging Face *and* the scratch pass,
  then compare (what the badge did until it reused the page's trace);
* **badge now**: the app's way (``dashboard.core.parity.parity_report``) — the scratch pass once, then
  ``parity.compare`` against the Hugging Face trace the page already made.

The offline default (minilm) on texts of about 12, 128 and 500 tokens; ``--repeats`` rounds, the three taking
turns round by round (``report.alternate``): median times, and each round's ratio to the page's trace. Both
badges must give the same verdict and the same max |Δ|.

    .venv/bin/python benchmarks/parity_reuse.py [--repeats 5] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from report import alternate, publish, ratios, summary  # benchmarks/, this script's folder

import probes
from probes import parity, scratch

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
    lines = [f"parity badge on a new text, offline default (minilm), CPU, {torch.get_num_threads()} threads; "
             f"{args.repeats} rounds, the three taking turns (each round in an order rotated by one): median seconds, "
             "and each round's ratio to the page's trace in that round: median (min–max: every round)", "",
             "| tokens | the page's trace (HF) | badge before: parity.check | badge now: scratch pass + compare | "
             "before / trace, per round | now / trace, per round | same verdict and max abs diff |",
             "|---|---|---|---|---|---|---|"]
    for n, text in texts(model).items():
        hf_trace = probes.run(model, text)  # the trace the page already made, which the badge now reuses
        timing = alternate({
            "page": lambda text=text: probes.run(model, text),
            "before": lambda text=text: parity.check(model, text),
            "now": lambda text=text, hf_trace=hf_trace: parity.compare(hf_trace,
                                                                       probes.run(model, text, source="scratch")),
        }, args.repeats)
        old, new = timing.results["before"], timing.results["now"]
        same = old.passed == new.passed and old.attention_max_abs_diff == new.attention_max_abs_diff
        p, b, w = (timing.median(name) for name in ("page", "before", "now"))
        per_round = ratios(timing.seconds, "page")
        lines.append(f"| {n} | {p * 1000:,.0f} ms | {b * 1000:,.0f} ms | {w * 1000:,.0f} ms | "
                     f"{summary(per_round['before'])} | {summary(per_round['now'])} | {'yes' if same else 'NO'} |")
        print(lines[-1], file=sys.stderr)
    lines += ["", "Before, the badge also ran ahead of the page; now it is drawn after it (an empty sidebar slot "
              "filled once the page has run), so it never delays the first chart."]
    text = "\n".join(lines)
    publish(text, args.out, "parity_reuse.txt")


if __name__ == "__main__":
    main()
