"""The real app in a real browser: ``streamlit run dashboard/serve.py`` (what ``make app`` runs, with the warm
start) on a free port, Chromium (through Playwright)
opens it on the offline default, changes the head, checks the page and the link follow, opens a
shared link on another page, and opens a head by clicking it in a probe's grid.
Screenshots go to ``screenshots/`` (git-ignored)."""

from __future__ import annotations

from pathlib import Path

import pytest
from apptest import opening
from browser import WAIT_MS, Cells, laid_out, launch, settle, sync_playwright

pytestmark = pytest.mark.xdist_group("browser")  # one worker starts the app's servers, one after the other

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "screenshots"


def _charts_drawn(page, count: int = 3, timeout: int = WAIT_MS, main: bool = False) -> None:
    """Wait until at least ``count`` charts are on the page (``main``: in the main area, not the sidebar): Vega
    draws them in the browser after the script has finished."""
    where = "[data-testid=stMain] " if main else ""
    page.wait_for_function(f"document.querySelectorAll('{where}[data-testid=stVegaLiteChart]').length >= {count}",
                           timeout=timeout)


def test_open_change_head_and_share_the_link(app_url):
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/?page=explore")  # (a bare address opens Start here)
        settle(page)
        # it lands on "she" and on the head chosen on half of the question's controls, whose box is not green: no
        # head of minilm answers "who is she?" on the other half
        layer, opened = opening()
        page.get_by_role("heading", name=f"minilm: layer {layer}, head {opened}").wait_for(timeout=WAIT_MS)
        assert page.get_by_text("Who is “she”? No head of minilm is shown to answer it.").is_visible()
        assert f"layer={layer}" in page.url and (f"head={opened}" in page.url or opened == 0)  # (0: the default)
        assert page.get_by_text("Parity PASS").is_visible()
        # the charts mount after the script has finished (Vega draws in the browser): wait for them
        _charts_drawn(page)
        page.get_by_text("Where '10: she' looks").wait_for(timeout=WAIT_MS)  # the query: "she"'s row, as a chart
        page.screenshot(path=SHOTS / "app_explore_she.png", full_page=True)

        head = page.locator("[data-testid=stSidebar] [data-testid=stSlider]").filter(has_text="Head")
        head.get_by_role("slider").focus()
        page.keyboard.press("ArrowRight")
        settle(page)
        page.get_by_role("heading", name=f"minilm: layer {layer}, head {opened + 1}").wait_for(timeout=WAIT_MS)
        assert f"head={opened + 1}" in page.url
        page.screenshot(path=SHOTS / "app_explore_head3.png", full_page=True)
        # the heatmap's spec is the same from head to head (its title and outlined row are in its table), so the
        # browser swapped its table in place: a click on a cell of the chart so updated still opens that cell
        page.locator("[data-testid=stVegaLiteChart] canvas").first.scroll_into_view_if_needed()
        cells = Cells(page, 15)  # the default sentence's 15 tokens
        page.mouse.click(*cells.centre(12, 4))
        settle(page)
        page.wait_for_function("() => location.search.includes('query=12') && location.search.includes('key=4')",
                               timeout=WAIT_MS)
        page.get_by_text("Where '12: hungry' looks").wait_for(timeout=WAIT_MS)

        shared = page.url  # a new visitor opening the link sees the same view
        other = browser.new_page(viewport={"width": 1400, "height": 1000})
        other.goto(shared.replace(f"head={opened + 1}", "head=5") + "&page=qkv&query=10")
        settle(other)
        other.get_by_role("heading", name=f"Q/K/V step by step: layer {layer}, head 5").wait_for(timeout=WAIT_MS)
        assert other.get_by_text("reproduce the model's own attention row for 10: she").is_visible()
        other.screenshot(path=SHOTS / "app_qkv.png", full_page=True)

        other.goto(f"{app_url}/heads?page=heads")  # a probe's grid: clicking a cell opens that head
        settle(other)
        other.get_by_role("button", name="Run").click()
        settle(other)
        cells = other.locator("[data-testid=stVegaLiteChart] g.mark-rect").first  # 6 layers × 12 heads
        box = cells.bounding_box()
        other.mouse.click(box["x"] + 5.5 * box["width"] / 12, box["y"] + 4.5 * box["height"] / 6)
        settle(other)
        other.get_by_role("heading", name="minilm: layer 4, head 5").wait_for(timeout=WAIT_MS)
        other.wait_for_function("() => location.search.includes('layer=4') && location.search.includes('head=5')",
                                timeout=WAIT_MS)
        browser.close()


