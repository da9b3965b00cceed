"""Start here: the tour's first draw and its time to a first finding, on a fresh server (cold) and in a new session of
the same server (warm).

``streamlit run dashboard/serve.py`` (what ``make app`` runs) on a free loopback port; headless Chromium (Playwright,
the system Chromium) opens the bare address, which opens the tour, and times from the page's request:

* **drawn**: the "Start here" heading and every finding's item are on screen;
* **first finding**: the first item says "Holds." (its evidence computed and judged by the library);
* **all**: the app is idle again: every finding's verdict is in.

Then a new session at 390 px wide (a phone) opens it again. A screenshot of each is written under ``--out``; the load
average is printed beside the table (a shared machine slows every figure).

    .venv/bin/python benchmarks/start_tour.py [--out /tmp/start-tour]
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

TIMEOUT_MS = 900_000
PROBE = """
(() => {
  window.__tour = {drawn: -1, first: -1, idle: -1, ran: false};
  const check = () => {
    const app = document.querySelector('[data-testid=stApp]');
    if (!app) return;
    const state = app.getAttribute('data-test-script-state');
    if (state === 'running') window.__tour.ran = true;
    const main = document.querySelector('[data-testid=stMain]');
    const text = main ? main.innerText : '';
    const t = window.__tour, now = performance.now();
    if (t.drawn < 0 && text.includes('Start here') && text.includes('The KV cache keeps its sinks')) t.drawn = now;
    if (t.first < 0 && text.includes('Holds.')) t.first = now;
    if (t.idle < 0 && t.ran && state === 'notRunning' && t.drawn >= 0) t.idle = now;
  };
  new MutationObserver(check).observe(document, {subtree: true, childList: true, attributes: true});
})();
"""


def open_once(browser, url: str, width: int, shot: Path) -> tuple[float, float, float]:
    """A new session on the bare address at ``width`` px: seconds to drawn, to the first finding, to idle."""
    context = browser.new_context(viewport={"width": width, "height": 1000 if width > 500 else 844})
    context.add_init_script(PROBE)
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
    page.goto(f"{url}/")
    page.wait_for_function("() => window.__tour && window.__tour.idle >= 0", timeout=TIMEOUT_MS, polling=50)
    drawn, first, idle = page.evaluate("[window.__tour.drawn, window.__tour.first, window.__tour.idle]")
    page.screenshot(path=str(shot), full_page=True)
    context.close()
    return drawn / 1000, (first / 1000 if first >= 0 else float("nan")), idle / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/start-tour"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    started = time.perf_counter()
    server, url = start_server([], script="serve.py")
    up = time.perf_counter() - started
    rows = []
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
    print(f"{'session':<12} {'width':>5} {'drawn (s)':>9} {'first finding (s)':>17} {'all (s)':>8}")
    for name, width, drawn, first, idle in rows:
        print(f"{name:<12} {width:>5} {drawn:>9.1f} {first:>17.1f} {idle:>8.1f}")
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()
