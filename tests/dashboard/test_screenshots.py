"""The docs' screenshots, made by the app itself: ``streamlit run dashboard/serve.py`` (what ``make app`` runs) on the
offline default, every page of the app opened in Chromium at 1,400 × 1,000, each drawn without an error box and each
screenshot more than a blank page. The PNGs go to a temporary folder; with ``UPDATE_SCREENSHOTS=1`` those the docs
show go to ``docs/images/`` instead (how the committed ones were made)::

    UPDATE_SCREENSHOTS=1 OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/dashboard/test_screenshots.py

And every image the docs and README show is one of them, there, and small."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
from browser import WAIT_MS, laid_out, launch, settle, sync_playwright
from PIL import Image

import dashboard.app_pages  # noqa: F401 - registers every page, in menu order
from dashboard.core.pages import PAGES

pytestmark = pytest.mark.xdist_group("browser")  # one worker starts the app's servers, one after the other

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
IMAGES = DOCS / "images"
CHARTS = "[data-testid=stMain] [data-testid=stVegaLiteChart]"
SIZE = {"width": 1400, "height": 1000}
SIDEBAR = 320  # px: the sidebar's width at 1,400 px
MAX_BYTES = 300_000  # a screenshot in the repository: under 300 KB

# page -> (its link's query, the charts it draws in its main area, the docs' file name or None: not in the docs)
# the decoder pages open on smollm2 (the offline decoder: the offline default is an encoder, which they only name)
SHOTS: dict[str, tuple[str, int, str | None]] = {
    "start": ("", 0, None),  # the tour: words and buttons, no chart (its findings' pages are below)
    "explore": ("", 3, "explore.png"),
    "find": ("", 1, "find-heads.png"),
    "qkv": ("", 1, "qkv.png"),
    "generate": ("model=smollm2", 1, "generate.png"),
    "lens": ("model=smollm2", 1, "logit-lens.png"),
    "parity": ("", 1, "parity.png"),
    "heads": ("", 1, "heads.png"),  # after its Run button: the positional probe's grid
    "effects": ("", 1, "does-it-matter.png"),
    "circuit": ("layer=4&head=0", 1, "circuit.png"),  # a head past layer 0 (which reads only the embeddings)
    "cost": ("", 1, None),  # charts of the saved benchmarks, quoted as tables on docs/benchmarks.md
    "kv": ("model=smollm2", 1, "kv-policies.png"),
}
# A test run (not UPDATE_SCREENSHOTS) opens the KV lab on the 64 tokens test_browser.py's KV tests read, whose sweep
# the server has cached by then: the docs' picture is the page's default (256 tokens, four budgets drawn), a sweep
# that was most of this test's time on a busy machine, for a check (the page draws, not blank) that 64 tokens make
# as well.
CHECKED_ONLY = {"kv": "model=smollm2&kv_tokens=64&layer=2&head=4"}


def _link(url: str, key: str, query: str) -> str:
    return f"{url}/{'' if key == 'explore' else key}?{'&'.join(q for q in (query, f'page={key}') if q)}"


def _ink(png: bytes, left: int = 0) -> float:
    """The share of an image's pixels (right of ``left``) that are not near-white: text, marks, lines. A blank page,
    or a chart Vega never drew, has none."""
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))[:, left:]
    return float((rgb.min(axis=2) < 225).mean())


def test_every_page_has_an_entry():
    assert set(SHOTS) == set(PAGES), "a new page of the app needs its screenshot here"


@pytest.fixture(scope="module")
def desk(app_url):
    """One page at a desk's size in the module's Chromium, for every page in turn."""
    with sync_playwright() as p:
        browser = launch(p)
        yield browser.new_page(viewport=SIZE)
        browser.close()


@pytest.mark.parametrize("key", list(SHOTS))
def test_every_page_draws_and_its_screenshot_is_not_blank(app_url, desk, key, tmp_path):
    out = IMAGES if os.environ.get("UPDATE_SCREENSHOTS") == "1" else tmp_path
    out.mkdir(exist_ok=True)
    query, charts, name = SHOTS[key]
    if out == tmp_path:
        query = CHECKED_ONLY.get(key, query)
    page = desk
    page.goto(_link(app_url, key, query))
    settle(page)
    if key == "heads":
        page.get_by_role("button", name="Run").click()
        settle(page)
    page.wait_for_function(f"document.querySelectorAll('{CHARTS}').length >= {charts}", timeout=WAIT_MS)
    laid_out(page)  # Vega draws in the browser, after the script
    title = PAGES[key].title
    assert page.locator("[data-testid=stException]").count() == 0, f"{title}: an error box"
    assert page.locator("[data-testid=stMain] :is(h1, h2)").first.inner_text().strip(), f"{title}: no heading"
    png = page.screenshot()
    assert _ink(png, left=SIDEBAR) > 0.02, f"{title}: the screenshot's main area is blank"
    if charts:
        chart = page.locator(CHARTS).first.screenshot()  # (scrolls the main area to it: after the page's shot)
        assert _ink(chart) > 0.02, f"{title}: its first chart is blank"
    if name is not None or out == tmp_path:
        target = out / (name or f"{key}.png")
        target.write_bytes(png)
        assert target.stat().st_size < MAX_BYTES, f"{target.name}: {target.stat().st_size:,} bytes"


IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def test_every_image_the_docs_show_is_a_committed_screenshot():
    shown = {(md.parent / src).resolve() for md in [ROOT / "README.md", *DOCS.glob("*.md")]
             for src in IMAGE_LINK.findall(md.read_text()) if "://" not in src}
    missing = sorted(str(p.relative_to(ROOT)) for p in shown if not p.is_file())
    assert not missing, f"images the docs show that are not there: {missing}"
    made = {IMAGES / name for _, _, name in SHOTS.values() if name}
    assert shown <= made, f"images not made by the screenshot test: {sorted(map(str, shown - made))}"
    assert set(IMAGES.glob("*.png")) <= made, "a PNG in docs/images/ no test makes"
    assert all(p.stat().st_size < MAX_BYTES for p in made if p.is_file())
    assert len(made) <= 10  # the repository stays lean
