"""Bytes per interaction: what the server sends over the websocket when a person opens Explore and changes the view.

Starts ``streamlit run`` on a free loopback port (headless, the committed settings), opens the Explore page on
the offline default (minilm) with a 40-token and a 116-token text (a link with ``?text=…``; 116 tokens is past
``charts.MAX_CELLS``, so the heatmap shows a 64-token window) in headless Chromium through Playwright, and
counts the websocket frames through Chromium's DevTools protocol (``Network.webSocketFrameReceived`` /
``…Sent``; a binary frame's payload is base64 in the protocol: its decoded bytes are counted). Measured:

* **open page**: from navigation to the page drawn and the app idle;
* **head change**: the sidebar's head slider, one arrow-key step at a time (head 0 → 1 → …);
* **layer change**: the layer slider, the same way;
* **query change**: the query-token select box, one token down.

Each change is counted from the key press until the server has sent its ``script_finished`` (the messages
are decoded as Streamlit's ``ForwardMsg`` protobufs) and the new view is drawn. Bytes are the messages'
own size (protobuf); a websocket compression extension, when one is negotiated (printed), makes the wire
smaller. ``--detail`` prints what one head change sends, message by message.

Writes ``bytes_per_change.txt`` under ``--out`` (default: a new temporary folder, printed): this measurement as
its ``after:`` block, beside the ``before:`` block saved in ``--out``'s file (default: the committed one)
(``--as-before`` saves this measurement as that block instead: run it so on the code you compare against), and the
two side by side.

    .venv/bin/python benchmarks/bytes_per_change.py [--changes 10] [--out benchmarks/results] [--as-before] [--detail]
"""

from __future__ import annotations

import argparse
import base64
import re
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))  # browser, whatever the imports' order (load_test puts it there too)

from browser import ARGS, chromium_path  # noqa: E402
from load_test import IDLE, TEXT as TEXT_40, start_server  # noqa: E402
from report import RESULTS, publish, section  # noqa: E402

TEXT_116 = TEXT_40 + (
    " When they reached the village, the baker was closing his shop, so Xiaohong bought the last two loaves of "
    "bread and shared them with Xiaoming, who had given away his apple. They sat on the bridge, ate slowly, and "
    "talked about the long summer ahead, the books they wanted to read, and the small boat they hoped to build "
    "before the first big snow.")  # 116 tokens on minilm
TEXTS = {40: TEXT_40, 116: TEXT_116}
KINDS = ("open page", "head change", "layer change", "query change")


class Frames:
    """Websocket frames of one page, through the DevTools protocol, decoded as ForwardMsgs."""

    def __init__(self, page):
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        self._msg = ForwardMsg
        self.received = self.sent = self.finished = 0
        self.messages: list[tuple[int, str | None]] = []  # (bytes, what) since the last reset
        self.extensions: set[str] = set()
        cdp = page.context.new_cdp_session(page)
        cdp.on("Network.webSocketFrameReceived", self._received)
        cdp.on("Network.webSocketFrameSent", self._sent)
        cdp.on("Network.webSocketHandshakeResponseReceived", self._handshake)
        cdp.send("Network.enable")

    @staticmethod
    def _payload(event) -> bytes:
        frame = event["response"]
        data = frame["payloadData"]
        return base64.b64decode(data) if frame["opcode"] == 2 else data.encode()

    def _received(self, event) -> None:
        data = self._payload(event)
        self.received += len(data)
        msg = self._msg()
        try:
            msg.ParseFromString(data)
        except Exception:  # noqa: BLE001 - not a ForwardMsg: counted, not described
            self.messages.append((len(data), "?"))
            return
        kind: str | None = msg.WhichOneof("type")
        if kind == "script_finished":
            self.finished += 1
        if kind == "delta":
            delta = msg.delta
            kind = delta.WhichOneof("type")
            if kind == "new_element":
                kind = delta.new_element.WhichOneof("type")
        self.messages.append((len(data), kind))

    def _sent(self, event) -> None:
        self.sent += len(self._payload(event))

    def _handshake(self, event) -> None:
        headers = {k.lower(): v for k, v in event["response"].get("headers", {}).items()}
        self.extensions.add(headers.get("sec-websocket-extensions", "") or "none")

    def reset(self) -> None:
        self.received = self.sent = 0
        self.messages = []


def settle(page, frames: Frames, finished: int, heading: str | None) -> None:
    """Wait for the rerun's ``script_finished``, the heading and the idle app; then a moment for stragglers."""
    deadline = time.monotonic() + 300
    while frames.finished <= finished:
        if time.monotonic() > deadline:
            raise SystemExit("no script_finished within 300 s")
        page.wait_for_timeout(50)
    if heading:
        page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=120_000)
    page.wait_for_selector(IDLE, timeout=120_000)
    page.wait_for_timeout(400)