def test_generate_steps_through_the_tokens(app_url):
    """SmolLM2 writes after the story prompt; the arrow keys walk the step slider, and the text, the bars and the
    link follow."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/generate?model=smollm2&page=generate&layer=29&head=3")
        settle(page)
        page.get_by_role("heading", name="Generate: a decoder writes, token by token, with a KV cache").wait_for(
            timeout=WAIT_MS)
        page.get_by_text("Cache proof PASS").first.wait_for(timeout=WAIT_MS)
        assert page.get_by_text("Step 0 of 9: the prefill").is_visible()
        _charts_drawn(page)
        page.screenshot(path=SHOTS / "app_generate_step0.png", full_page=True)

        step = page.locator("[data-testid=stMain] [data-testid=stSlider]").filter(has_text="Step")
        step.get_by_role("slider").focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        settle(page)
        page.get_by_text("Step 3 of 9: fed").wait_for(timeout=WAIT_MS)
        page.wait_for_function("() => location.search.includes('step=3')", timeout=WAIT_MS)
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
        settle(page)
        error = page.locator("[data-testid=stAlertContentError]").first
        error.wait_for(timeout=WAIT_MS)
        shown = error.inner_text().replace("\u2060", "")  # (an invisible joiner keeps the address from linking)
        assert "[Session expired: log in again](https://evil.example/login)" in shown
        # (the page menu's own links carry the query)
        assert page.locator("a[href^='https://evil.example']").count() == 0
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
        settle(page)
        page.get_by_role("heading", name="smollm2: layer 29, head 0").wait_for(timeout=WAIT_MS)
        _charts_drawn(page)
        page.get_by_text("Where '12:  was' looks").wait_for(timeout=WAIT_MS)
        page.screenshot(path=SHOTS / "app_explore_sink.png", full_page=True)

        page.get_by_text("Hide the first token").click()
        settle(page)
        page.get_by_text("First token hidden: the colours are rescaled").wait_for(timeout=WAIT_MS)
        page.wait_for_function("() => location.search.includes('hide_first=1')", timeout=WAIT_MS)
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
        settle(page)
        page.get_by_role("heading", name="Logit lens: what each layer would predict").wait_for(timeout=WAIT_MS)
        page.get_by_text("its logits, exactly").wait_for(timeout=WAIT_MS)
        _charts_drawn(page, 1, main=True)
        laid_out(page)
        page.screenshot(path=SHOTS / "app_lens.png", full_page=True)

        page.get_by_text("Heads: direct effect").click()
        settle(page)
        page.get_by_text("not a probability (no softmax)").wait_for(timeout=WAIT_MS)
        laid_out(page)
        page.screenshot(path=SHOTS / "app_lens_heads.png", full_page=True)

        page.goto(f"{app_url}/lens?page=lens")  # the offline default, a BERT encoder
        settle(page)
        page.get_by_text("minilm has no language-model head").wait_for(timeout=WAIT_MS)
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
        settle(page)
        page.get_by_role("heading", name="minilm: layer 1, head 2").wait_for(timeout=WAIT_MS)
        _charts_drawn(page)
        laid_out(page)
        page.mouse.click(*Cells(page, 15).centre(10, 7))
        settle(page)
        page.wait_for_function("() => location.search.includes('key=7')", timeout=WAIT_MS)
        page.get_by_text("Why this weight?").wait_for(timeout=WAIT_MS)
        page.wait_for_function("[...document.querySelectorAll('svg text')].some(t => t.textContent.includes("
                               "'(7), score'))", timeout=WAIT_MS)
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
        settle(page)
        page.get_by_role("heading", name="Circuit: which heads minilm's head 2.3 reads from").wait_for(timeout=WAIT_MS)
        page.get_by_role("button", name="Run path patching").click()
        settle(page)
        _charts_drawn(page, timeout=WAIT_MS, main=True)
        laid_out(page)
        assert page.locator("[data-testid=stException]").count() == 0
        page.screenshot(path=SHOTS / "app_circuit.png")
        browser.close()


ZH = "小明把苹果给了小红，因为她很饿"
# the text's glyphs against empty boxes, in the element's own font: "小红" drawn by a CJK font is two em wide, and
# where no font has them they are the same boxes as two private-use characters (which no font has), once the webfont
# has loaded
TEXT_FONT = r"""async (selector) => {
  const el = [...document.querySelectorAll(selector)].find(e => /[\u4e00-\u9fff]/.test(e.value ?? e.textContent));
  if (!el) return null;
  const style = getComputedStyle(el);
  const font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  await document.fonts.load(font, '小红');
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = font;
  return {family: style.fontFamily, size: parseFloat(style.fontSize),
          zh: ctx.measureText('小红').width, tofu: ctx.measureText('\uE000\uE001').width};
}"""
# a chart's token label as drawn (Vega's SVG text, in the font the charts are given; the canvas charts get the same)
CHART_LABEL = r"""async () => {
  const label = [...document.querySelectorAll('[data-testid=stVegaLiteChart] svg text')]
    .find(t => /[\u4e00-\u9fff]/.test(t.textContent));
  if (!label) return null;
  const style = getComputedStyle(label);
  await document.fonts.load(`${style.fontSize} ${style.fontFamily}`, label.textContent);
  const boxes = label.cloneNode();  // the same label with every hanzi an empty box
  boxes.textContent = label.textContent.replace(/[\u4e00-\u9fff]/g, '\uE000');
  label.parentNode.appendChild(boxes);
  const found = {text: label.textContent, family: style.fontFamily, size: parseFloat(style.fontSize),
                 hanzi: (label.textContent.match(/[\u4e00-\u9fff]/g) || []).length,
                 zh: label.getComputedTextLength(), tofu: boxes.getComputedTextLength()};
  boxes.remove();
  return found;
}"""


def _drawn_not_boxes(found: dict | None, where: str) -> None:
    assert found is not None, f"no Chinese text found in {where}"
    assert abs(found["zh"] - found["tofu"]) > 0.2 * found["size"], f"{where}: empty boxes (tofu): {found}"


def test_chinese_is_drawn_without_cjk_system_fonts(app_url):
    """The story in Chinese on SmolLM2, on Explore and Find heads, in a Chromium without CJK fonts of its own (this
    machine has none): the sidebar, the callouts and the charts' labels draw hanzi, not empty boxes, with the
    WenQuanYi Micro Hei the app serves (dashboard/fonts.py, .streamlit/config.toml). The font is the app's theme's,
    one for every page, so two pages with charts prove it (Does it matter?, also checked here once, added the time
    of its first ablation grid on SmolLM2 and no other way of drawing text)."""
    import shutil
    import subprocess
    from urllib.parse import quote

    cjk = shutil.which("fc-list") and subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout
    if cjk and cjk.strip():
        pytest.skip("this machine has a CJK system font: the test is for a browser without one")
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        for key, heading in (("explore", "smollm2: layer"), ("find", "Find heads")):
            page.goto(f"{app_url}/{'' if key == 'explore' else key}?model=smollm2&page={key}&text={quote(ZH)}")
            settle(page)
            page.get_by_role("heading", name=heading).first.wait_for(timeout=WAIT_MS)
            _charts_drawn(page, 1, timeout=WAIT_MS, main=True)
            laid_out(page)
            page.screenshot(path=SHOTS / f"{key}_smollm2_zh.png", full_page=True)
            assert page.locator("[data-testid=stException]").count() == 0
            sidebar = page.evaluate(TEXT_FONT, "[data-testid=stSidebar] textarea")
            _drawn_not_boxes(sidebar, f"{key}: the sidebar's text")
            # two full-width hanzi are two em wide (a quarter em either way for hinting; empty boxes are narrower)
            assert 1.75 * sidebar["size"] <= sidebar["zh"] <= 2.25 * sidebar["size"], sidebar
            assert "WenQuanYi Micro Hei Web" in sidebar["family"]
            _drawn_not_boxes(page.evaluate(TEXT_FONT, "[data-testid=stMain] :is(p, li, h1, h2, h3, td, code)"),
                             f"{key}: the page's text")
            _drawn_not_boxes(page.evaluate(CHART_LABEL), f"{key}: a chart's label")
        browser.close()


WIDTHS = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stVegaLiteChart]')].map(e => {
  const drawn = e.querySelector('canvas, svg.marks');
  return {chart: drawn ? drawn.getBoundingClientRect().width : 0,
          column: e.closest('[data-testid=stElementContainer]').parentElement.getBoundingClientRect().width}; })"""


