"""The real app in a real browser: ``streamlit run dashboard/serve.py`` (what ``make app`` runs, with the warm
start) on a free port, Chromium (through Playwright)
opens it on the offline default, changes the head, checks the page and the link follow, opens a
shared link on another page, and opens a head by clicking it in a probe's grid.
Screenshots go to ``screenshots/`` (git-ignored)."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import app_server, launch, sync_playwright

pytestmark = pytest.mark.xdist_group("browser")  # one worker starts the app's servers, one after the other

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "screenshots"
IDLE = "[data-testid=stApp][data-test-script-state=notRunning]"


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    with app_server(tmp_path_factory.mktemp("streamlit")) as url:
        yield url


def _charts_drawn(page, count: int = 3, timeout: int = 60_000, main: bool = False) -> None:
    """Wait until at least ``count`` charts are on the page (``main``: in the main area, not the sidebar): Vega
    draws them in the browser after the script has finished."""
    where = "[data-testid=stMain] " if main else ""
    page.wait_for_function(f"document.querySelectorAll('{where}[data-testid=stVegaLiteChart]').length >= {count}",
                           timeout=timeout)


def _settle(page) -> None:
    """Wait until the script has run and finished (the app is idle)."""
    page.wait_for_timeout(300)
    page.wait_for_selector(IDLE, timeout=180_000)


def test_open_change_head_and_share_the_link(app_url):
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app_url)
        _settle(page)
        # it lands on "she" and on the head that answers who she is
        page.get_by_role("heading", name="minilm: layer 1, head 2").wait_for(timeout=60_000)
        assert page.get_by_text("Who is “she”? This head, 1.2, puts 0.36").is_visible()
        assert "layer=1" in page.url and "head=2" in page.url
        assert page.get_by_text("Parity PASS").is_visible()
        # the charts mount after the script has finished (Vega draws in the browser): wait for them
        _charts_drawn(page)
        page.get_by_text("Where '10: she' looks").wait_for(timeout=30_000)  # the query: "she"'s row, as a chart
        page.screenshot(path=SHOTS / "app_explore_she.png", full_page=True)

        head = page.locator("[data-testid=stSidebar] [data-testid=stSlider]").filter(has_text="Head")
        head.get_by_role("slider").focus()
        page.keyboard.press("ArrowRight")
        _settle(page)
        page.get_by_role("heading", name="minilm: layer 1, head 3").wait_for(timeout=60_000)
        assert "head=3" in page.url
        page.screenshot(path=SHOTS / "app_explore_head3.png", full_page=True)

        shared = page.url  # a new visitor opening the link sees the same view
        other = browser.new_page(viewport={"width": 1400, "height": 1000})
        other.goto(shared.replace("head=3", "head=5") + "&page=qkv&query=10")
        _settle(other)
        other.get_by_role("heading", name="Q/K/V step by step: layer 1, head 5").wait_for(timeout=60_000)
        assert other.get_by_text("reproduce the model's own attention row for 10: she").is_visible()
        other.screenshot(path=SHOTS / "app_qkv.png", full_page=True)

        other.goto(f"{app_url}/heads?page=heads")  # a probe's grid: clicking a cell opens that head
        _settle(other)
        other.get_by_role("button", name="Run").click()
        _settle(other)
        cells = other.locator("[data-testid=stVegaLiteChart] g.mark-rect").first  # 6 layers × 12 heads
        box = cells.bounding_box()
        other.mouse.click(box["x"] + 5.5 * box["width"] / 12, box["y"] + 4.5 * box["height"] / 6)
        _settle(other)
        other.get_by_role("heading", name="minilm: layer 4, head 5").wait_for(timeout=60_000)
        other.wait_for_function("() => location.search.includes('layer=4') && location.search.includes('head=5')",
                                timeout=30_000)
        browser.close()


def test_generate_steps_through_the_tokens(app_url):
    """SmolLM2 writes after the story prompt; the arrow keys walk the step slider, and the text, the bars and the
    link follow."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/generate?model=smollm2&page=generate&layer=29&head=3")
        _settle(page)
        page.get_by_role("heading", name="Generate: a decoder writes, token by token, with a KV cache").wait_for(
            timeout=120_000)
        page.get_by_text("Cache proof PASS").first.wait_for(timeout=120_000)
        assert page.get_by_text("Step 0 of 9: the prefill").is_visible()
        _charts_drawn(page)
        page.screenshot(path=SHOTS / "app_generate_step0.png", full_page=True)

        step = page.locator("[data-testid=stMain] [data-testid=stSlider]").filter(has_text="Step")
        step.get_by_role("slider").focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        _settle(page)
        page.get_by_text("Step 3 of 9: fed").wait_for(timeout=60_000)
        page.wait_for_function("() => location.search.includes('step=3')", timeout=30_000)
        highlighted = page.locator("[data-testid=stHtml] span[style*='background']")  # the fed token
        assert highlighted.count() == 1
        _charts_drawn(page)
        page.screenshot(path=SHOTS / "app_generate_step3.png", full_page=True)
        browser.close()


