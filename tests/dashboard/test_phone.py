"""Every page at a phone's width (390 × 844, Chromium through Playwright) on both offline models (minilm, the offline
default, and smollm2, the offline decoder, whose 30 layers were where a phone's charts broke) in its default state:

- the main area never scrolls sideways (a chart, a formula or a table that does not fit scrolls in its own box, or
  wraps), and no page shows an exception;
- no text is cut: no element that hides its overflow (a badge, a caption) is narrower than its text, and no chart's
  title, axis title or legend is shortened with "…";
- every chart's legend is under its plot, not beside it (where it took a third of a phone's width from the plot);
- every cell or bar a finger picks (clickable marks) is at least :data:`charts.MIN_CELL` px across: a chart with
  more columns than fit scrolls in its own box instead of shrinking them (Vega draws the big heatmaps on a canvas,
  whose cells are measured with the mouse: the width of each run of one tooltip along a line across the chart);
- labels written on a chart (the Circuit's head names) do not overlap.

A failure names the page, the model and the element. Screenshots of the whole page go to
``screenshots/phone_<page>_<model>.png`` (git-ignored)."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import TIP, WAIT_MS, laid_out, launch, settle, sync_playwright

import dashboard.app_pages  # noqa: F401 - registers every page, in menu order
from dashboard.core.charts import MIN_CELL
from dashboard.core.pages import PAGES

pytestmark = pytest.mark.xdist_group("browser")  # one worker starts the app's servers, one after the other

SHOTS = Path(__file__).resolve().parents[2] / "screenshots"
PHONE = {"width": 390, "height": 844}
MODELS = ("minilm", "smollm2")
# the main area's and the document's overflow and, when there is some, the element it comes from (the first that
# reaches past the main area's right edge with no box between them that clips or scrolls it): its test id, tag,
# classes and first words
OVERFLOW = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const block = document.querySelector('[data-testid=stMainBlockContainer]');
  const boxes = [['document', document.scrollingElement], ['main area', main], ['main block', block]];
  const over = boxes.filter(([, e]) => e && e.scrollWidth > e.clientWidth + 1)
    .map(([name, e]) => `${name}: ${e.scrollWidth} px wide in ${e.clientWidth}`);
  const edge = main.getBoundingClientRect().right + 1;
  const clipped = e => { for (let a = e.parentElement; a && a !== block; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') return true; } return false; };
  const first = [...block.querySelectorAll('*')].find(e => e.getBoundingClientRect().right > edge && !clipped(e));
  const said = first && ((first.closest('[data-testid]') || first).getAttribute('data-testid') + ' > '
    + first.tagName.toLowerCase() + '.' + [...first.classList].join('.') + ' "'
    + (first.textContent || '').trim().slice(0, 60) + '" reaches ' + Math.round(first.getBoundingClientRect().right)
    + ' px of ' + Math.round(edge - 1));
  return {over, widest: said};
}"""
# Text cut short: an element of the main area that hides its sideways overflow (overflow hidden or clip, or an
# ellipsis) and whose text is wider than it, and chart text Vega shortened to fit ("…" at the end of a title, an axis
# title or a legend's title or label). Each as "what: its words". (KaTeX's MathML copy of a formula, for screen
# readers, is a 1 px box by design: left out.)
CUT = """() => {
  const block = document.querySelector('[data-testid=stMainBlockContainer]');
  const name = e => (e.closest('[data-testid]') || e).getAttribute('data-testid') + ' > ' + e.tagName.toLowerCase();
  const hides = e => { const s = getComputedStyle(e);
    return ['hidden', 'clip'].includes(s.overflowX) || s.textOverflow === 'ellipsis'; };
  const boxes = [...block.querySelectorAll('*')].filter(e => !e.closest('[data-testid=stVegaLiteChart], .katex-mathml')
    && (e.innerText || '').trim() && hides(e) && e.scrollWidth > e.clientWidth + 1
    && getComputedStyle(e).overflowX !== 'auto')
    .map(e => `${name(e)} (${e.scrollWidth} px of text in ${e.clientWidth}): ${e.innerText.trim().slice(0, 80)}`);
  const words = ['role-title-text', 'role-title-subtitle', 'role-axis-title', 'role-legend-title',
                 'role-legend-label'].map(r => `[data-testid=stVegaLiteChart] g.${r} text`).join(', ');
  const vega = [...block.querySelectorAll(words)].filter(t => t.textContent.trim().endsWith('…'))
    .map(t => `chart text: ${t.textContent.trim()}`);
  return [...boxes, ...vega];
}"""
# Each SVG chart's legends that are not under its plot: a legend whose top is above the bottom of the chart's marks
# (its plot's cells, bars, lines and points) while it sits to their right.
LEGENDS = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stVegaLiteChart] svg.marks')]
  .flatMap(svg => {
    const marks = [...svg.querySelectorAll('g.role-mark > path, g.role-mark > line, g.role-mark > circle')]
      .map(m => m.getBoundingClientRect()).filter(r => r.width > 0 || r.height > 0);
    if (!marks.length) return [];
    const bottom = Math.max(...marks.map(r => r.bottom)), right = Math.max(...marks.map(r => r.right));
    return [...svg.querySelectorAll('g.role-legend')].map(g => g.getBoundingClientRect())
      .filter(r => r.width > 0 && r.top < bottom - 1 && r.left >= right - 1)
      .map(r => `a legend at x ${Math.round(r.left)} beside marks ending at ${Math.round(right)}`);
  })"""
# The narrowest clickable cell or bar (a rect mark with a pointer cursor) of each SVG chart, as [width, height, its
# chart's title]; and the bounding boxes of each chart's written labels (text marks), as lists of [l, t, r, b, text].
SVG_CELLS = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stVegaLiteChart] svg.marks')]
  .map(svg => {
    const cells = [...svg.querySelectorAll('g.mark-rect.role-mark > path')]
      .filter(p => (p.getAttribute('style') || '').includes('pointer') || getComputedStyle(p).cursor === 'pointer')
      .map(p => p.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0);
    const title = [...svg.querySelectorAll('g.role-title-text text')].map(t => t.textContent).join(' ');
    return cells.length ? [Math.min(...cells.map(r => r.width)), title] : null;
  }).filter(c => c)"""
