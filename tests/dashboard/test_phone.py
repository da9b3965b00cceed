"""Every page at a phone's width (390 × 844, Chromium through Playwright) on the offline default in its default
state: the main area never scrolls sideways (a chart, a formula or a table that does not fit scrolls in its own box,
or wraps), and no page shows an exception. A failure names the page and the element that reaches past its edge.
Screenshots go to ``screenshots/phone_<page>.png`` (git-ignored)."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import WAIT_MS, laid_out, launch, settle, sync_playwright

import dashboard.app_pages  # noqa: F401 - registers every page, in menu order
from dashboard.core.pages import PAGES

pytestmark = pytest.mark.xdist_group("browser")  # one worker starts the app's servers, one after the other

SHOTS = Path(__file__).resolve().parents[2] / "screenshots"
PHONE = {"width": 390, "height": 844}
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


def _settled(page) -> None:
    settle(page)
    laid_out(page)  # every chart drawn and laid out (Vega sizes it, then its labels, after the script)


@pytest.fixture(scope="module")
def phone(app_url):
    """One page at a phone's size in the module's Chromium, for every page in turn."""
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        yield browser.new_page(viewport=PHONE)
        browser.close()


@pytest.mark.parametrize("key", list(PAGES))
def test_every_page_fits_a_phone_without_sideways_scroll(app_url, phone, key):
    title = PAGES[key].title
    phone.goto(f"{app_url}/{'' if key == 'explore' else key}?page={key}")
    _settled(phone)
    phone.locator("[data-testid=stMain] h1, [data-testid=stMain] h2").first.wait_for(timeout=WAIT_MS)
    failed = phone.locator("[data-testid=stException]").count() + phone.get_by_text(
        "Something went wrong on this page").count()
    found = phone.evaluate(OVERFLOW)
    phone.screenshot(path=SHOTS / f"phone_{key}.png")
    assert not failed, f"{title}: an exception box"
    assert not found["over"], f"{title}: {'; '.join(found['over'])}; from: {found['widest']}"
