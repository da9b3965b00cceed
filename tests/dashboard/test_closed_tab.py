"""Work that nobody waits for any more stops (issue 30): a public server (``PROBES_PUBLIC=1``, ``streamlit run
dashboard/serve.py`` on a free loopback port) answers the issue's link (smollm2, "Does it matter?", 2,000 characters)
with its message, and when a tab that started long work closes (the effects grid, path patching), that work stops
before its end and the server is idle again: it reads its own CPU time (``/proc/<pid>/stat``).

Nothing here is a speed bound (issue 40: on a busy machine the same steps take many times as long). The server runs
with ``server_hooks/sitecustomize.py``, which writes down each step of a long loop and makes it slow (a second): the
test reads, in the server's own record, that the closed tab's run was stopped by the close, part way; every wait is a
guard against a hang, minutes long, never the thing asserted."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from pathlib import Path

import pytest
from browser import app_server, launch, sync_playwright

pytestmark = pytest.mark.xdist_group("browser")  # one worker starts the app's servers, one after the other

HANG_S = 600  # every wait's guard against a hang (not a speed bound: a busy machine is many times slower)
WINDOW_S = 2.0
IDLE_CPU_S = 0.2  # CPU seconds a server may use in a window and still be idle (it uses ~0.01; a grid ~2)
HOOKS = Path(__file__).resolve().parent / "server_hooks"
STORY = "Xiaoming gave the apple to Xiaohong because she was hungry."
TEXT = ("The old lighthouse keeper climbed the narrow stairs every evening to light the lamp. One stormy night, she "
        "noticed a small boat struggling against the waves near the rocks. She waved her lantern and shouted until "
        "the sailors saw the light and turned away from danger before the storm grew worse.")  # 56 tokens on smollm2


@pytest.fixture(scope="module")
def public_server(tmp_path_factory):
    """A public server's URL, its process id and the file its steps are written to (``server_hooks``)."""
    folder = tmp_path_factory.mktemp("streamlit")
    steps = folder / "steps.jsonl"
    hooks = {"CLOSED_TAB_STEPS": str(steps), "CLOSED_TAB_STEP_S": "1",
             "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOKS), os.environ.get("PYTHONPATH")]))}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROBES_PUBLIC", "1")
        with app_server(folder, env=hooks) as url:
            port = url.rsplit(":", 1)[1]
            yield url, _pid_serving(port), steps


def _pid_serving(port: str) -> int:
    """The ``streamlit run`` process started with ``--server.port PORT``."""
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"streamlit" in b" ".join(args) and port.encode() in args:
            return int(proc.name)
    pytest.fail(f"no streamlit process serves port {port}")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds the process (all its threads) has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rows(steps: Path) -> list[dict]:
    """The server's record of its steps so far (``server_hooks``), oldest first (a line still being written: not)."""
    return [json.loads(line) for line in steps.read_text().split("\n")[:-1]] if steps.exists() else []


def _until(found, what: str):
    """Whatever ``found()`` returns once it is truthy, asked every fifth of a second; a failure saying ``what`` did
    not happen if it still is not after :data:`HANG_S` (a hang)."""
    deadline = time.monotonic() + HANG_S
    while not (got := found()):
        assert time.monotonic() < deadline, f"{what} did not happen in {HANG_S} s"
        time.sleep(0.2)
    return got


def _stopped_when_closed(tab, steps: Path, by: str) -> int:
    """Close ``tab`` once the loop of the app's function ``by`` it started has done a step, then wait for
    that loop's end: it must be stopped by the close (a StopException: the browser has gone) with work left, never run
    to its end (then no stop comes, and the wait fails). Another loop of the same session (the sidebar's parity
    check runs beside the page) stops on its own and proves nothing about this one. Returns how many steps this loop
    was let do after the close."""
    first = _until(lambda: next((r for r in _rows(steps) if r["by"] == by and "stopped" not in r), None),
                   f"a step of {by}")
    session = first["session"]
    tab.close()
    before = sum(r["session"] == session and r["by"] == by for r in _rows(steps))
    ended = _until(lambda: next((r for r in _rows(steps) if r["session"] == session and r["by"] == by
                                 and "stopped" in r), None), f"the stop of {by}'s loop after its tab closed")
    done, total = ended["step"]
    assert ended["stopped"] == "StopException", f"{by}'s run ended otherwise than by its tab's close: {ended}"
    assert done < total, f"{by}'s run was stopped only at its last step: {ended}"
    return sum(r["session"] == session and r["by"] == by and "stopped" not in r for r in _rows(steps)) - before