def test_a_crafted_link_shows_text_not_links_or_outside_images(app_url):
    """Markdown in a link's parameters (a phishing link in the error box, an image that makes the visitor's
    browser call out) is shown as typed."""
    from urllib.parse import quote

    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url))
        page.goto(f"{app_url}/?model={quote('[Session expired: log in again](https://evil.example/login)')}"
                  f"&layer={quote('![t](https://evil.example/t.png)')}")
        _settle(page)
        error = page.locator("[data-testid=stAlertContentError]").first
        error.wait_for(timeout=60_000)
        shown = error.inner_text().replace("\u2060", "")  # (an invisible joiner keeps the address from linking)
        assert "[Session expired: log in again](https://evil.example/login)" in shown
        assert page.locator("a[href^='https://evil.example']").count() == 0  # (the page menu's own links carry the query)
        assert page.locator("img[src^='https://evil.example']").count() == 0
        assert not [url for url in asked if url.startswith("https://evil.example")]  # the visitor never calls out
        page.screenshot(path=SHOTS / "app_crafted_link.png", full_page=True)
        browser.close()


def test_hide_the_first_token_rescales_the_heatmap_and_keeps_the_link(app_url):
    """SmolLM2's head 29.0 parks most of its weight on the first token "X" (an attention sink): that one column
    sets the heatmap's colours. "Hide the first token" rescales each row over the other keys, says so under the
    heatmap, and is part of the link."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/?model=smollm2&layer=29&head=0&query=12")
        _settle(page)
        page.get_by_role("heading", name="smollm2: layer 29, head 0").wait_for(timeout=120_000)
        _charts_drawn(page)
        page.get_by_text("Where '12:  was' looks").wait_for(timeout=30_000)
        page.screenshot(path=SHOTS / "app_explore_sink.png", full_page=True)

        page.get_by_text("Hide the first token").click()
        _settle(page)
        page.get_by_text("First token hidden: the colours are rescaled").wait_for(timeout=60_000)
        page.wait_for_function("() => location.search.includes('hide_first=1')", timeout=30_000)
        _charts_drawn(page)
        page.screenshot(path=SHOTS / "app_explore_sink_hidden.png", full_page=True)
        browser.close()


def test_the_logit_lens_reads_every_layer(app_url):
    """The Logit lens page on SmolLM2: a layers × tokens table of top tokens, then the heads of one layer; minilm (an
    encoder) gets its note instead."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/lens?model=smollm2&page=lens&layer=29")
        _settle(page)
        page.get_by_role("heading", name="Logit lens: what each layer would predict").wait_for(timeout=120_000)
        page.get_by_text("its logits, exactly").wait_for(timeout=120_000)
        _charts_drawn(page, 1, main=True)
        page.wait_for_timeout(1000)  # Vega draws in the browser
        page.screenshot(path=SHOTS / "app_lens.png", full_page=True)

        page.get_by_text("Heads: direct effect").click()
        _settle(page)
        page.get_by_text("not a probability (no softmax)").wait_for(timeout=60_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=SHOTS / "app_lens_heads.png", full_page=True)

        page.goto(f"{app_url}/lens?page=lens")  # the offline default, a BERT encoder
        _settle(page)
        page.get_by_text("minilm has no language-model head").wait_for(timeout=60_000)
        assert page.locator("[data-testid=stException]").count() == 0
        page.screenshot(path=SHOTS / "app_lens_encoder.png", full_page=True)
        browser.close()


def test_a_click_on_a_cell_says_why_this_weight(app_url):
    """On the story sentence, head 1.2: a click on the cell of "she" (row 10) and "xiao" (column 7, the first piece of
    "Xiaohong") opens "Why this weight?" with its grid, and the cell goes into the link."""
    from browser import Cells

    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(f"{app_url}/?layer=1&head=2")
        _settle(page)
        page.get_by_role("heading", name="minilm: layer 1, head 2").wait_for(timeout=60_000)
        _charts_drawn(page)
        page.wait_for_timeout(500)
        page.mouse.click(*Cells(page, 15).centre(10, 7))
        _settle(page)
        page.wait_for_function("() => location.search.includes('key=7')", timeout=30_000)
        page.get_by_text("Why this weight?").wait_for(timeout=30_000)
        page.wait_for_function("[...document.querySelectorAll('svg text')].some(t => t.textContent.includes("
                               "'(7), score'))", timeout=60_000)
        assert page.get_by_text("key 'xiao': its position embedding × query 'she'").first.is_visible()
        page.get_by_text("Why this weight?").scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        page.screenshot(path=SHOTS / "app_explore_why.png")
        browser.close()


def test_the_circuit_page_draws_who_a_head_reads_from(app_url):
    """minilm's head 2.3 on the story sentence: the weights' composition, the text's senders and path patching from
    its she → he minimal pair, each a layered graph."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        page.goto(f"{app_url}/circuit?page=circuit&layer=2&head=3")
        _settle(page)
        page.get_by_role("heading", name="Circuit: which heads minilm's head 2.3 reads from").wait_for(timeout=60_000)
        page.get_by_role("button", name="Run path patching").click()
        _settle(page)
        _charts_drawn(page, timeout=120_000, main=True)
        page.wait_for_timeout(1000)  # Vega draws in the browser
        assert page.locator("[data-testid=stException]").count() == 0
        page.screenshot(path=SHOTS / "app_circuit.png")
        browser.close()
