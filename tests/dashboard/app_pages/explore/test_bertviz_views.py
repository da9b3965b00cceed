import json
import re
from pathlib import Path

import numpy as np
import pytest
from browser import launch, offline_page, sync_playwright
from IPython.display import HTML

from dashboard.app_pages.explore import bertviz_views
from dashboard.app_pages.explore.bertviz_views import (
    MAX_TOKENS,
    head_view_height,
    head_view_html,
    model_view_height,
    model_view_html,
    too_long,
)

VIEWS = [head_view_html, model_view_html]
SCREENSHOTS = Path(__file__).resolve().parents[4] / "screenshots"


def uniform(layers=2, heads=2, n=3):
    return [np.full((heads, n, n), 1 / n, np.float32) for _ in range(layers)]


def params(html):
    """The data bertviz's script draws from."""
    found = re.search(r"const params = (.*);\n", html)
    assert found, "no params in the page"
    return json.loads(found[1])


@pytest.mark.parametrize("view", VIEWS)
def test_no_network_script_sources(view):
    html = view(uniform(), ["a", "b", "c"])
    assert not re.search(r"""src\s*=\s*["']?https?:""", html)
    assert "cdnjs" not in html and "require.config" not in html


@pytest.mark.parametrize("view", VIEWS)
def test_libraries_inlined_before_the_view(view):
    html = view(uniform(), ["a", "b", "c"])
    d3, jquery = html.index("d3js.org v5."), html.index("jQuery v")
    shim, vis = html.index("function requirejs("), html.index("requirejs(['jquery', 'd3']")
    assert max(d3, jquery) < shim < vis


@pytest.mark.parametrize("view", VIEWS)
def test_weights_and_tokens_are_in_the_html_once(view):
    attention = uniform()
    attention[1][0, 2] = [0.123456, 0.5, 0.376544]
    html = view(attention, ["[CLS]", "cats", "[SEP]"])
    data = params(html)["attention"]
    assert len(data) == 1 and html.count('"left_text"') == 1
    assert data[0]["attn"] == np.round(np.stack(attention).astype(np.float64), 3).tolist()
    assert data[0]["attn"][1][0][2] == [0.123, 0.5, 0.377]
    assert data[0]["left_text"] == data[0]["right_text"] == ["[CLS]", "cats", "[SEP]"]


def test_the_head_view_opens_on_the_given_layer_and_heads():
    shown = params(head_view_html(uniform(), ["a", "b", "c"], layer=1, heads=[1]))
    assert (shown["layer"], shown["heads"]) == (1, [1])
    every = params(head_view_html(uniform(), ["a", "b", "c"]))
    assert every["layer"] == 0 and every["heads"] is None  # bertviz draws every head


def test_sentence_pair_adds_the_four_sub_views():
    html = head_view_html(uniform(n=4), ["a", "b", "c", "d"], sentence_b_start=2)
    data = params(html)["attention"]
    assert [d["name"] for d in data][:3] == ["All", "Sentence A -> Sentence A",
                                            "Sentence B -> Sentence B"]
    assert data[2]["left_text"] == ["c", "d"]


def test_a_token_cannot_end_the_script():
    html = head_view_html(uniform(), ["a", "</script>", "<!--"])
    assert '"</script>"' not in html and '"<\\/script>"' in html
    assert '"<!--"' not in html


def test_length_cap():
    assert too_long(MAX_TOKENS) is None
    refusal = too_long(MAX_TOKENS + 1)
    assert refusal is not None and "heatmap" in refusal
    tokens = [f"t{i}" for i in range(MAX_TOKENS + 1)]
    with pytest.raises(ValueError, match=f"limited to {MAX_TOKENS} tokens"):
        head_view_html(uniform(1, 1, MAX_TOKENS + 1), tokens)


def test_shape_mismatches_are_errors():
    with pytest.raises(ValueError, match="expected"):
        head_view_html(uniform(n=3), ["a", "b"])
    with pytest.raises(ValueError, match="layer 1"):
        model_view_html([np.ones((2, 3, 3)), np.ones((4, 3, 3))], ["a", "b", "c"])
    with pytest.raises(ValueError, match="sentence_b_start"):
        head_view_html(uniform(), ["a", "b", "c"], sentence_b_start=3)