def measure(browser, url: str, text: str, changes: int, detail: bool) -> tuple[dict, set[str]]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
    frames = Frames(page)
    out: dict[str, list[tuple[int, int]]] = {kind: [] for kind in KINDS}

    page.goto(f"{url}/?text={urllib.parse.quote(text)}")
    settle(page, frames, 0, None)
    page.wait_for_function("document.querySelectorAll('[data-testid=stVegaLiteChart]').length >= 3", timeout=60_000)
    out["open page"].append((frames.received, frames.sent))

    sidebar = page.locator("[data-testid=stSidebar] [data-testid=stSlider]")
    # where the page opened (a text with a question opens on the head that answers it)
    title = page.get_by_role("heading", name=re.compile(r"^minilm: layer \d+, head \d+$")).first.inner_text()
    opened = re.fullmatch(r"minilm: layer (\d+), head (\d+)", title.strip())
    assert opened, title  # the heading the locator matched
    layer, head = int(opened.group(1)), int(opened.group(2))
    for kind, steps in (("head change", changes), ("layer change", min(changes, 5))):
        slider = sidebar.filter(has_text=kind.split()[0].title()).get_by_role("slider")
        for _ in range(steps):
            slider.focus()
            before = frames.finished
            frames.reset()
            page.keyboard.press("ArrowRight")
            if kind == "head change":
                head += 1
            else:
                layer += 1
            settle(page, frames, before, f"minilm: layer {layer}, head {head}")
            out[kind].append((frames.received, frames.sent))
            if detail and kind == "head change" and len(out[kind]) == 2:
                print(f"one head change at {len(text)} characters:")
                for size, what in sorted(frames.messages, reverse=True):
                    print(f"  {size:>9,} B  {what}")

    box = page.locator("[data-testid=stSelectbox]").filter(has_text="Query token")
    for _ in range(min(changes, 5)):
        box.locator("input").click()
        page.wait_for_timeout(200)
        before = frames.finished
        frames.reset()
        page.keyboard.press("ArrowDown")
        page.keyboard.press("Enter")
        settle(page, frames, before, None)
        out["query change"].append((frames.received, frames.sent))
    context.close()
    return out, frames.extensions


def kb(n: float) -> str:
    return f"{n / 1000:,.1f} KB"


def table(results: dict[int, dict]) -> list[str]:
    lines = ["| tokens | change | n | received (median) | received (max) | sent (median) |",
             "|---|---|---|---|---|---|"]
    for tokens, out in results.items():
        for kind in KINDS:
            got = out[kind]
            if not got:
                continue
            received = [r for r, _ in got]
            lines.append(f"| {tokens} | {kind} | {len(got)} | {kb(statistics.median(received))} | "
                         f"{kb(max(received))} | {kb(statistics.median(s for _, s in got))} |")
    return lines


def side_by_side(before: list[str], after: list[str]) -> list[str]:
    """tokens, change: the median bytes received before and after, from two blocks' tables."""
    def medians(block):
        return {tuple(c[:2]): c[3] for c in (line.strip("|").split(" | ") for line in block if line.startswith("| "))
                if c[0].strip().isdigit()}

    old, new = medians(before), medians(after)
    rows = ["| tokens | change | before (median received) | after | after / before |", "|---|---|---|---|---|"]
    for key, value in new.items():
        if key in old:
            ratio = float(value.split()[0].replace(",", "")) / float(old[key].split()[0].replace(",", ""))
            rows.append(f"| {key[0].strip()} | {key[1]} | {old[key]} | {value} | {ratio:.2f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=10, help="head changes per text (1–11: minilm has 12 heads)")
    parser.add_argument("--out", type=Path, help="folder for bytes_per_change.txt (its 'before:' block is kept)")
    parser.add_argument("--as-before", action="store_true", help="save this measurement as the 'before:' block")
    parser.add_argument("--detail", action="store_true", help="print what one head change sends, message by message")
    args = parser.parse_args()
    if not 1 <= args.changes <= 11:
        raise SystemExit("--changes: 1–11 (minilm has 12 heads)")
    from playwright.sync_api import sync_playwright

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "dashboard"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    server, url = start_server([])
    results, extensions = {}, set()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS)
            for tokens, text in TEXTS.items():
                results[tokens], ext = measure(browser, url, text, args.changes, args.detail)
                extensions |= ext
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    label = "before" if args.as_before else "after"
    block = [f"{label}: commit {commit}{' + local changes to dashboard/' if dirty else ''}, websocket extensions: "
             f"{', '.join(sorted(extensions)) or 'none'}", *table(results)]
    saved = (args.out or RESULTS) / "bytes_per_change.txt"  # its 'before:' block is kept (read only; written: --out)
    old = saved.read_text() if saved.exists() else ""
    before = block if args.as_before else section(old, "before")
    after = section(old, "after") if args.as_before else block
    lines = ["Websocket bytes received per interaction: minilm on Explore, 40 and 116 tokens; the messages' own",
             "(ForwardMsg) bytes. `.venv/bin/python benchmarks/bytes_per_change.py --out benchmarks/results`", ""]
    if before and after:
        lines += [*side_by_side(before, after), ""]
    lines += [*after, "", *before] if after and before else block
    publish("\n".join(lines).rstrip(), args.out, "bytes_per_change.txt")


if __name__ == "__main__":
    main()
