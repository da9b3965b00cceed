"""The public app's memory: the server's peak resident memory while people move through every page.

A Streamlit Community Cloud container is small (about 1 GB is often quoted; the documentation has said up to
2.7 GB), and past its limit the app is restarted without a word. This starts the app as a public deployment
(``PROBES_PUBLIC=1``, ``streamlit run dashboard/serve.py`` on a free loopback port), then opens ``--users``
browser sessions at once (headless Chromium, one context each), and each visits every page of the app, one
model after the other (the sessions start on different models, so both are wanted at once). The server's
resident memory (its process and any children, from /proc) is sampled every 0.1 s; the table gives the level
once started, the peak, and the level at the end.

The server runs as the Cloud installs it (``requirements.txt``: this project without its ``dev`` extra, so no
Triton, whose import alone is about 70 MiB here; torch imports it whenever it is installed): a stub that refuses
``import triton`` comes first on its path. ``--with-triton`` keeps this machine's.

The scenarios:

* **both offline models**: minilm and smollm2, every page each, on the default sentence;
* **both offline models, a 2,000-character text each** (the public limit; each session its own text);
* **minilm alone** (``PROBES_MODELS=minilm``), every page, on the default sentence, and with the long texts.

    .venv/bin/python benchmarks/public_memory.py [--users 3] [--with-triton] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from forward import PeakRSS  # noqa: E402  (benchmarks/, this script's folder)
from load_test import IDLE, start_server  # noqa: E402
from report import publish  # noqa: E402

from browser import ARGS, chromium_path  # noqa: E402
from dashboard.state import PAGES  # noqa: E402

MIB = 2**20
SCENARIOS = {  # name -> (models each session visits, PROBES_MODELS, each session's own 2,000-character text)
    "both offline models": (["minilm", "smollm2"], "", False),
    "both offline models, a 2,000-character text each": (["minilm", "smollm2"], "", True),
    "minilm alone": (["minilm"], "minilm", False),
    "minilm alone, a 2,000-character text each": (["minilm"], "minilm", True),
}
GOAL_MIB = {"both": 1536, "minilm": 1024}  # issue 30: 1.5 GB with both offline models, 1 GB with minilm alone
WORDS = ("river apple teacher quietly because window seven gave hungry mountain she the to and old bright "
         "walked under before a letter green city wrote").split()


def long_text(user: int, chars: int = 2000) -> str:
    """A text of ``chars`` characters (the public limit) that only this user opens: its own trace."""
    words, n = [], 0
    i = user
    while n < chars - 12:
        word = WORDS[(i * 7 + user) % len(WORDS)]
        words.append(word)
        n += len(word) + 1
        i += 1
    return " ".join(words)[:chars - 1] + "."


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        todo += children.get(p, [])
    return total


async def visit(browser, url: str, models: list[str], text: str | None, log: list) -> None:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    await page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort())  # loopback only
    for model in models:
        for key in PAGES:
            t0 = time.perf_counter()
            link = {"model": model, "page": key, **({"text": text} if text else {})}
            await page.goto(f"{url}/?{urllib.parse.urlencode(link)}")
            await page.wait_for_selector("[data-testid=stApp]", timeout=120_000)
            await page.wait_for_timeout(1000)  # the script starts
            await page.wait_for_selector(IDLE, timeout=600_000)
            errors = await page.locator("[data-testid=stException]").all_inner_texts()
            for text in errors:
                print(f"exception on {model}/{key}: {text[:300]!r}", file=sys.stderr)
            log.append((model, key, time.perf_counter() - t0, len(errors)))
    await context.close()


async def scenario(url: str, users: int, models: list[str], long: bool) -> list:
    from playwright.async_api import async_playwright

    log: list = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path(), args=ARGS)
        orders = [models[i % len(models):] + models[:i % len(models)] for i in range(users)]
        await asyncio.gather(*(visit(browser, url, order, long_text(i) if long else None, log)
                               for i, order in enumerate(orders)))
        await browser.close()
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=3)
    parser.add_argument("--only", choices=list(SCENARIOS))
    parser.add_argument("--with-triton", action="store_true", help="keep this machine's Triton (the Cloud has none)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not args.with_triton:
        stub = Path(tempfile.mkdtemp()) / "triton"
        stub.mkdir()
        (stub / "__init__.py").write_text('raise ImportError("not installed on Streamlit Community Cloud")\n')
        os.environ["PYTHONPATH"] = os.pathsep.join([str(stub.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if not 1 <= args.users <= 8:
        raise SystemExit("keep it bounded: 1–8 users")
    lines = [f"The public app (PROBES_PUBLIC=1), {args.users} browser sessions at once, each visiting all "
             f"{len(PAGES)} pages per model; the server's resident memory (MiB), "
             f"{'with this machine' + chr(39) + 's Triton' if args.with_triton else 'without Triton, as the Cloud installs it'}",
             "| scenario | started | peak | end | goal | page visits | slowest visit | exceptions |",
             "|---|---|---|---|---|---|---|---|"]
    for name, (models, allowed, long) in SCENARIOS.items():
        if args.only and name != args.only:
            continue
        os.environ["PROBES_PUBLIC"] = "1"
        os.environ["PROBES_MODELS"] = allowed
        server, url = start_server([], script="serve.py")
        try:
            time.sleep(5)  # the warm start's work (the default view) settles
            with PeakRSS(lambda: tree_rss(server.pid), every=0.1) as mem:
                log = asyncio.run(scenario(url, args.users, models, long))
            started, end = mem.start, tree_rss(server.pid)
        finally:
            server.terminate()
            server.wait(timeout=30)
        goal = GOAL_MIB["both" if len(models) > 1 else "minilm"]
        slowest = max(log, key=lambda r: r[2])
        lines.append(f"| {name} | {started / MIB:,.0f} | {mem.peak / MIB:,.0f} | {end / MIB:,.0f} | "
                     f"≤ {goal:,} ({'met' if mem.peak / MIB <= goal else 'missed'}) | {len(log)} | "
                     f"{slowest[2]:.0f} s ({slowest[0]}, {slowest[1]}) | {sum(r[3] for r in log)} |")
    publish("\n".join(lines), args.out, "public_memory.txt")


if __name__ == "__main__":
    main()
