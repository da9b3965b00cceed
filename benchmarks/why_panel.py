"""Click → "Why this weight?" drawn in Chromium: how long a person waits for the QK attribution panel on Explore.

Starts ``streamlit run dashboard/serve.py`` (what ``make app`` runs) on a free loopback port and opens Explore on
an offline model (``--model``: minilm, the default, or smollm2) with a 40-token sentence (40 tokens on both) at layer
1, head 2, in headless Chromium through Playwright.
Then it clicks heatmap cells in turn (a new (query, key) cell each time, on or left of the diagonal), a few warm-up
clicks first (not counted). Each click is timed on the page's own clock (``performance.now()``), from the
``pointerdown`` of the click to the later of: the panel's grid drawn (an SVG text holding the new cell's title,
"(key), score …") and the app idle again (``data-test-script-state=notRunning``). The goal: a median of at most
250 ms on both models (issue 61).

    .venv/bin/python benchmarks/why_panel.py [--model minilm] [--clicks 12] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # dashboard.core.charts, for the heatmap's cell size

from browser import ARGS, Cells, chromium_path  # noqa: E402  (tests/browser.py: the system Chromium)
from load_test import TEXT, start_server  # noqa: E402
from report import publish  # noqa: E402

GOAL_MS = 250.0
TOKENS = 40  # the sentence's tokens on minilm ([CLS] and [SEP] included) and on smollm2: the heatmap's rows
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"
PROBE = """
(() => {
  window.__why = {down: -1, idle: -1, sent: -1};
  document.addEventListener('pointerdown', () => {
    window.__why.down = performance.now(); window.__why.idle = -1; window.__why.sent = -1;
    window.__why.first = -1; window.__why.last = -1;
  }, true);
  const listen = WebSocket.prototype.addEventListener;  // when the server's messages arrive
  WebSocket.prototype.addEventListener = function (type, fn, ...rest) {
    if (type === 'message') {
      const wrapped = (event) => {
        if (window.__why.sent >= 0) {
          const t = performance.now();
          if (window.__why.first < 0) window.__why.first = t;
          window.__why.last = t;
        }
        return fn.call(this, event);
      };
      return listen.call(this, type, wrapped, ...rest);
    }
    return listen.call(this, type, fn, ...rest);
  };
  const send = WebSocket.prototype.send;  // when the browser sends the click to the server (its rerun request)
  WebSocket.prototype.send = function (data) {
    if (window.__why.down >= 0 && window.__why.sent < 0) window.__why.sent = performance.now();
    return send.call(this, data);
  };
  new MutationObserver(() => {
    const app = document.querySelector('[data-testid=stApp]');
    if (app && app.getAttribute('data-test-script-state') === 'notRunning') window.__why.idle = performance.now();
  }).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-test-script-state']});
})();
"""
DRAWN = """
(title) => [...document.querySelectorAll('svg text')].some(t => title.every(part => t.textContent.includes(part)))
  && window.__why.idle > window.__why.down
"""


def measure(browser, url: str, clicks: int, warmup: int, model: str = "minilm") -> tuple[list[float], ...]:
    context = browser.new_context(viewport={"width": 1400, "height": 2000})  # the whole 40-row heatmap in view
    context.add_init_script(PROBE)
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
    page.goto(f"{url}/?text={urllib.parse.quote(TEXT)}&layer=1&head=2&query=5&model={model}")
    page.get_by_role("heading", name=f"{model}: layer 1, head 2", exact=True).wait_for(timeout=300_000)
    page.wait_for_selector(IDLE, timeout=300_000)
    page.wait_for_function("document.querySelectorAll('[data-testid=stVegaLiteChart]').length >= 3",
                           timeout=120_000)
    page.wait_for_timeout(1000)
    locate = Cells(page, TOKENS)
    times, sent, server, streamed, drawn = [], [], [], [], []
    for i in range(warmup + clicks):
        query, key = 20 + i % 15, 3 + (i * 7) % 15
        at = locate.centre(query, key)
        if locate.cell(*at) != (query, key):  # (the hover is before the click's pointerdown: not timed)
            print(f"click {i}: the mouse at {at} is over {locate.cell(*at)}, not {(query, key)}: measuring the cells "
                  f"again (were {locate.width:.2f} × {locate.height:.2f} px)", file=sys.stderr)
            locate = Cells(page, TOKENS)
            at = locate.centre(query, key)
            if locate.cell(*at) != (query, key):
                raise SystemExit(f"click {i}: cannot find cell {(query, key)} under the mouse")
        page.mouse.click(*at)
        title = [f"({query}) → ", f"({key}), score"]  # the new cell's grid title
        if os.environ.get("WHY_SIGNAL") == "column":  # (measuring the page without the panel)
            title = [f"Who attends to '{key}:"]
        try:
            page.wait_for_function(DRAWN, arg=title, timeout=60_000, polling=10)
        except Exception:
            page.screenshot(path="/tmp/why_fail.png")
            print("click", i, query, key, page.url, page.evaluate("window.__why"), file=sys.stderr)
            raise
        now, down, sent_at, first, last = page.evaluate("[performance.now(), window.__why.down, window.__why.sent, "
                                                        "window.__why.first, window.__why.last]")
        if i >= warmup:
            times.append(now - down)
            sent.append(sent_at - down)
            server.append(first - sent_at)  # the click sent → the server's first message: the fragment's script
            streamed.append(last - first)  # its first message → its last: the rest of the script, as it streams
            drawn.append(now - last)  # its last message → the panel drawn and the app idle: the browser alone
        page.wait_for_timeout(400)
    context.close()
    return times, sent, server, streamed, drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm", choices=["minilm", "smollm2"])
    parser.add_argument("--clicks", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    server, url = start_server([], script="serve.py")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
            times, sent, server_ms, streamed, drawn = measure(browser, url, args.clicks, args.warmup, args.model)
            browser.close()
    finally:
        server.terminate()
    median = statistics.median(times)
    lines = [f"why panel: click on a heatmap cell → \"Why this weight?\" drawn and the app idle ({args.model}, 40 "
             f"tokens, layer 1, head 2; {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
             f"average {os.getloadavg()[0]:.1f})",
             f"clicks: {len(times)}   median {median:.0f} ms   min {min(times):.0f} ms   max {max(times):.0f} ms   "
             f"goal < {GOAL_MS:.0f} ms: {'met' if median < GOAL_MS else 'NOT met'}",
             f"of which the browser holds the click before sending it to the server (Streamlit's chart selections): "
             f"median {statistics.median(sent):.0f} ms",
             f"then, medians: the server's first message {statistics.median(server_ms):.0f} ms after the click is "
             "sent, "
             f"its last {statistics.median(streamed):.0f} ms after its first, and the browser draws and goes idle "
             f"{statistics.median(drawn):.0f} ms after the last"]
    publish("\n".join(lines), args.out, "why_panel.txt" if args.model == "minilm" else f"why_panel_{args.model}.txt")


if __name__ == "__main__":
    main()
