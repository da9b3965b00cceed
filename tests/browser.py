"""Finding and starting the system Chromium for Playwright tests (Playwright's own browser download
is not used). Without a Chromium a test skips, or fails where PROBES_REQUIRE_BROWSER=1 (CI)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

ADVICE = ("no Chromium found: install it (apt-get install chromium) or point the CHROMIUM "
          "environment variable at a Chromium executable")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    """$CHROMIUM, else /usr/bin/chromium, else chromium or chromium-browser on PATH."""
    if env := os.environ.get("CHROMIUM"):
        return env
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


def unavailable(reason: str):
    """Skip the test, or fail it where PROBES_REQUIRE_BROWSER=1 (CI)."""
    if os.environ.get("PROBES_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def sync_playwright():
    """Playwright's ``sync_playwright()``; skips (or fails) when Playwright is not installed."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright is not installed: pip install -c constraints.txt -e '.[test]'")
    return sync_playwright()


def launch(playwright):
    """A headless system Chromium; skips the test (or fails) when there is none."""
    if (path := chromium_path()) is None:
        unavailable(ADVICE)
    return playwright.chromium.launch(executable_path=path, args=ARGS)


def offline_page(browser):
    """A new page whose requests to http(s) addresses all fail, as on a machine without internet."""
    page = browser.new_page()
    page.route("**/*", lambda r: r.abort() if r.request.url.startswith("http") else r.continue_())
    return page


ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


START_S = 600  # how long a server may take to answer its health check: a guard against a hang, not a speed bound
# (on a busy machine its imports alone take many times as long as on a quiet one)
WAIT_MS = 600_000  # how long a browser test waits for the page to show something: a guard against a hang, likewise
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"  # the app's script has run and finished


def settle(page) -> None:
    """Wait until the script a change started has run and finished (the app is idle again)."""
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=WAIT_MS)


# The main area's layout once the page is whole, else null: the script has finished, no element is still a
# placeholder (Streamlit shows a skeleton while a chart's code loads, after the script has finished) and every Vega
# chart has drawn (its canvas or svg); then the document's size and each chart's drawn size.
LAYOUT = """() => {
  const main = '[data-testid=stMain] ';
  if (!document.querySelector('[data-testid=stApp][data-test-script-state=notRunning]')
      || document.querySelector(main + '[data-testid=stSkeleton]')) return null;
  const charts = [...document.querySelectorAll(main + '[data-testid=stVegaLiteChart]')]
    .map(e => e.querySelector('canvas, svg.marks'));
  if (charts.some(m => !m)) return null;
  const box = m => { const r = m.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; };
  return JSON.stringify([document.scrollingElement.scrollWidth, document.scrollingElement.scrollHeight,
                         ...charts.map(box)]);
}"""
STILL_MS = 500  # how long the layout must stay the same: Vega's passes (its width, then its labels) come well within


def laid_out(page, still_ms: int = STILL_MS) -> None:
    """Wait until the page is whole (:data:`LAYOUT`) and its layout has stayed the same for ``still_ms`` (checked
    every 50 ms): Vega draws after the script has finished, then sizes each chart to its column and lays its labels
    out. Instead of a fixed sleep, too short on a busy machine and idle time on a quiet one."""
    page.wait_for_function(
        f"""([still]) => {{
          const now = performance.now(), seen = ({LAYOUT})(), s = window.__laidOut;
          if (seen === null || !s || s.seen !== seen) {{ window.__laidOut = {{seen, since: now}}; return false; }}
          return now - s.since >= still;
        }}""", arg=[still_ms], polling=50, timeout=WAIT_MS)
    page.evaluate("window.__laidOut = null")


def started_server(log_dir: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``streamlit run dashboard/serve.py`` (what ``make app`` runs) on a free loopback port, offline: the process
    and its URL, once the health check answers (its output in ``log_dir/server.log``). ``env``: more environment
    variables for the server (a test's hooks). The caller stops it (:func:`app_server` does)."""
    port = free_port()
    log = log_dir / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", **(env or {})}
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "serve.py"), "--server.port", str(port),
             "--server.headless", "true", "--server.address", "127.0.0.1"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=10).read() == b"ok":
                return server, url
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                server.wait()
                pytest.fail(f"streamlit did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)


@contextmanager
def app_server(log_dir: Path, env: dict[str, str] | None = None):
    """:func:`started_server`, yielding its URL, stopped after."""
    server, url = started_server(log_dir, env)
    try:
        yield url
    finally:
        server.terminate()
        server.wait(timeout=120)


TIP = """(() => { const e = document.getElementById('vg-tooltip-element');
  return e && e.classList.contains('visible') ? e.innerText : ''; })()"""


class Cells:
    """Where Explore's heatmap cells are on its canvas (Vega draws it on a canvas: no element per cell), for a
    text of ``tokens`` tokens. The mouse scans the canvas until Vega's tooltip names a cell, then steps to the
    cell's edges: its width and height (the heatmap is as wide as the page, its rows ``charts._row(tokens)`` px)."""

    def __init__(self, page, tokens: int):
        self.page = page
        box = page.locator("[data-testid=stVegaLiteChart] canvas").first.bounding_box()
        hit = next(((x, y, c) for y in range(int(box["y"]) + 30, int(box["y"] + box["height"]), 7)
                    for x in range(int(box["x"]) + 30, int(box["x"] + box["width"]), 7)
                    if (c := self.cell(x, y)) is not None), None)
        if hit is None:
            raise SystemExit("no heatmap cell found under the mouse")
        x, y, (query, key) = hit
        left = x
        while self.cell(left - 1, y) == (query, key):
            left -= 1
        top = y
        while self.cell(x, top - 1) == (query, key):
            top -= 1
        right, bottom = x, y
        while self.cell(right + 1, y) == (query, key):
            right += 1
        while self.cell(x, bottom + 1) == (query, key):
            bottom += 1
        self.width, self.height = right + 1 - left, bottom + 1 - top
        self.x0, self.y0 = left - key * self.width, top - query * self.height  # the corner of cell (0, 0)

    def cell(self, x: float, y: float) -> tuple[int, int] | None:
        """The (query, key) of the cell under (x, y), from Vega's tooltip, or None."""
        import re

        self.page.mouse.move(x, y)
        text = self.page.evaluate(TIP)
        query, key = re.search(r"query\s+(\d+):", text), re.search(r"key\s+(\d+):", text)
        return (int(query[1]), int(key[1])) if query and key else None

    def centre(self, query: int, key: int) -> tuple[float, float]:
        return self.x0 + (key + 0.5) * self.width, self.y0 + (query + 0.5) * self.height