def _idle(pid: int) -> float:
    """Seconds until the server uses less than ``IDLE_CPU_S`` over a whole window (a failure after :data:`HANG_S`).
    A check that nothing else goes on computing; on a busy machine a computing server may get less CPU than that, so
    the proof that the work stopped is the server's record of its steps, not this."""
    start = time.monotonic()
    deadline = start + HANG_S
    while True:
        used = _cpu_s(pid)
        time.sleep(WINDOW_S)
        if _cpu_s(pid) - used < IDLE_CPU_S:
            return time.monotonic() - start
        assert time.monotonic() < deadline, f"the server still computes {HANG_S} s after the run stopped"


def test_the_issues_link_answers_and_a_closed_tabs_work_stops(public_server):
    url, pid, steps = public_server
    with sync_playwright() as p:
        browser = launch(p)
        # the issue's link: a message (the page's token cap on a public server), whenever it comes
        page = browser.new_page()
        page.goto(f"{url}/?model=smollm2&page=effects&text=" + urllib.parse.quote((STORY + " ") * 40)[:2000])
        page.get_by_text("on this public deployment this page takes up to 64").wait_for(timeout=HANG_S * 1000)
        page.close()

        # the effects grid (270 copies of a 56-token text): close the tab while it runs
        tab = browser.new_context()
        page = tab.new_page()
        page.goto(f"{url}/?model=smollm2&page=effects&text=" + urllib.parse.quote(TEXT))
        page.wait_for_selector("[data-testid=stProgress]", timeout=HANG_S * 1000)
        grid = _stopped_when_closed(tab, steps, "ablation")
        grid_idle = _idle(pid)

        # path patching (every head of layers 0-28 into head 29.0 of smollm2, 4 sentences): no progress bar, a spinner
        tab = browser.new_context()
        page = tab.new_page()
        text = " ".join([STORY] * 4)
        page.goto(f"{url}/?model=smollm2&page=circuit&layer=29&head=0&text=" + urllib.parse.quote(text))
        field = page.get_by_role("textbox", name="Corrupted text (the same number of tokens as the sidebar's)")
        field.fill(text[:text.rindex("she")] + "he" + text[text.rindex("she") + 3:])
        field.press("Enter")
        page.get_by_role("button", name="Run path patching").click(timeout=HANG_S * 1000)
        page.get_by_text("Patching each earlier head").wait_for(timeout=HANG_S * 1000)
        patching = _stopped_when_closed(tab, steps, "path_patch")
        patching_idle = _idle(pid)
        browser.close()
    print(f"steps after the close: {grid} of the grid, {patching} of path patching; the server idle "
          f"{grid_idle:.1f} s and {patching_idle:.1f} s after they stopped")


def test_cancel_stops_the_work_part_way_and_the_page_offers_it_again(public_server):
    """Issue 44: a Cancel button beside the progress bar. Clicked while the effects grid runs (each step slowed to a
    second by ``server_hooks``), the server's record shows the grid's loop ended after the click (Streamlit ends the
    run at the bar's next update) with heads left; the page then says it was cancelled, draws no grid, the server is
    idle, and "Run it again" starts the grid again."""
    url, pid, steps = public_server
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        earlier = {r["session"] for r in _rows(steps)}  # the other tests' sessions on this server
        page.goto(f"{url}/?model=smollm2&page=effects&text=" + urllib.parse.quote(TEXT))
        page.wait_for_selector("[data-testid=stProgress]", timeout=HANG_S * 1000)
        first = _until(lambda: next((r for r in _rows(steps) if r["by"] == "ablation" and "stopped" not in r
                                     and r["session"] not in earlier), None), "a step of this tab's grid")
        session = first["session"]
        page.get_by_role("button", name="Cancel").click(timeout=HANG_S * 1000)
        ended = _until(lambda: next((r for r in _rows(steps) if r["session"] == session and r["by"] == "ablation"
                                     and "stopped" in r), None), "the grid's stop after Cancel")
        # Streamlit ends the run at the bar's next update (a rerun's RerunException, or StopException where it starts
        # the next run afresh); the tab stays open, so it was the click (the note below says so)
        assert ended["stopped"] in ("RerunException", "StopException"), f"the grid ended otherwise: {ended}"
        done, total = ended["step"]
        assert done < total, f"the grid was stopped only at its last step: {ended}"
        page.get_by_text("was cancelled: nothing of it is shown or kept").wait_for(timeout=HANG_S * 1000)
        assert not page.locator("[data-testid=stProgress]").count()
        _idle(pid)  # nothing goes on computing
        before = sum(r["session"] == session and r["by"] == "ablation" for r in _rows(steps))
        page.get_by_role("button", name="Run it again").click(timeout=HANG_S * 1000)
        page.wait_for_selector("[data-testid=stMain] [data-testid=stProgress]", timeout=HANG_S * 1000)
        _until(lambda: sum(r["session"] == session and r["by"] == "ablation" for r in _rows(steps)) > before,
               "the grid's steps again after Run it again")
        browser.close()
