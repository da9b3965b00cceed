"""Head effects, timed: every single-head zero-ablation of one ~40-token sentence, batched (copies of the text
that start at the ablated head's layer from the clean pass's input) against one whole pass per head, on minilm
and smollm2 (goal: batched ≥ 5× faster); and head importance over EWT dev sentences, seconds per sentence.
Median of ``--repeats`` rounds, batched and one pass per head taking turns round by round (``report.alternate``;
the table gives each round's speed-up), in this process, with torch's threads as ``probes.threads`` chooses.

    .venv/bin/python benchmarks/ablation.py [--sentences 200] [--repeats 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SENTENCE = ("Xiaoming gave the apple to Xiaohong because she was hungry, and Xiaohong thanked him warmly before "
            "the two friends walked home together along the quiet river in the late golden evening light.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from report import alternate, publish, ratios, summary

    from probes.datasets.catalog import read_items, texts
    from probes.effects.ablation import ablate_each
    from probes.effects.importance import importance
    from probes.models import load
    from probes.threads import apply

    threads = apply("profile")
    lines = [f"# head effects ({threads.describe()})", "",
             "## every single-head ablation of one sentence (zero), the two taking turns: median of "
             f"{args.repeats} rounds (smollm2: 1); speed-up: each round's own, median (min–max: every round)", "",
             "| model | tokens | heads | batched | one pass per head | speed-up, per round | max |Δ| |",
             "|---|---|---|---|---|---|---|"]
    sentences = texts(read_items("ewt-dev"))[:args.sentences]
    models = {}
    for name in ("minilm", "smollm2"):
        model = models[name] = load(name)
        ablate_each(model, SENTENCE)  # warm
        # the two take turns round by round, so load drift hits them alike (one round on smollm2: the naive way is
        # 270 passes)
        timing = alternate({"batched": lambda model=model: ablate_each(model, SENTENCE),
                            "naive": lambda model=model: ablate_each(model, SENTENCE, batched=False)},
                           1 if name == "smollm2" else args.repeats)
        batched, naive = timing.median("batched"), timing.median("naive")
        speedup = [1 / x for x in ratios(timing.seconds, "naive")["batched"]]  # naive ÷ batched, each round
        a, b = timing.results["batched"], timing.results["naive"]
        cols = [c for c in a.columns if c not in ("layer", "head")]
        diff = float((a[cols] - b[cols]).abs().to_numpy().max())
        n = int(model.encode(SENTENCE).attention_mask.sum())
        lines.append(f"| {name} | {n} | {model.n_layers * model.n_heads} | {batched:.2f} s | {naive:.2f} s | "
                     f"{summary(speedup)} | {diff:.1e} |")
    lines += ["", f"## importance over the first {args.sentences} EWT dev sentences", "",
              "| model | what | sentences | seconds | per sentence |", "|---|---|---|---|---|"]
    for name, model in models.items():
        for what, ablation, count in (("gradient", False, args.sentences),
                                      ("gradient + exact ablation", True,
                                       args.sentences if name == "minilm" else max(1, args.sentences // 10))):
            start = time.perf_counter()
            importance(model, sentences[:count], ablation=ablation)
            took = time.perf_counter() - start
            lines.append(f"| {name} | {what} | {count} | {took:.1f} s | {took / count * 1000:.0f} ms |")
    publish("\n".join(lines) + "\n", args.out, "ablation.md")


if __name__ == "__main__":
    main()
