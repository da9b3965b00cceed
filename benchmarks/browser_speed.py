"""Fast as seen: click → heatmap redrawn in Chromium, when the head, the layer or the query token changes on Explore.

The server side (``benchmarks/rerender.py``) times the script; a person waits for the browser too: the messages,
React, and Vega compiling and drawing every chart that changed. This starts ``streamlit run dashboard/serve.py``
(what ``make app`` runs) on a free loopback port, opens Explore on the offline default (minilm) with a 40-token
sentence (a link: ``?text=…&layer=0&head=0&query=5``) in headless Chromium through Playwright, makes a few
warm-up changes (not counted), then ``--changes`` changes in turn: the sidebar's head slider one arrow-key step,
the layer slider one step, the query-token select box one token down (open it, arrow down, Enter).

Each change is timed inside the page, on the page's own clock (``performance.now()``):

* **start**: the key press (a capturing ``keydown`` listener: the arrow on a slider, Enter in the select box);
* **heatmap drawn**: the frame painted after Vega last drew the heatmap, up to the end below (an animation
  frame, then a task, after the change); a Vega view is the heatmap when
  its title reads ``Layer L, head H`` of the new view; Streamlit draws a chart of up to 2,000 rows as SVG (a
  ``MutationObserver`` on every ``svg.marks`` notes each change inside it) and a larger one on a canvas
  (``fillText``/``fill``/``stroke`` are wrapped), so whether Vega re-embedded the chart or replaced its data in
  place, the last change counts;
* **idle**: the app's ``[data-testid=stApp]`` back at ``data-test-script-state=notRunning`` after it ran
  (a ``MutationObserver`` on that attribute); where the server answered so fast that the attribute never changed
  (React drew "running" and "not running" in one go), the run's last message;
* **seen** = the later of the two: the new heatmap is on screen and the app is idle. The goal is a median under
  300 ms;
* **every chart painted**: the last paint of any Vega view on the page (the bars and the small multiples below
  the heatmap too), within the settling time after the above.
* **sent** and **last message**: where the time goes, the browser's side against the server's: when the browser
  sent the change on the app's WebSocket, and when the last of the server's messages before the app went idle
  arrived (its message event, which waits for the page's main thread: a late one is the server's time or the
  browser's drawing).

Writes ``browser_speed.txt`` under ``--out`` (default: a new temporary folder, printed): this measurement as its
``after:`` block beside the ``before:`` block saved in ``--out``'s file (default: the committed one)
(``--as-before`` saves this measurement as that block instead: run it so on the code you compare against), and the
two side by side.

    .venv/bin/python benchmarks/browser_speed.py [--changes 20] [--out benchmarks/results] [--as-before]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from browser import ARGS, chromium_path  # noqa: E402  (tests/browser.py: the system Chromium)
from load_test import TEXT, start_server  # noqa: E402
from report import RESULTS, publish, section  # noqa: E402

GOAL_MS = 300.0
KINDS = ("head", "layer", "query")
SETTLE_MS = 400  # after the app is idle and the heatmap drawn: late draws (a resize) still count

# Installed before the app's own scripts: timestamps of key presses, of the app's run state, and of Vega's
# drawing on each canvas (the canvas that last drew a "Layer …" title is a heatmap with that title).
PROBE = """
(() => {
  const now = () => performance.now();
  window.__bench = {press: -1, states: [], draws: [], sent: [], received: []};
  // the app's WebSocket: when the browser sends the change, and when each of the server's messages arrives (its
  // message event: the server sent it, and the page's main thread was free to take it)
  const send = WebSocket.prototype.send;
  WebSocket.prototype.send = function (...a) { window.__bench.sent.push(now()); return send.apply(this, a); };
  const Socket = window.WebSocket;
  window.WebSocket = function (...a) {
    const socket = new Socket(...a);
    socket.addEventListener('message', () => window.__bench.received.push(now()));
    return socket;
  };
  window.WebSocket.prototype = Socket.prototype;
  Object.assign(window.WebSocket, Socket);
  document.addEventListener('keydown', e => {
    if (['ArrowRight', 'ArrowLeft', 'Enter'].includes(e.key)) window.__bench.press = now();
  }, true);
  // Vega's canvas renderer (Streamlit's choice for charts of many rows): wrap the drawing calls
  // each view (a canvas or an svg) keeps when it last changed and when the frame after that change was painted
  // (the next animation frame, then a task: the paint has happened by then)
  const touched = (view, t) => {
    view.__drawn = t;
    if (view.__pending) return;
    view.__pending = true;
    requestAnimationFrame(() => { view.__pending = false; setTimeout(() => { view.__painted = now(); }, 0); });
  };
  // one clock reading per task: Vega makes thousands of calls in one go
  let stamp = -1;
  const tick = () => {
    if (stamp < 0) { stamp = now(); queueMicrotask(() => { stamp = -1; }); }
    return stamp;
  };
  const P = CanvasRenderingContext2D.prototype;
  const mark = ctx => { if (ctx.canvas.__drawn !== stamp || stamp < 0) touched(ctx.canvas, tick()); };
  const text = P.fillText;
  P.fillText = function (s, ...rest) {
    const t = String(s);
    if (/^Layer \\d+, head \\d+/.test(t)) this.canvas.__title = t;
    mark(this);
    return text.call(this, s, ...rest);
  };
  for (const name of ['fill', 'stroke', 'fillRect']) {
    const f = P[name];
    P[name] = function (...a) { mark(this); return f.apply(this, a); };
  }
  // Vega's SVG renderer (the others): any change inside an <svg class=marks>
  // (kept light: Vega sets thousands of attributes in one go, and this runs for each)
  const root = node => {
    const el = node.nodeType === 1 ? node : node.parentElement;
    if (!el) return null;
    return el.ownerSVGElement || (el.localName === 'svg' ? el : null);
  };
  new MutationObserver(records => {
    const t = now();
    let last = null;
    for (const r of records) {
      if (r.target === last) continue;
      last = r.target;
      const svg = root(r.target);
      if (svg) { if (svg.__drawn !== t) touched(svg, t); continue; }
      for (const added of r.addedNodes) {
        if (added.nodeType !== 1) continue;
        if (added.localName === 'svg') touched(added, t);
        else if (added.querySelectorAll) for (const inner of added.querySelectorAll('svg.marks')) touched(inner, t);
      }
    }
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  const watch = () => {
    const app = document.querySelector('[data-testid=stApp]');
    if (!app) { setTimeout(watch, 20); return; }
    window.__bench.states.push([now(), app.getAttribute('data-test-script-state')]);
    new MutationObserver(() => window.__bench.states.push([now(), app.getAttribute('data-test-script-state')]))
      .observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
  };
  watch();
  // the heatmaps on the page: Vega views (canvas or svg) whose title reads "Layer L, head H…"
  window.__heatmaps = title => [
    ...[...document.querySelectorAll('[data-testid=stMain] canvas')].filter(c => c.__title === title),
    ...[...document.querySelectorAll('[data-testid=stMain] svg.marks')].filter(
      s => (s.querySelector('.role-title-text') || {}).textContent === title),
  ];
  // when the app went idle after the key press: its state back at notRunning after running, or, where the server
  // answered so fast that React drew both in one go (the attribute never changed: a query change's fragment takes
  // ~30 ms), its last message once none has come for 100 ms; null until then
  window.__idle = () => {
    const b = window.__bench, press = b.press;
    const after = b.states.filter(([t]) => t >= press);
    const ran = after.findIndex(([, s]) => s === 'running');
    const back = ran >= 0 ? after.slice(ran).find(([, s]) => s === 'notRunning') : undefined;
    if (back) return back[0];
    const received = b.received.filter(t => t >= press);
    const last = received[received.length - 1];
    return last !== undefined && now() - last > 100 ? last : null;
  };
})();
"""

# Done: after the press the app ran and is idle again (window.__idle), and a heatmap titled TITLE drew after the press.
DONE = """
(title) => {
  const press = window.__bench.press;
  if (press < 0 || window.__idle() === null) return false;
  const app = document.querySelector('[data-testid=stApp]');
  if (app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  return window.__heatmaps(title).some(v => (v.__drawn || 0) > press);
}
"""

TIMES = """
(title) => {
  const b = window.__bench, press = b.press, idle = window.__idle();
  // painted: the frame after the last change, or (a change after the last stamp) that change's time
  const drawn = Math.max(...window.__heatmaps(title).map(v => Math.max(v.__painted || 0, v.__drawn || 0)));
  const views = [...document.querySelectorAll('[data-testid=stMain] canvas, [data-testid=stMain] svg.marks')];
  const last = Math.max(press, ...views.map(v => Math.max(v.__painted || 0, v.__drawn || 0)));
  const sent = b.sent.find(t => t >= press), replies = b.received.filter(t => t >= press && t <= idle);
  return {drawn: drawn - press, idle: idle - press, charts: last - press, sent: sent - press,
          received: (replies.length ? replies[replies.length - 1] : idle) - press};
}
"""


def _idle(page) -> None:
    page.wait_for_selector("[data-testid=stApp][data-test-script-state=notRunning]", timeout=300_000)


def measure(browser, url: str, changes: int, warmup: int, meter=None) -> dict[str, list[dict]]:
    """Each change's times (and, with ``meter``, a callable returning a dict of running totals, what they grew by
    over the change)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(PROBE)
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
    layer, head, query = 0, 0, 5
    page.goto(f"{url}/?text={urllib.parse.quote(TEXT)}&layer={layer}&head={head}&query={query}")
    page.get_by_role("heading", name=f"minilm: layer {layer}, head {head}", exact=True).wait_for(timeout=300_000)
    _idle(page)
    page.wait_for_function("t => window.__heatmaps(t).length > 0", arg=f"Layer {layer}, head {head}", timeout=120_000)
    page.wait_for_timeout(1000)
    sliders = page.locator("[data-testid=stSidebar] [data-testid=stSlider]")
    box = page.locator("[data-testid=stSelectbox]").filter(has_text="Query token")
    out: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for i in range(warmup + changes):
        kind = KINDS[i % len(KINDS)]
        page.evaluate("window.__bench.press = -1")
        before = meter() if meter else {}
        if kind == "query":
            box.locator("input").click()
            page.wait_for_timeout(250)
            page.keyboard.press("ArrowDown")
            page.keyboard.press("Enter")
            query += 1
        else:  # one step right, or back left from the slider's end
            slider = sliders.filter(has_text=kind.title()).get_by_role("slider")
            slider.focus()
            value = layer if kind == "layer" else head
            step = 1 if value < slider.evaluate("e => +(e.max || e.getAttribute('aria-valuemax'))") else -1
            page.keyboard.press("ArrowRight" if step > 0 else "ArrowLeft")
            layer, head = (layer + step, head) if kind == "layer" else (layer, head + step)
        title = f"Layer {layer}, head {head}"
        page.wait_for_function(DONE, arg=title, timeout=120_000, polling=10)
        page.wait_for_timeout(SETTLE_MS)
        got = page.evaluate(TIMES, title)
        got["seen"] = max(got["drawn"], got["idle"])
        got.update({k: v - before[k] for k, v in (meter() if meter else {}).items()})
        if i >= warmup:
            out[kind].append(got)
        page.keyboard.press("Escape")  # close the select box's menu, if open
        page.wait_for_timeout(300)  # a person looks before the next change (not timed)
    context.close()
    return out


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def table(results: dict[str, list[dict]]) -> list[str]:
    lines = ["| change | n | seen median ms | seen p90 ms | heatmap drawn median ms | idle median ms | "
             "every chart painted median ms | sent median ms | last message median ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    every = [r for kind in KINDS for r in results[kind]]
    for name, got in [*((kind, results[kind]) for kind in KINDS), ("all", every)]:
        if not got:
            continue
        seen = [r["seen"] for r in got]
        lines.append(f"| {name} | {len(got)} | {statistics.median(seen):.0f} | {p90(seen):.0f} | "
                     f"{statistics.median(r['drawn'] for r in got):.0f} | "
                     f"{statistics.median(r['idle'] for r in got):.0f} | "
                     f"{statistics.median(r['charts'] for r in got):.0f} | "
                     f"{statistics.median(r['sent'] for r in got):.0f} | "
                     f"{statistics.median(r['received'] for r in got):.0f} |")
    return lines


def side_by_side(before: list[str], after: list[str]) -> list[str]:
    def seen(block):
        cells = (line.strip("|").split(" | ") for line in block if line.startswith("| "))
        return {c[0].strip(): (float(c[2]), float(c[3])) for c in cells if c[2].strip().replace(".", "").isdigit()}

    old, new = seen(before), seen(after)
    rows = ["| change | before median ms | before p90 ms | after median ms | after p90 ms |", "|---|---|---|---|---|"]
    rows += [f"| {k} | {old[k][0]:.0f} | {old[k][1]:.0f} | {v[0]:.0f} | {v[1]:.0f} |"
             for k, v in new.items() if k in old]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20, help="changes timed (head, layer, query in turn; 1–30)")
    parser.add_argument("--warmup", type=int, default=3, help="changes made first, not timed")
    parser.add_argument("--out", type=Path, help="folder for browser_speed.txt (its 'before:' block is kept)")
    parser.add_argument("--as-before", action="store_true", help="save this measurement as the 'before:' block")
    args = parser.parse_args()
    if not 1 <= args.changes <= 30 or not 0 <= args.warmup <= 3:
        raise SystemExit("--changes: 1–30, --warmup: 0–3 (minilm has 6 layers; the text 40 tokens)")
    from playwright.sync_api import sync_playwright

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "dashboard"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    server, url = start_server([], "serve.py")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
            results = measure(browser, url, args.changes, args.warmup)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    every = [r["seen"] for kind in KINDS for r in results[kind]]
    median = statistics.median(every)
    label = "before" if args.as_before else "after"
    block = [f"{label}: commit {commit}{' + local changes to dashboard/' if dirty else ''}; median {median:.0f} ms "
             f"(goal < {GOAL_MS:.0f} ms: {'met' if median < GOAL_MS else 'NOT met'})", *table(results)]
    saved = (args.out or RESULTS) / "browser_speed.txt"  # its 'before:' block is kept (read only; written: --out)
    old = saved.read_text() if saved.exists() else ""
    before = block if args.as_before else section(old, "before")
    after = section(old, "after") if args.as_before else block
    lines = [f"Click → heatmap redrawn and the app idle, in headless Chromium: minilm on Explore, 40 tokens, "
             f"{args.changes} changes (head, layer, query in turn); {platform.processor() or 'CPU'}, "
             f"{os.cpu_count()} CPUs, server and browser on the same machine.",
             "`.venv/bin/python benchmarks/browser_speed.py --out benchmarks/results`", ""]
    if before and after:
        lines += [*side_by_side(before, after), ""]
    lines += [*after, "", *before] if after and before else block
    publish("\n".join(lines).rstrip(), args.out, "browser_speed.txt")


if __name__ == "__main__":
    main()
