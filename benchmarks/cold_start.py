"""Cold start: how long a person waits for the first heatmap after ``streamlit run``, beside what the
library itself needs for the same view (start Python, import ``probes``, load the model, one trace), in
one run, interleaved.

* **library**: a fresh ``python -c`` that imports probes, loads the offline default and traces the default
  sentence with the default source, timed from the process's start to its exit;
* **app**: ``streamlit run`` started on a free loopback port, both ways: ``dashboard/serve.py`` (what
  ``make app`` runs: the same app, which starts loading the default view when the server starts) and
  ``dashboard/app.py`` (the script alone: nothing happens until a browser connects). Chromium is already
  open, as a person's browser would be; the page is opened as soon as the server answers its health
  check. Timed from the server's start: the health check answered, the page heading drawn, the first
  heatmap drawn in Chromium (the page's first Vega chart has painted), and the sidebar's parity badge
  drawn (it comes after the page, so the scratch pass it needs never delays the first chart).

Median of ``--runs`` (default 5) of each, runs alternating. Goal: app / library ≤ 1.25.

    .venv/bin/python benchmarks/cold_start.py [--runs 5] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from browser import ARGS, chromium_path  # noqa: E402
from load_test import start_server  # noqa: E402
from report import publish  # noqa: E402  (benchmarks/, this script's folder)

GOAL = 1.25
FIRST_CHART = "() => !!document.querySelector('[data-testid=stMain] [data-testid=stVegaLiteChart] canvas, " \
              "[data-testid=stMain] [data-testid=stVegaLiteChart] svg.marks')"
BADGE = ("() => [...document.querySelectorAll('[data-testid=stSidebar] *')]"
         ".some(e => /Parity/.test(e.textContent || ''))")
LIBRARY = ("import probes\n"
           "from dashboard.core.state import ViewState\n"
           "v = ViewState()\n"
           "model = probes.load(probes.OFFLINE_DEFAULT)\n"
           "probes.run(model, v.text, source=v.source)\n")


def env() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")


def library_once() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", LIBRARY], cwd=ROOT, env=env(), check=True)
    return time.perf_counter() - t0


def app_once(browser, script: str) -> dict:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    t0 = time.perf_counter()
    server, url = start_server([], script, poll=0.02)
    try:
        served = time.perf_counter() - t0
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
        page.goto(url)
        page.get_by_role("heading", name="minilm: layer 1, head 2").wait_for(timeout=120_000)
        heading = time.perf_counter() - t0
        page.wait_for_function(FIRST_CHART, timeout=120_000, polling=20)
        chart = time.perf_counter() - t0
        page.wait_for_function(BADGE, timeout=120_000, polling=20)
        badge = time.perf_counter() - t0
    finally:
        page.close()
        server.terminate()
        server.wait(timeout=30)
    return {"served": served, "heading": heading, "chart": chart, "badge": badge}


SCRIPTS = {"serve.py": "`make app`: streamlit run dashboard/serve.py (warm start)",
           "app.py": "streamlit run dashboard/app.py (no warm start)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="folder for cold_start.txt")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    library: list[float] = []
    app: dict[str, list[dict]] = {script: [] for script in SCRIPTS}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
        library_once()  # warm the OS file cache for all (not counted)
        app_once(browser, "app.py")
        for run in range(args.runs):
            library.append(library_once())
            for script in SCRIPTS:
                app[script].append(app_once(browser, script))
            print(f"run {run + 1}: library {library[-1]:.2f} s, "
                  + ", ".join(f"{s} chart {app[s][-1]['chart']:.2f} s" for s in SCRIPTS), file=sys.stderr)
        browser.close()

    lib = statistics.median(library)
    lines = [
        f"cold start, offline default (minilm), default sentence and view; {platform.processor() or 'CPU'}, "
        f"{os.cpu_count()} CPUs; median of {args.runs} runs each, alternating; seconds from the process's start",
        "",
        "| run | step | median s | min s | max s |",
        "|---|---|---|---|---|",
        f"| library | python start, import probes, load the model, one trace | {lib:.2f} | {min(library):.2f} | "
        f"{max(library):.2f} |",
    ]
    for script, title in SCRIPTS.items():
        for key, name in [("served", "server answers its health check"), ("heading", "page heading drawn"),
                          ("chart", "**first heatmap drawn** (Chromium)"),
                          ("badge", "parity badge drawn (after the page)")]:
            values = [r[key] for r in app[script]]
            lines.append(f"| {title} | {name} | {statistics.median(values):.2f} | {min(values):.2f} | "
                         f"{max(values):.2f} |")
    lines.append("")
    for script, title in SCRIPTS.items():
        ratio = statistics.median(r["chart"] for r in app[script]) / lib
        lines.append(f"{title}: first heatmap / library = {ratio:.2f}× (goal ≤ {GOAL}×: "
                     f"{'met' if ratio <= GOAL else 'not met'})")
    text = "\n".join(lines)
    publish(text, args.out, "cold_start.txt")


if __name__ == "__main__":
    main()
