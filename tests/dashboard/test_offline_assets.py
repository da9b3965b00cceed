"""The app opened in a real browser asks only its own server for everything it draws: fonts, icons, the favicon,
scripts. On a machine without internet (or a reader behind a strict firewall) anything fetched from outside is
missing, and every outside request tells a third party who opened the app. Started the way test_browser.py
starts it (``streamlit run dashboard/serve.py`` on a free port); skips without Chromium unless
PROBES_REQUIRE_BROWSER=1."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from browser import IDLE, WAIT_MS, launch, sync_playwright

pytestmark = pytest.mark.xdist_group("browser")  # one worker starts the app's servers, one after the other

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
LOCAL_SCHEMES = {"data", "blob", "about"}  # inline images and fonts, never a request on the network


def outside(urls: list[str]) -> list[str]:
    """The requests that left this machine: any address that is not the loopback."""
    return [u for u in urls if urlparse(u).scheme not in LOCAL_SCHEMES and urlparse(u).hostname not in LOOPBACK]


def test_outside_means_anything_but_the_loopback():
    assert outside(["http://127.0.0.1:8501/static/x.js", "http://localhost:1/", "http://[::1]:2/a", "data:image/png;x",
                    "blob:http://127.0.0.1:1/abc"]) == []
    assert outside(["https://fonts.gstatic.com/s/i/x/visibility/default/24px.svg", "http://127.0.0.1.example.com/"]) \
        == ["https://fonts.gstatic.com/s/i/x/visibility/default/24px.svg", "http://127.0.0.1.example.com/"]


def test_the_opened_app_requests_nothing_outside_this_machine(app_url):
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url))
        # the landing page (Start here: words and buttons), Explore with its charts, and one more page through a link
        for path, charts in (("/", 0), ("/?page=explore", 2), ("/qkv", 2)):
            page.goto(app_url + path)
            page.wait_for_timeout(300)
            page.wait_for_selector(IDLE, timeout=WAIT_MS)
            page.wait_for_function(f"document.querySelectorAll('[data-testid=stVegaLiteChart]').length >= {charts}",
                                   timeout=WAIT_MS)
            page.wait_for_load_state("networkidle")
        icons = page.evaluate("Array.from(document.querySelectorAll('link[rel*=icon]'), l => l.href)")
        browser.close()
    far = sorted(set(outside(asked)))
    assert asked and icons
    assert not far, f"the app asked outside this machine for: {far}"
    assert not outside(icons), f"the favicon is fetched from outside: {icons}"