def test_explore_uses_the_page_width_and_a_thumbnail_click_shows_its_heatmap(app_url):
    """At 1400 px the heatmap takes more than half the main area and no chart is wider than its column; a click on
    a small multiple (far below the heatmap) opens that head and brings its heatmap into the window."""
    from dashboard.app_pages.explore.charts import MULTIPLES_PX

    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{app_url}/?page=explore")  # (a bare address opens Start here)
        settle(page)
        _charts_drawn(page, 4, main=True)
        laid_out(page)
        main = page.locator("[data-testid=stMainBlockContainer]").bounding_box()["width"]
        heatmap = page.locator('[class*="st-key-explore_cell_"]')
        assert heatmap.bounding_box()["width"] > main / 2
        widths = page.evaluate(WIDTHS)
        assert widths and all(w["chart"] <= w["column"] + 1 for w in widths), widths
        thumbs = page.locator('[class*="st-key-explore_heads_"] [data-testid=stVegaLiteChart]')
        thumbs.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        assert heatmap.bounding_box()["y"] + heatmap.bounding_box()["height"] < 0  # scrolled past it
        edge = 15 * (MULTIPLES_PX // 15)  # the default text's 15 tokens: one small multiple's side
        box = thumbs.bounding_box()
        page.mouse.click(box["x"] + 4 * (edge + 20) + edge / 2, box["y"] + 24 + edge / 2)  # head 4 of the layer
        layer, head = opening()
        page.get_by_role("heading", name=f"minilm: layer {layer}, head 4").wait_for(timeout=WAIT_MS)
        settle(page)
        page.wait_for_timeout(1500)
        top = heatmap.bounding_box()["y"]
        assert 0 <= top < 1000 / 2, top  # the new head's heatmap, in view
        page.screenshot(path=SHOTS / "explore_after_thumbnail_click.png")
        browser.close()


KV_LINK = "/kv?model=smollm2&page=kv&kv_tokens=64&layer=2&head=4"


KV_HEADS_LINK = "/kv?model=smollm2&page=kv&kv_tokens=28&kv_policies=sinks&kv_budgets=8,16&kv_budget=8&layer=2&head=4"


def _kv_open(browser, url: str, viewport: dict, link: str = KV_LINK, policy: str = "sinks:4+window:28"):
    """What if it attended less? opened by ``link`` at ``viewport``, down to the sidebar's head's kept tokens under
    ``policy``."""
    page = browser.new_page(viewport=viewport)
    page.goto(url + link)
    settle(page)
    page.get_by_role("heading", name="What if it attended less?").wait_for(timeout=WAIT_MS)
    page.get_by_role("heading", name=f"What layer 2, head 4 kept under {policy}").wait_for(timeout=WAIT_MS)
    return page


def _kv_page(browser, url: str, name: str, viewport: dict):
    """What if it attended less? on SmolLM2 over 64 tokens of the EWT web text at ``viewport``: the sweep, the memory
    table and the sidebar's head's kept tokens drawn, no error, every chart within its column; screenshots."""
    page = _kv_open(browser, url, viewport)
    _charts_drawn(page, 2, main=True)
    laid_out(page)
    assert page.locator("[data-testid=stException]").count() == 0
    assert page.locator("[data-testid=stAlertContentError]").count() == 0
    widths = page.evaluate(WIDTHS)
    assert widths and all(w["chart"] <= w["column"] + 1 for w in widths), widths
    page.screenshot(path=SHOTS / f"app_kv_{name}.png", full_page=True)
    page.set_viewport_size({**viewport, "height": 3600 if name == "desk" else 5200})  # the whole page
    laid_out(page)
    page.screenshot(path=SHOTS / f"app_kv_{name}_whole.png")
    page.set_viewport_size(viewport)
    return page


def test_what_if_it_attended_less_at_desk_width(app_url):
    """The KV lab at 1,400 × 1,000 (:func:`_kv_page`)."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        _kv_page(browser, app_url, "desk", {"width": 1400, "height": 1000})
        browser.close()


def test_the_heads_most_hurt_draw_and_a_click_opens_one_on_explore(app_url):
    """The KV lab's heads button draws the heads most hurt, and a click on the first bar opens its head on Explore.
    :data:`KV_HEADS_LINK` reads 27 tokens with one policy (sinks + window, at 8 and 16 keys; 8 shown: 19 tokens cut):
    the button cuts SmolLM2's 90 heads one at a time (``kvstream.head_effects``), about half as long over 27 tokens
    as over the 64 of :data:`KV_LINK` (it ran past a minute in CI over 64)."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = _kv_open(browser, app_url, {"width": 1400, "height": 1000}, KV_HEADS_LINK, "sinks:4+window:4")
        page.get_by_role("button", name="Cut each of the 90 heads alone").click()
        settle(page)
        page.get_by_text("A click opens its first query head on Explore").wait_for(timeout=WAIT_MS)
        _charts_drawn(page, 3, main=True)
        laid_out(page)
        assert page.locator("[data-testid=stAlertContentError]").count() == 0
        page.screenshot(path=SHOTS / "app_kv_heads.png", full_page=True)
        bars = page.locator("[data-testid=stVegaLiteChart]").nth(2)  # the heads most hurt, after sweep and picture
        bars.scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        box = bars.locator("g.mark-rect path").first.bounding_box()  # the first bar: the most hurt head
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        settle(page)
        page.get_by_role("heading", name="smollm2: layer").wait_for(timeout=WAIT_MS)  # on Explore
        browser.close()


def test_what_if_it_attended_less_at_phone_width(app_url):
    """The KV lab at 390 × 844 (:func:`_kv_page`): every chart within its column."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        _kv_page(browser, app_url, "phone", {"width": 390, "height": 844})
        browser.close()
