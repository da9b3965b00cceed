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


# the part of a canvas in view: its box cut to the boxes of the ancestors that scroll (a wide heatmap scrolls in
# its own box), in the page's coordinates
VISIBLE = """(canvas) => {
  let r = canvas.getBoundingClientRect(), left = r.left, top = r.top, right = r.right, bottom = r.bottom;
  for (let e = canvas.parentElement; e; e = e.parentElement) {
    const style = getComputedStyle(e);
    if (/(auto|scroll|hidden)/.test(style.overflowX + style.overflowY)) {
      const b = e.getBoundingClientRect();
      left = Math.max(left, b.left); top = Math.max(top, b.top);
      right = Math.min(right, b.right); bottom = Math.min(bottom, b.bottom);
    }
  }
  return {x: left, y: top, width: right - left, height: bottom - top};
}"""


class Cells:
    """Where Explore's heatmap cells are on its canvas (Vega draws it on a canvas: no element per cell), for a
    text of ``tokens`` tokens. The mouse scans the canvas until Vega's tooltip names a cell, then steps to the
    cell's edges: its width and height (the heatmap is as wide as the page, its rows ``charts._row(tokens)`` px)."""

    def __init__(self, page, tokens: int):
        self.page = page
        box = page.locator("[data-testid=stVegaLiteChart] canvas").first.evaluate(VISIBLE)
        hit = next(((x, y, c) for y in range(int(box["y"]) + 30, int(box["y"] + box["height"]), 7)
                    for x in range(int(box["x"]) + 30, int(box["x"] + box["width"]), 7)
                    if (c := self.cell(x, y)) is not None), None)
        if hit is None:
            raise SystemExit("no heatmap cell found under the mouse")
        x, y, (query, key) = hit
        left, top = self._edge(x, y, (query, key), 1, 0), self._edge(x, y, (query, key), 0, 1)
        right, bottom = self._edge(x, y, (query, key), -1, 0), self._edge(x, y, (query, key), 0, -1)
        width, height = right + 1 - left, bottom + 1 - top
        # a cell's size is fractional (the chart's width over its columns): measured on one cell, the rounding adds
        # up over the columns to half a cell and a click lands next door. So the edge of a cell about ten further
        # along each axis (inside the chart's visible box) sets the size, over that many cells
        far = self._far_edge(x, y, (query, key), top, height, 0, 1, box)
        self.height = height if far is None else far
        self.width = width
        for rows in (15, 10, 5, 0):  # along a row further down: a decoder's first rows end at the diagonal
            row_y = y + rows * self.height
            below = self.cell(x, row_y) if row_y < box["y"] + box["height"] else None
            far = None if below is None else self._far_edge(x, row_y, below, left, width, 1, 0, box)
            if far is not None:
                self.width = far
                break
        # the corner of cell (0, 0), from the canvas's corner: the page may move the canvas after this (a note drawn
        # above it when the question's evidence comes in), so centre() reads where the canvas is at each click
        canvas = page.locator("[data-testid=stVegaLiteChart] canvas").first.bounding_box()  # (uncut)
        self.dx, self.dy = left - key * self.width - canvas["x"], top - query * self.height - canvas["y"]

    def _edge(self, x: float, y: float, cell: tuple[int, int], dx: int, dy: int) -> float:
        """The first pixel of ``cell`` (under (x, y)) going left (dx=1) or up (dy=1); the last going right (dx=-1)
        or down (dy=-1)."""
        while self.cell(x - dx, y - dy) == cell:
            x, y = x - dx, y - dy
        return x if dx else y

    def _far_edge(self, x: float, y: float, cell: tuple[int, int], near: float, size: float, ax: int, ay: int,
                  box) -> float | None:
        """The cell size along x (ax=1) or y (ay=1), from ``near`` (the first pixel of ``cell``) to the first pixel
        of a cell about ten further along; None when no such cell shows inside ``box``'s visible part."""
        for steps in (10, 6, 3):
            fx, fy = x + ax * steps * size, y + ay * steps * size
            if not (box["x"] <= fx < box["x"] + box["width"] and box["y"] <= fy < box["y"] + box["height"]):
                continue
            other = self.cell(fx, fy)
            if other is None or other == cell:
                continue
            edge = self._edge(fx, fy, other, ax, ay)
            count = (other[1] - cell[1]) if ax else (other[0] - cell[0])
            if count > 0:
                return (edge - near) / count
        return None

    def cell(self, x: float, y: float) -> tuple[int, int] | None:
        """The (query, key) of the cell under (x, y), from Vega's tooltip, or None."""
        import re

        self.page.mouse.move(x, y)
        text = self.page.evaluate(TIP)
        query, key = re.search(r"query\s+(\d+):", text), re.search(r"key\s+(\d+):", text)
        return (int(query[1]), int(key[1])) if query and key else None

    def centre(self, query: int, key: int) -> tuple[float, float]:
        box = self.page.locator("[data-testid=stVegaLiteChart] canvas").first.bounding_box()
        return box["x"] + self.dx + (key + 0.5) * self.width, box["y"] + self.dy + (query + 0.5) * self.height