LABELS = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stVegaLiteChart] svg.marks')]
  .map(svg => [...svg.querySelectorAll('g.mark-text.role-mark > text')].filter(t => t.textContent.trim())
    .map(t => { const r = t.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom, t.textContent]; }))"""
# The canvas charts' visible parts (a chart that scrolls in its box is seen through it): [left, top, right, bottom]
CANVASES = """() => [...document.querySelectorAll('[data-testid=stMain] [data-testid=stVegaLiteChart] canvas')]
  .map(c => { const r = c.getBoundingClientRect(); let box = {left: r.left, right: r.right};
    for (let a = c.parentElement; a; a = a.parentElement) if (getComputedStyle(a).overflowX !== 'visible') {
      const b = a.getBoundingClientRect();
      box = {left: Math.max(box.left, b.left), right: Math.min(box.right, b.right)};
      break; }
    return [box.left, r.top, box.right, r.bottom]; })"""


def _settled(page) -> None:
    settle(page)
    laid_out(page)  # every chart drawn and laid out (Vega sizes it, then its labels, after the script)


@pytest.fixture(scope="module")
def phone(app_url):
    """One page at a phone's size in the module's Chromium, for every page and model in turn."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        yield browser.new_page(viewport=PHONE)
        browser.close()


def _whole_page(page, path: Path) -> None:
    """A screenshot of the whole main area: Streamlit scrolls it inside the window, so the window is made as tall as
    it for the shot (the width, and so the layout, stays the phone's)."""
    tall = page.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
    page.set_viewport_size({"width": PHONE["width"], "height": max(PHONE["height"], min(int(tall), 16_000))})
    page.wait_for_timeout(300)
    page.screenshot(path=path)
    page.set_viewport_size(PHONE)


def _canvas_cells(page, box: list[float]) -> list[int]:
    """The widths of the cells a canvas chart draws, measured with the mouse along lines across its visible part
    (a third and two thirds of the way down): the length of each run of one tooltip, less the first and last run
    of a line (cut by its ends). Empty where no tooltip shows (a chart with nothing to hover)."""
    left, top, right, bottom = box
    runs: list[int] = []
    for y in (top + (bottom - top) / 3, top + 2 * (bottom - top) / 3):
        said, start, line = None, left, []
        x = left + 1.0
        while x < right - 1:
            page.mouse.move(x, y)
            now = page.evaluate(TIP)
            if now != said:
                if said:
                    line.append(round(x - start))
                said, start = now, x
            x += 1.0
        runs += line[1:-1]
    page.mouse.move(0, 0)
    return runs


def _overlaps(labels: list[list]) -> list[str]:
    """Pairs of labels whose boxes overlap by more than a pixel each way."""
    return [f"{a[4]!r} and {b[4]!r}" for i, a in enumerate(labels) for b in labels[i + 1:]
            if min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("key", list(PAGES))
def test_every_page_fits_a_phone(app_url, phone, key, model):
    title = f"{PAGES[key].title} on {model}"
    phone.goto(f"{app_url}/{'' if key == 'explore' else key}?page={key}&model={model}")
    _settled(phone)
    phone.locator("[data-testid=stMain] h1, [data-testid=stMain] h2").first.wait_for(timeout=WAIT_MS)
    failed = phone.locator("[data-testid=stException]").count() + phone.get_by_text(
        "Something went wrong on this page").count()
    found = phone.evaluate(OVERFLOW)
    cut, beside, labels = phone.evaluate(CUT), phone.evaluate(LEGENDS), phone.evaluate(LABELS)
    svg_cells = phone.evaluate(SVG_CELLS)
    canvas_cells = [_canvas_cells(phone, box) for box in phone.evaluate(CANVASES)]
    _whole_page(phone, SHOTS / f"phone_{key}_{model}.png")
    assert not failed, f"{title}: an exception box"
    assert not found["over"], f"{title}: {'; '.join(found['over'])}; from: {found['widest']}"
    assert not cut, f"{title}: text cut short: {cut}"
    assert not beside, f"{title}: {beside}"
    narrow = [f"{chart!r}: {width:.1f} px" for width, chart in svg_cells if width < MIN_CELL - 0.5]
    narrow += [f"a canvas chart's cells: {min(runs)} px" for runs in canvas_cells if runs and min(runs) < MIN_CELL - 1]
    assert not narrow, f"{title}: clickable cells narrower than {MIN_CELL} px: {narrow}"
    overlapping = [pair for chart in labels for pair in _overlaps(chart)]
    assert not overlapping, f"{title}: labels drawn over each other: {overlapping}"
