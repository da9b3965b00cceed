"""Start here: the tour's first draw and its time to a first finding, on a fresh server (cold) and in a new session of
the same server (warm).

``streamlit run dashboard/serve.py`` (what ``make app`` runs) on a free loopback port; headless Chromium (Playwright,
the system Chromium) opens the bare address, which opens the tour, and times from the page's request:

* **drawn**: the "Start here" heading and every finding's item are on screen;
* **first finding**: the first item says "Holds." (its evidence computed and judged by the library);
* **all**: the app is idle again: every finding's verdict is in.

Then a new session at 390 px wide (a phone) opens it again. A screenshot of each is written under ``--out``; the load
average is printed beside the table (a shared machine slows every figure).

    .venv/bin/python benchmarks/start_tour.py [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from browser import ARGS, chromium_path  # noqa: E402  (tests/browser.py: the system Chromium)
from load_test import start_server  # noqa: E402
from report import out_folder  # noqa: E402

TIMEOUT_MS = 900_000
PROBE = """
(() => {
  window.__tour = {drawn: -1, first: -1, idle: -1, ran: false};
  const explore = window.location.search.includes('page=explore');  // as asked: the app rewrites the link after
  const check = () => {
    const app = document.querySelector('[data-testid=stApp]');
    if (!app) return;
    const state = app.getAttribute('data-test-script-state');
    if (state === 'running') window.__tour.ran = true;
    const main = document.querySelector('[data-testid=stMain]');
    const text = main ? main.innerText : '';
    const t = window.__tour, now = performance.now();
    const home = explore ? text.includes('minilm: layer')
      : text.includes('Start here') && text.includes('The KV cache keeps its sinks');
    if (t.drawn < 0 && home) t.drawn = now;
    if (t.first < 0 && text.includes('Holds.')) t.first = now;
    if (t.idle < 0 && t.ran && state === 'notRunning' && t.drawn >= 0) t.idle = now;
  };
  new MutationObserver(check).observe(document, {subtree: true, childList: true, attributes: true});
})();
"""


def open_once(browser, url: str, width: int, shot: Path, path: str = "/") -> tuple[float, float, float]:
    """A new session on ``path`` (the bare address) at ``width`` px: seconds to drawn, to the first finding, to
    idle."""
    context = browser.new_context(viewport={"width": width, "height": 1000 if width > 500 else 844})
    context.add_init_script(PROBE)
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
    page.goto(f"{url}{path}")
    page.wait_for_function("() => window.__tour && window.__tour.idle >= 0", timeout=TIMEOUT_MS, polling=50)
    drawn, first, idle = page.evaluate("[window.__tour.drawn, window.__tour.first, window.__tour.idle]")
    page.wait_for_timeout(1000)
    page.screenshot(path=str(shot))
    context.close()
    return drawn / 1000, (first / 1000 if first >= 0 else float("nan")), idle / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the screenshots go (default: a new temporary folder, printed)")
    parser.add_argument("--explore", action="store_true",
                        help="first, on a fresh server of its own, Explore's first draw (what a bare address opened "
                             "before the tour), cold and warm, as the baseline")
    args = parser.parse_args()
    args.out = out_folder(args.out)
    from playwright.sync_api import sync_playwright

    rows = []
    if args.explore:
        server, url = start_server([], script="serve.py")
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
                for name in ("explore cold", "explore warm"):
                    shot = args.out / f"{name.replace(' ', '-')}-1400.png"
                    drawn, _, idle = open_once(browser, url, 1400, shot, "/?page=explore")
                    rows.append((name, 1400, drawn, float("nan"), idle))
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=60)
    started = time.perf_counter()
    server, url = start_server([], script="serve.py")
    up = time.perf_counter() - started
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
            for name, width in (("cold", 1400), ("warm", 1400), ("warm, phone", 390)):
                shot = args.out / f"start-{name.replace(', ', '-')}-{width}.png"
                rows.append((name, width, *open_once(browser, url, width, shot)))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(f"server up in {up:.1f} s; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} cores")
    print(f"{'session':<13} {'width':>5} {'drawn (s)':>9} {'first finding (s)':>17} {'all (s)':>8}")
    for name, width, drawn, first, idle in rows:
        print(f"{name:<13} {width:>5} {drawn:>9.1f} {first:>17.1f} {idle:>8.1f}")
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()
