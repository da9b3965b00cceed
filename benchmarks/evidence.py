"""How long the evidence behind an answer takes, beside the one-sentence answer it replaces.

For the default question ("Xiaoming gave the apple to Xiaohong because she was hungry": who is "she"?) on each
offline model, the time of

* **one sentence**: the old answer, the head with the largest margin on the sentence alone (its forward pass and
  :func:`probes.explain.answering_head`);
* **evidence, first**: the answer box's evidence, what the app computes once per question: the 96 controls built,
  run and read, the head chosen on half and judged on the other half (:func:`probes.evidence.claims.
  question_evidence`), through the app's own cache (``dashboard.core.questions.question_evidence``);
* **evidence, again**: the same question asked again (another visitor, another page): read from that cache.

and the verdict each model's head earns. Goal: evidence, first, within 10 s on SmolLM2 on this machine. A second
table times held-out judging of a probe (``syntactic`` on 200 EWT sentences) against the unsplit run. Contenders
take turns round by round (``report.alternate``), and each ratio is given round by round.

    .venv/bin/python benchmarks/evidence.py [--models minilm,smollm2] [--repeats 3] [--probe-rounds 2]
        [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from report import alternate, publish, ratios, summary  # noqa: E402

TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry."
QUESTION = ("she", "Xiaohong", "Xiaoming")
GOAL_S = 10.0


def _timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,smollm2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probe-items", type=int, default=200)
    parser.add_argument("--probe-rounds", type=int, default=2, help="rounds of unsplit and held-out judging")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    import torch

    import probes
    from dashboard.core import models, questions
    from probes import explain
    from probes.evidence import probes as judged
    from probes.evidence.claims import question_evidence
    from probes.heads import profile

    lines = [f"the evidence behind the default question, {platform.machine()}, {torch.get_num_threads()} torch "
             f"threads (os.cpu_count() = {os.cpu_count()}); median of {args.repeats} rounds, the one-sentence answer "
             "and the evidence taking turns; first ÷ one: each round's own, median (min–max: every round)",
             "", "model     one sentence   evidence, first   first ÷ one, per round   evidence, again   chosen head   "
             "verdict"]
    rows = []
    for name in args.models.split(","):
        model = probes.load(name)
        probes.run(model, TEXT)  # warm: the first pass pays for lazy imports
        question_evidence(model, TEXT, *QUESTION)
        # the one-sentence answer and the evidence take turns round by round (report.alternate)
        timing = alternate({
            "one": lambda model=model: explain.answering_head(probes.run(model, TEXT), TEXT, *QUESTION),
            "first": lambda model=model: question_evidence(model, TEXT, *QUESTION)}, args.repeats)
        one, first, ev = timing.median("one"), timing.median("first"), timing.results["first"]
        per_round = ratios(timing.seconds, "one")["first"]
        inp = models.Input(name, TEXT, None, "hf", "eager", False)
        questions.question_evidence(inp, questions.Asked(*QUESTION))  # into the app's cache
        again, _ = _timed(lambda inp=inp: questions.question_evidence(inp, questions.Asked(*QUESTION)), args.repeats)
        head = f"{ev.head[0]}.{ev.head[1]}"
        rows.append((name, first))
        lines.append(f"{name:<9} {one:>10.2f} s   {first:>13.2f} s   {summary(per_round):>14}   "
                     f"{again * 1000:>12.2f} ms   {head:>11}   {ev.verdict}: {ev.said}")
    smol = [t for name, t in rows if name == "smollm2"]
    if smol:
        lines += ["", f"goal: evidence within {GOAL_S:.0f} s on smollm2: {smol[0]:.2f} s, "
                      + ("met" if smol[0] <= GOAL_S else "missed")]

    lines += ["", f"held-out judging of a probe (syntactic, {args.probe_items} EWT dev sentences), {args.probe_rounds} "
              "rounds, the two taking turns: median seconds, and each round's ratio: median (min–max: every round)",
              "model     unsplit   judged held out   ratio, per round"]
    for name in args.models.split(","):
        model = probes.load(name)
        timing = alternate({"unsplit": lambda model=model: profile.run_probe(model, "syntactic", args.probe_items),
                            "judged": lambda model=model: judged.run_probe(model, "syntactic", args.probe_items)},
                           args.probe_rounds)
        plain, split = timing.median("unsplit"), timing.median("judged")
        lines.append(f"{name:<9} {plain:>6.2f} s   {split:>13.2f} s   "
                     f"{summary(ratios(timing.seconds, 'unsplit')['judged'])}")
    publish("\n".join(lines), args.out, "evidence.txt")


if __name__ == "__main__":
    main()
