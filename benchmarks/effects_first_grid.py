"""Does it matter?'s first grid, timed: every single-head zero-ablation of the two story sentences on smollm2 (270
heads), as the page computed it before (every measure, the copies' logits and losses included) and as it computes
it now (only the measure it draws: the change of the query token by default, which on a causal model also stops
the copies at the query token; the whole text's loss when picked): the English story "Xiaoming gave the apple to
Xiaohong because she was hungry." and the Chinese one "小明把苹果给了小红，因为她很饿", at the query token the app
opens on (she, 她). The model is loaded first (the sidebar has it before the page opens) and not timed. Wall and
CPU seconds, median of ``--repeats`` rounds (before and after taking turns round by round, ``report.alternate``;
the speed-up is each round's own), in this process, with the threads an app session gets (``probes.threads``,
kind "app"); the goal is a first grid in ≤ 12 s on a two-core machine. ``max |Δ|``: the new column against the
same column of the full table.

    .venv/bin/python benchmarks/effects_first_grid.py [--repeats 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_S = 12.0


def with_cpu(fn, cpu: list[float]):
    """``fn``, recording the CPU seconds of this process each call takes into ``cpu`` (``alternate`` times the
    wall)."""
    def go():
        start = time.process_time()
        got = fn()
        cpu.append(time.process_time() - start)
        return got
    return go


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from report import alternate, publish, ratios, summary

    from dashboard.core.state import STORIES
    from probes.effects.ablation import ablate_each
    from probes.models import load
    from probes.threads import apply
    from probes.tokens import word_positions

    threads = apply("app")
    model = load("smollm2")
    ablate_each(model, "Warm up.", measures=["token_change"])  # first-call costs (tokenizer, kernels)
    lines = [f"Does it matter?'s first grid: every single-head zero-ablation on smollm2 "
             f"({model.n_layers * model.n_heads} heads), model loaded, median of {args.repeats} rounds, before and "
             f"after taking turns; speed-up: each round's own, median (min–max: every round) ({threads.describe()})",
             f"{'text':<13} | tokens | query | measure      | before wall / cpu | after wall / cpu | "
             "speed-up, per round | max |Δ|"]
    lines.append("-" * len(lines[-1]))
    worst = 0.0
    for text, (word, *_) in STORIES.items():
        enc = model.encode(text)
        query = word_positions(enc.tokens[0], text, word)[-1]  # the app's query token: the word's last piece
        # the three take turns round by round (report.alternate), so load drift hits them alike
        cpu: dict[str, list[float]] = {name: [] for name in ("before", "token_change", "loss")}
        contenders: dict[str, Callable[..., object]] = {
            "before": lambda text=text, query=query: ablate_each(model, text, position=query)}
        for measure in ("token_change", "loss"):
            contenders[measure] = lambda text=text, query=query, measure=measure: ablate_each(
                model, text, position=query, measures=[measure])
        timing = alternate({name: with_cpu(fn, cpu[name]) for name, fn in contenders.items()}, args.repeats)
        full = timing.results["before"]
        speedups = {name: [1 / x for x in r] for name, r in ratios(timing.seconds, "before").items()}
        before_wall, before_cpu = timing.median("before"), statistics.median(cpu["before"])
        for measure in ("token_change", "loss"):
            wall, wall_cpu, one = timing.median(measure), statistics.median(cpu[measure]), timing.results[measure]
            if measure == "token_change":
                worst = max(worst, wall)
            diff = float((one[measure] - full[measure]).abs().max())
            label = "English story" if text.isascii() else "Chinese story"  # (CJK is wide: no column)
            lines.append(f"{label:<13} | {len(enc.tokens[0]):>6} | {query:>5} | {measure:<12} | "
                         f"{before_wall:6.1f} / {before_cpu:5.1f} s | {wall:6.1f} / {wall_cpu:5.1f} s | "
                         f"{summary(speedups[measure]):>7} | {diff:.1e}")
    verdict = "met" if worst <= GOAL_S else "NOT met"
    lines.append(f"goal: the default grid (token_change) in ≤ {GOAL_S:.0f} s wall: {verdict} (slowest {worst:.1f} s)")
    publish("\n".join(lines) + "\n", args.out, "effects_first_grid.txt")


if __name__ == "__main__":
    main()
