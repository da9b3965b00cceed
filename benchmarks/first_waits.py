"""First waits: every page's time to "page drawn" at the defaults, on a fresh server (cold) and again in a new session
of the same server (warm), on both offline models, beside the goal (issue 61: no first wait over 5 s; the KV lab's
default chart 10 s; its "Cut each head alone" 30 s).

For each model and page: ``streamlit run dashboard/app.py`` (``--script serve.py``: what ``make app`` runs, which
loads the default view when the server starts) on a free loopback port, then headless Chromium (Playwright) opens
``/?page=<page>&model=<model>`` once the server answers its health check (cold: the model's load is in it), and then
once more in a new browser context, a new session of the same server (warm). Each is timed from the page's request:

* **drawn**: the page's heading is in the main area and either its first chart has painted, or the app is idle (a
  page with no chart at its defaults), or (Start here) its list is whole: :data:`DRAWN_ALSO`;
* **idle**: the app is idle for good (``data-test-script-state=notRunning`` after its last run: still so
  :data:`SETTLE_MS` later, which is not counted) and the page drawn (a chart can paint just after the run ends):
  everything the defaults draw is on screen, the answer box's verdict too on Explore and Find and the findings on
  Start here, which come after the page.

The goal is judged on *drawn* for Explore, Find and Start here (their evidence runs after the page has drawn, by
design: its time is the idle column) and on *idle* for every other page; on the KV lab, the default chart is part of
its page. With ``--cut`` the warm KV lab session then clicks "Cut each … heads alone" and times it until the app is
idle (goal 30 s). Prints one table and writes ``first_waits.txt`` under ``--out``; the load average is printed
beside it (a shared machine slows every figure).

    .venv/bin/python benchmarks/first_waits.py [--models minilm smollm2] [--pages explore find] [--cut]
        [--script app.py] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from browser import ARGS, chromium_path  # noqa: E402  (tests/browser.py: the system Chromium)
from load_test import start_server  # noqa: E402
from report import publish  # noqa: E402

GOAL_S = 5.0
GOALS = {"kv": 10.0}  # the KV lab's default chart
CUT_GOAL_S = 30.0
AFTER_THE_PAGE = ("explore", "find", "start")  # pages whose heavy evidence comes after the page has drawn
# what shows a page without a chart drawn before it is idle: Start here's list is whole once its first finding's bar
# is up (every item is drawn before any finding is computed); the findings fill in after, to idle
DRAWN_ALSO = {"start": "[data-testid=stProgress]"}
TIMEOUT_MS = 600_000
SETTLE_MS = 1500  # the app idle this long with the page drawn: done (a run can follow a run: a page switch, a rerun)
PROBE = """
(() => {
  window.__waits = {drawn: -1, idle: -1, ran: false, running: false};
  const check = () => {
    const app = document.querySelector('[data-testid=stApp]');
    if (!app) return;
    const state = app.getAttribute('data-test-script-state');
    if (state === 'running') { window.__waits.ran = true; window.__waits.running = true; }
    const idle = window.__waits.ran && state === 'notRunning';
    if (idle && window.__waits.running) { window.__waits.running = false; window.__waits.idle = performance.now(); }
    const main = document.querySelector('[data-testid=stMain]');
    const heading = main && main.querySelector('[data-testid=stHeading]');
    const chart = main && main.querySelector('[data-testid=stVegaLiteChart] canvas, '
                                             + '[data-testid=stVegaLiteChart] svg.marks');
    const also = window.__drawnAlso && main && main.querySelector(window.__drawnAlso);
    if (heading && (chart || idle || also) && window.__waits.drawn < 0) window.__waits.drawn = performance.now();
  };
  new MutationObserver(check).observe(document, {subtree: true, childList: true, attributes: true});
})();
"""
DONE = f"""() => window.__waits && window.__waits.drawn >= 0 && window.__waits.idle >= 0 && !window.__waits.running
  && performance.now() - Math.max(window.__waits.idle, window.__waits.drawn) > {SETTLE_MS}"""


def open_once(browser, url: str, page_key: str, model: str) -> tuple[float, float, Any, Any]:
    """Open a link to ``page_key`` on ``model`` in a new session: seconds to drawn and to idle, and the open page."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    if page_key in DRAWN_ALSO:
        context.add_init_script(f"window.__drawnAlso = {DRAWN_ALSO[page_key]!r};")
    context.add_init_script(PROBE)
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
    page.goto(f"{url}/?page={page_key}&model={model}")
    page.wait_for_function(DONE, timeout=TIMEOUT_MS, polling=50)
    drawn, idle = page.evaluate("[window.__waits.drawn, window.__waits.idle]")  # from the navigation's start
    return drawn / 1000, max(drawn, idle) / 1000, page, context


