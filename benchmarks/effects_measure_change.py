"""Does it matter?'s measure changed, timed: the first grid and then a second measure of the same text, on smollm2
(270 heads, zero-ablation, the two story sentences at the query token the app opens on), as the page computed them
before (each measure its own run of every head's copy: :func:`probes.effects.ablation.ablate_each` with that
measure) and now (one run that keeps every copy's last hidden state, :func:`~probes.effects.ablation.ablate_each_kept`,
each measure then read from it: :meth:`~probes.effects.ablation.EachAblated.frame`). The model is loaded first and not
timed. Wall seconds, median of ``--repeats`` rounds, before and after taking turns round by round
(``report.alternate``), with an app session's threads (``probes.threads``, kind "app"); the load average is printed
beside them (a shared machine). ``max |Δ|``: the second measure read from the kept copies against its own run.

    .venv/bin/python benchmarks/effects_measure_change.py [--repeats 2] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

FIRST, SECOND = "token_change", "loss"  # the page's default measure on a decoder, then the one a student picks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from report import alternate, publish

    from dashboard.core.state import STORIES
    from probes.effects.ablation import ablate_each, ablate_each_kept
    from probes.models import load
    from probes.threads import apply
    from probes.tokens import word_positions

    threads = apply("app")
    model = load("smollm2")
    ablate_each(model, "Warm up.", measures=[FIRST])
    lines = [f"Does it matter?, a measure changed: {FIRST} first, then {SECOND}, every single-head zero-ablation on "
             f"smollm2, model loaded, median of {args.repeats} rounds, before and after taking turns "
             f"({threads.describe()})",
             f"{'text':<13} | before: first / change | after: first / change | max |Δ| | load (1/5 min)"]
    lines.append("-" * len(lines[-1]))
    for text, (word, *_) in STORIES.items():
        query = word_positions(model.encode(text).tokens[0], text, word)[-1]
        kept: dict = {}

        def before(text=text, query=query):
            return ablate_each(model, text, position=query, measures=[FIRST])

        def before_change(text=text, query=query):
            return ablate_each(model, text, position=query, measures=[SECOND])

        def after(text=text, query=query, kept=kept):
            kept["each"] = ablate_each_kept(model, text)
            return kept["each"].frame([FIRST], query)

        def after_change(query=query, kept=kept):
            return kept["each"].frame([SECOND], query)

        timing = alternate({"before": before, "after": after}, args.repeats)
        change = alternate({"before": before_change, "after": after_change}, args.repeats)
        diff = float((change.results["after"][SECOND] - change.results["before"][SECOND]).abs().max())
        busy = "/".join(f"{x:.1f}" for x in os.getloadavg()[:2])
        label = "English story" if text.isascii() else "Chinese story"
        med = lambda got, name: statistics.median(got.seconds[name])  # noqa: E731
        lines.append(f"{label:<13} | {med(timing, 'before'):8.1f} / {med(change, 'before'):6.1f} s | "
                     f"{med(timing, 'after'):7.1f} / {med(change, 'after'):6.2f} s | {diff:.1e} | {busy}")
    publish("\n".join(lines) + "\n", args.out, "effects_measure_change.txt")


if __name__ == "__main__":
    main()
