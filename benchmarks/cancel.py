"""Cancel, as a person sees it: the click on **Cancel** beside a progress bar → the page idle again, with no bar.

Issue 44 asks that Cancel stop the work "within 2 s and leave the page usable". The work stops at its next step
(one head of the ablation grid, one pass of path patching, one step of the float64 proof): Streamlit ends the run
at the bar's next update and starts the next run, which draws the page without the work (it says it was cancelled,
or shows the button again). This starts ``streamlit run dashboard/serve.py`` (what ``make app`` runs) on a free
loopback port, opens each page on smollm2 (the offline decoder: the slowest steps the app has offline) in headless
Chromium, starts the work, waits ``--wait`` seconds into it, clicks Cancel and times, in Python:

* **idle**: click → the app's ``[data-testid=stApp]`` at ``data-test-script-state=notRunning`` with no progress bar
  on the page (the work stopped and the page drawn again without it). The goal is at most 2 s.

Each round runs every kind of work once, in an order rotated by one a round (``report.alternate``), so a drift in the
machine's load hits them alike. Writes ``cancel.txt`` under ``--out`` (default: a new temporary folder, printed).

    .venv/bin/python benchmarks/cancel.py [--rounds 3] [--wait 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from browser import launch, sync_playwright  # noqa: E402  (tests/browser.py: the system Chromium)
from load_test import IDLE, start_server  # noqa: E402
from report import alternate, publish  # noqa: E402

GOAL_S = 2.0
STORY = "Xiaoming gave the apple to Xiaohong because she was hungry."
TEXT = ("The old lighthouse keeper climbed the narrow stairs every evening to light the lamp. One stormy night, she "
        "noticed a small boat struggling against the waves near the rocks. She waved her lantern and shouted until "
        "the sailors saw the light and turned away from danger before the storm grew worse.")  # 56 tokens
HANG_MS = 600_000
BAR = "[data-testid=stMain] [data-testid=stProgress]"


def _grid(page, url: str) -> None:
    """Does it matter? on smollm2: every head removed in turn (270 copies of the text)."""
    page.goto(f"{url}/?model=smollm2&page=effects&text=" + urllib.parse.quote(TEXT))


def _patching(page, url: str) -> None:
    """Path patching of every head of layers 0–28 into head 29.0 (the story four times, 'she' → 'he')."""
    text = " ".join([STORY] * 4)
    page.goto(f"{url}/?model=smollm2&page=circuit&layer=29&head=0&text=" + urllib.parse.quote(text))
    field = page.get_by_role("textbox", name="Corrupted text (the same number of tokens as the sidebar's)")
    field.fill(text[:text.rindex("she")] + "he" + text[text.rindex("she") + 3:])
    field.press("Enter")
    page.get_by_role("button", name="Run path patching").click(timeout=HANG_MS)


def _proof(page, url: str) -> None:
    """The float64 proof on smollm2's own pass (a float64 copy, both passes, every layer compared)."""
    page.goto(f"{url}/?model=smollm2&page=parity&source=scratch&backend=eager&text=" + urllib.parse.quote(TEXT * 4))
    page.get_by_role("button", name="Prove in float64").click(timeout=HANG_MS)


WORK = {"ablation grid": _grid, "path patching": _patching, "float64 proof": _proof}


def cancel_seconds(browser, url: str, start, wait: float) -> float:
    """Start the work (``start(page, url)``), ``wait`` seconds into it click Cancel: seconds until the page is idle
    with no progress bar."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        start(page, url)
        page.wait_for_selector(BAR, timeout=HANG_MS)
        time.sleep(wait)
        button = page.get_by_role("button", name="Cancel")
        if not button.count():
            raise SystemExit("the work ended before Cancel could be clicked: give a smaller --wait")
        clicked = time.perf_counter()
        button.click(timeout=HANG_MS)
        page.wait_for_function(f"""() => document.querySelector('{IDLE}') && !document.querySelector('{BAR}')""",
                               timeout=HANG_MS, polling=20)
        return time.perf_counter() - clicked
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wait", type=float, default=3.0, help="seconds into the work before the click")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    server, url = start_server([], script="serve.py")
    try:
        with sync_playwright() as p:
            browser = launch(p)
            # warm: the model loaded and the pages' traces cached, so a round times the work's stop, not a load
            for start in WORK.values():
                cancel_seconds(browser, url, start, 0.5)
            seconds: dict[str, list[float]] = {name: [] for name in WORK}
            alternate({name: (lambda n=name, s=start: seconds[n].append(cancel_seconds(browser, url, s, args.wait)))
                       for name, start in WORK.items()}, args.rounds)  # the click's seconds, not the whole round's
            browser.close()
    finally:
        server.terminate()
    lines = [f"Cancel → the page idle with no progress bar (smollm2, {args.wait:g} s into the work; "
             f"{platform.node()}, {os.cpu_count()} CPUs, {args.rounds} rounds, contenders alternated)",
             f"goal: at most {GOAL_S:g} s", "",
             f"{'work':<16} {'median s':>9} {'max s':>7}  each round"]
    for name, got in seconds.items():
        lines.append(f"{name:<16} {statistics.median(got):>9.2f} {max(got):>7.2f}  "
                     + " ".join(f"{s:.2f}" for s in got))
    publish("\n".join(lines), args.out, "cancel.txt")


if __name__ == "__main__":
    main()
