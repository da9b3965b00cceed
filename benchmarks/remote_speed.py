"""A model served from Ray against the same model in the app's process: what a change costs, in the browser and
on the wire.

Starts ``python -m probes serve --model minilm`` (a Ray of this machine, the server one actor of one CPU), then
twice ``streamlit run dashboard/serve.py`` (what ``make app`` runs): once alone (the model in the app's process),
once with ``PROBES_RAY_ADDRESS`` naming that Ray (minilm is then read from the server), and measures the same
changes on Explore in headless Chromium as ``benchmarks/browser_speed.py`` (a 40-token sentence; head, layer and
query token in turn; click → heatmap drawn and the app idle, on the page's own clock). The served run also counts,
call by call, what the app's process sent to the server and got back (``PROBES_WIRE_LOG``, as pickled: Ray's
framing adds a few hundred bytes a call). The goal: a head change through Ray within 1.3× the in-process time.

The two take turns round by round (``--rounds``, ``report.alternate``); the ratio is given per round.

    .venv/bin/python benchmarks/remote_speed.py [--changes 21] [--rounds 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from browser import ARGS, chromium_path  # noqa: E402  (tests/browser.py: the system Chromium)
from browser_speed import KINDS, measure, p90  # noqa: E402
from load_test import start_server  # noqa: E402
from report import alternate, publish, summary  # noqa: E402

GOAL = 1.3


def serve(model: str) -> tuple[subprocess.Popen, str]:
    """``python -m probes serve --model MODEL`` (its own Ray), once it says where it serves."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "probes", "serve", "--model", model], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None  # piped
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if found := re.search(r"on the Ray cluster at (\S+)$", line.strip()):
            return proc, found.group(1)
        if proc.poll() is not None:
            break
    proc.terminate()
    raise SystemExit("the model server did not start")


def wire_meter(log: Path):
    def totals() -> dict:
        rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
        return {"calls": len(rows), "sent": sum(int(r[0]) for r in rows), "received": sum(int(r[1]) for r in rows)}
    return totals


def run(browser, changes: int, warmup: int, address: str | None, log: Path | None) -> dict:
    for key, value in (("PROBES_RAY_ADDRESS", address), ("PROBES_WIRE_LOG", log and str(log))):
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    server, url = start_server([], "serve.py")
    try:
        return measure(browser, url, changes, warmup, meter=wire_meter(log) if log else None)
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=21)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the two, taking turns; the changes are shared out among them")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    holder, address = serve("minilm")
    log = Path(tempfile.mkdtemp(prefix="wire-")) / "wire.log"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
            per_round = max(len(KINDS), args.changes // args.rounds)  # every kind of change each round
            got: dict[str, list[dict]] = {"in-process": [], "Ray": []}

            def contender(name: str, where: str | None, wire: Path | None):
                return lambda: got[name].append(run(browser, per_round, args.warmup, where, wire))

            # the two take turns round by round (report.alternate), so load drift hits them alike
            alternate({"in-process": contender("in-process", None, None), "Ray": contender("Ray", address, log)},
                      args.rounds)
            browser.close()
    finally:
        holder.terminate()
        holder.wait(timeout=60)
    here, there = ({k: [r for one in got[name] for r in one[k]] for k in KINDS} for name in ("in-process", "Ray"))

    def seen(rows: dict, kind: str) -> float:
        return statistics.median(r["seen"] for k in KINDS for r in rows[k] if kind in (k, "all"))

    each = {kind: [seen(b, kind) / seen(a, kind) for a, b in zip(got["in-process"], got["Ray"], strict=True)]
            for kind in (*KINDS, "all")}  # Ray ÷ in-process, round by round
    lines = [f"A change on Explore, minilm, 40 tokens, in headless Chromium: the model in the app's process, and "
             "served from Ray (`python -m probes serve --model minilm`: a local Ray, one actor of one CPU); "
             f"{per_round * args.rounds} changes (head, layer, query in turn) after {args.warmup} not counted; "
             f"{platform.processor() or 'CPU'}, {os.cpu_count()} CPUs, app, server and browser on one machine. "
             f"Commit {commit}. {args.rounds} rounds of {per_round} changes, the two taking turns (each warmed up "
             "anew); medians over the rounds, and Ray ÷ in-process each round's own: median (min–max: every round).",
             "`.venv/bin/python benchmarks/remote_speed.py --out benchmarks/results`", "",
             "| change | n | in-process median ms | Ray median ms | Ray p90 ms | Ray ÷ in-process, per round "
             "| calls to the server | bytes sent | bytes received |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind in (*KINDS, "all"):
        a = [r for k in KINDS for r in here[k]] if kind == "all" else here[kind]
        b = [r for k in KINDS for r in there[k]] if kind == "all" else there[kind]
        ma, mb = statistics.median(r["seen"] for r in a), statistics.median(r["seen"] for r in b)
        per = {w: statistics.median(r[w] for r in b) for w in ("calls", "sent", "received")}
        lines.append(f"| {kind} | {len(b)} | {ma:.0f} | {mb:.0f} | {p90([r['seen'] for r in b]):.0f} | "
                     f"{summary(each[kind])} "
                     f"| {per['calls']:.0f} | {per['sent']:,.0f} | {per['received']:,.0f} |")
    head = statistics.median(each["head"])
    lines += ["", f"A head change through Ray: {head:.2f}× the in-process time (the median of the rounds' own; "
              f"goal ≤ {GOAL}×: "
              f"{'met' if head <= GOAL else 'missed'}). Calls and bytes are medians per change, as pickled (the "
              "app's process to the server: the request and the trace's key; back: the numbers drawn)."]
    publish("\n".join(lines), args.out, "remote_speed.txt")


if __name__ == "__main__":
    main()