@pytest.mark.parametrize("change", [
    lambda html: html.replace("<script src=", "<script defer src="),
    lambda html: html.replace("require.config(", "requirejs.config("),
    lambda html: html.replace("<div", '<script src="//cdn.example/d3.js"></script><div'),
])
def test_changed_bertviz_markup_is_an_error(monkeypatch, change):
    real = bertviz_views.head_view
    changed = lambda *args, **kwargs: HTML(change(real(*args, **kwargs).data))  # noqa: E731
    monkeypatch.setattr(bertviz_views, "head_view", changed)
    with pytest.raises(RuntimeError, match="bertviz's HTML has changed"):
        head_view_html(uniform(), ["a", "b", "c"])


# --- in a real browser, with every http(s) request blocked ---------------------------------------

@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    page = offline_page(browser)  # a fresh page: set_content keeps the last page's globals (d3)
    yield page
    page.close()


def softmax_attention(layers, heads, n, seed=0):
    scores = np.random.default_rng(seed).normal(size=(layers, heads, n, n)) * 2
    weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    return list(weights.astype(np.float32))


def drawn_tokens(page):
    return page.locator("[id^=bertviz-] svg text").all_text_contents()


def test_head_view_draws_offline(page):
    tokens = ["[CLS]", "the", "cat", "sat", "down", "[SEP]"]
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    page.set_viewport_size({"width": 800, "height": 100})
    page.set_content(head_view_html(softmax_attention(2, 4, 6), tokens))
    assert [url for url in requested if url.startswith("http")] == []
    assert drawn_tokens(page) == tokens * 2  # the left and the right column
    assert page.locator("[id^=bertviz-] svg line").count() > 0
    assert page.locator("#bertviz-fallback").is_hidden()
    assert page.evaluate("document.documentElement.scrollHeight") <= head_view_height(6)
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=SCREENSHOTS / "bertviz_head_view.png", full_page=True)


LAST_ROW = """() => Math.max(...[...document.querySelectorAll('[id^=bertviz-] svg text')]
  .map(e => e.getBoundingClientRect().bottom))"""


@pytest.mark.parametrize("width", [358, 940])  # the frame on a phone, and at a desk beside the sidebar
@pytest.mark.parametrize("pair", [False, True])
def test_the_head_views_frame_grows_with_the_tokens_and_holds_the_last_row(page, width, pair):
    """In a frame of ``head_view_height`` px, at a phone's width and a desk's, the last token is drawn above the
    frame's foot and nothing scrolls, one sentence or a pair (whose second menu wraps to a row of its own in a
    narrow frame: the last row was cut off)."""
    heights = []
    for n in (4, 15, 40, MAX_TOKENS):
        height = head_view_height(n, pair=pair)
        page.set_viewport_size({"width": width, "height": height})
        page.set_content(head_view_html(softmax_attention(2, 12, n), [f"token{i}" for i in range(n)],
                                        sentence_b_start=n // 2 if pair else None))
        assert page.evaluate(LAST_ROW) <= height, (n, height)
        assert page.evaluate("document.documentElement.scrollHeight") <= height, (n, height)
        heights.append(height)
    assert heights == sorted(heights) and len(set(heights)) == len(heights)  # more tokens, a taller frame


def test_tokens_that_look_like_html_are_drawn_as_text(page):
    tokens = ["a", "</script>", "<!--", "<b>"]
    page.set_content(head_view_html(softmax_attention(1, 1, 4), tokens))
    assert drawn_tokens(page) == tokens * 2


def test_model_view_draws_offline(page):
    page.set_viewport_size({"width": 1000, "height": 100})
    page.set_content(model_view_html(softmax_attention(3, 4, 5), list("abcde")))
    assert page.locator("[id^=bertviz-] svg text").count() > 0
    assert page.locator("#bertviz-fallback").is_hidden()
    assert page.evaluate("document.documentElement.scrollHeight") <= model_view_height(3, 4, 5)


def test_note_shows_when_the_view_cannot_draw(page):
    html = head_view_html(softmax_attention(1, 2, 3), ["a", "b", "c"])
    without_d3 = re.sub(r"<script>// https://d3js\.org.*?</script>", "", html, flags=re.S)
    assert "d3js.org" not in without_d3
    page.set_content(without_d3)
    assert drawn_tokens(page) == []
    note = page.locator("#bertviz-fallback")
    assert note.is_visible() and "could not be drawn" in note.inner_text()
