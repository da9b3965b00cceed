"""The KV lab's waits on smollm2, before and after: the default chart (every run the page makes for its default
policies and budgets, the full cache's first, as the page makes them: ``stream(..., method="masked")``), and "Cut
each head alone" at the default policy (sinks + window at 64 keys): :func:`probes.kv.stream.head_effects` (a
token-by-token shadow, then a whole masked pass per head) against :func:`probes.kv.layered.head_effects_layered`
(the shadow layer by layer, each cut from its head's layer and first eviction on). The chart before: 256 tokens of
the EWT text, budgets 16, 32, 64, 128; after: the page's defaults now (``KVState``). The cut is timed on the same
text both ways (``--tokens``), and its largest loss difference printed. Model loaded first, not timed; an app
session's threads (``probes.threads``, kind "app"); before and after take turns (``report.alternate``); the load
average is printed beside each row (a shared machine).

    .venv/bin/python benchmarks/kv_lab.py [--rounds 1] [--tokens 256] [--out benchmarks/results]
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

BEFORE_TOKENS, BEFORE_BUDGETS, BEFORE_POLICIES = 256, "16,32,64,128", "window,sinks,h2o"  # the defaults before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=256, help="the EWT text's length for the cut, both ways")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from report import alternate, publish

    from dashboard.app_pages.kv.state import KVState
    from probes.kv import parse, stream as kvstream, sweep as kv
    from probes.kv.layered import head_effects_layered
    from probes.kv.texts import ewt_text
    from probes.models import load
    from probes.threads import apply

    threads = apply("app")
    model = load("smollm2")
    now = KVState()
    load_avg = lambda: "/".join(f"{x:.1f}" for x in os.getloadavg()[:2])  # noqa: E731

    def chart(tokens: int, policies: str, budgets: str):
        def go():
            text = ewt_text(model, tokens)
            n = int(kvstream.token_ids(model, text).shape[1])
            plan = kv.sweep_plan(policies.split(","), [int(b) for b in budgets.split(",")], n, now.kv_sinks)
            for name in ["full"] + [r.policy.name for r in plan.runs]:
                kvstream.stream(model, text, parse(name), method="masked")
            return n, len(plan.runs) + 1
        return go

    kvstream.stream(model, ewt_text(model, 32), parse("full"), method="masked")  # first-call costs
    lines = [f"The KV lab on smollm2, model loaded, median of {args.rounds} round(s), before and after taking turns "
             f"({threads.describe()})", "wait | before | after | load (1/5 min)", "-" * 60]
    charts = alternate({"before": chart(BEFORE_TOKENS, BEFORE_POLICIES, BEFORE_BUDGETS),
                        "after": chart(now.kv_tokens, now.kv_policies, now.kv_budgets)}, args.rounds)
    (n0, runs0), (n1, runs1) = charts.results["before"], charts.results["after"]
    med = lambda got, name: statistics.median(got.seconds[name])  # noqa: E731
    lines.append(f"default chart ({n0} tokens, {runs0} runs → {n1} tokens, {runs1} runs) | "
                 f"{med(charts, 'before'):.1f} s | {med(charts, 'after'):.1f} s | {load_avg()}")
    policy = kv.policy_at(now.kv_policy, now.kv_budget, now.kv_sinks)
    text = ewt_text(model, args.tokens)
    n = int(kvstream.token_ids(model, text).shape[1])
    cuts = alternate({"before": lambda: kvstream.head_effects(model, text, [policy]),
                      "after": lambda: head_effects_layered(model, text, [policy])}, args.rounds)
    diff = max(abs(a["loss_change"] - b["loss_change"])
               for a, b in zip(cuts.results["before"].rows, cuts.results["after"].rows, strict=True))
    lines.append(f"cut each head alone ({policy.name}, {n} tokens, {len(cuts.results['after'].rows)} heads; "
                 f"max |Δ loss| {diff:.1e}) | {med(cuts, 'before'):.1f} s | {med(cuts, 'after'):.1f} s | {load_avg()}")
    publish("\n".join(lines) + "\n", args.out, "kv_lab.txt")


if __name__ == "__main__":
    main()