def cut_each_head(page) -> float | None:
    """On the KV lab, drawn: click "Cut each … heads alone" and wait until the app is idle for good (seconds, on the
    page's clock, from just before the click); None where the page offers no such button (an encoder)."""
    button = page.get_by_role("button", name="heads alone")
    if not button.count():
        return None
    page.evaluate("window.__waits.ran = false; window.__waits.running = false; window.__waits.idle = -1")
    clicked = page.evaluate("performance.now()")
    button.click()
    page.wait_for_function(f"() => window.__waits.idle >= 0 && !window.__waits.running && performance.now() - "
                           f"window.__waits.idle > {SETTLE_MS}", timeout=TIMEOUT_MS, polling=100)
    return (page.evaluate("window.__waits.idle") - clicked) / 1000


def main() -> None:
    import dashboard.app_pages  # noqa: F401 - registers every page, in menu order
    from dashboard.core.pages import PAGES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["minilm", "smollm2"])
    parser.add_argument("--pages", nargs="+", default=list(PAGES), choices=list(PAGES))
    parser.add_argument("--script", default="app.py", choices=["app.py", "serve.py"])
    parser.add_argument("--cut", action="store_true", help="also time the KV lab's \"Cut each head alone\" (warm)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    rows, loads = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
        for model in args.models:
            for key in args.pages:
                server, url = start_server([], script=args.script, poll=0.05)
                try:
                    loads.append(os.getloadavg()[0])
                    cold = open_once(browser, url, key, model)
                    cold[3].close()
                    warm = open_once(browser, url, key, model)
                    cut = cut_each_head(warm[2]) if args.cut and key == "kv" else None
                    warm[3].close()
                finally:
                    server.terminate()
                    server.wait(timeout=30)
                rows.append((model, key, cold[:2], warm[:2], cut))
                if args.out is not None:  # the table so far, in case a later page never ends
                    args.out.mkdir(parents=True, exist_ok=True)
                    (args.out / "first_waits.partial.txt").write_text(table(rows, loads, args.script) + "\n")
                print(f"{model} {key}: cold {cold[0]:.1f}/{cold[1]:.1f} s, warm {warm[0]:.1f}/{warm[1]:.1f} s"
                      + (f", cut each head {cut:.1f} s" if cut is not None else "")
                      + f" (load {loads[-1]:.1f})", file=sys.stderr)
        browser.close()

    publish(table(rows, loads, args.script), args.out, "first_waits.txt")


def table(rows: list, loads: list[float], script: str) -> str:
    """The measurements as the table docs/benchmarks.md quotes, with the load average they ran under."""
    lines = [f"first waits: each page at its defaults, seconds from the link's request to drawn / idle; cold = a fresh "
             f"`streamlit run dashboard/{script}` (the model's load included), warm = a new session of the same "
             f"server; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
             f"{min(loads):.1f}–{max(loads):.1f} while it ran", "",
             "| model | page | cold drawn | cold idle | warm drawn | warm idle | goal | met (cold and warm) |",
             "|---|---|---|---|---|---|---|---|"]
    for model, key, (cold_drawn, cold_idle), (warm_drawn, warm_idle), cut in rows:
        cold_idle, warm_idle = max(cold_drawn, cold_idle), max(warm_drawn, warm_idle)
        goal = GOALS.get(key, GOAL_S)
        judged = (cold_drawn, warm_drawn) if key in AFTER_THE_PAGE else (cold_idle, warm_idle)
        met = "yes" if max(judged) <= goal else "**no**"
        lines.append(f"| {model} | {key} | {cold_drawn:.1f} | {cold_idle:.1f} | {warm_drawn:.1f} | {warm_idle:.1f} | "
                     f"{goal:g} s ({'drawn' if key in AFTER_THE_PAGE else 'idle'}) | {met} |")
        if cut is not None:
            lines.append(f"| {model} | kv: cut each head alone (warm, the click → idle) | | | | {cut:.1f} | "
                         f"{CUT_GOAL_S:g} s | {'yes' if cut <= CUT_GOAL_S else '**no**'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
