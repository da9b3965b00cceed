"""bertviz's head view and model view as self-contained HTML that draws without internet access.

bertviz's own HTML loads require.js, d3 and jQuery from a CDN. Here d3 (from the mpld3 wheel) and
jQuery (from xstatic-jquery) are inlined instead, and bertviz's ``requirejs([...], callback)`` call
is answered by a few lines that hand it those two globals, so no require.js is needed. A note shows
itself when the view did not draw, instead of leaving an empty "Layer:" box.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib.metadata import distribution
from pathlib import Path

import numpy as np
import torch
from bertviz import head_view, model_view

# bertviz ships every layer x head x L^2 weight to the browser; at 64 tokens a 12 x 12-head model is
# about 4 MB of HTML (8 MB with a sentence pair, whose four sub-views repeat the weights once more).
MAX_TOKENS = 64
DECIMALS = 3  # 0.001 steps are finer than the 1/255 opacity steps the lines are drawn with

_LIBRARIES = {  # distribution -> the file inside it
    "mpld3": "mpld3/js/d3.v5.min.js",  # d3 5.7.0, the version bertviz asks the CDN for
    "xstatic-jquery": "xstatic/pkg/jquery/data/jquery.min.js",
}
_CDN_SCRIPT = re.compile(r'<script src="https?://[^"]*require[^"]*"></script>')
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{\s*paths:\s*\{[^{}]*\}\s*\}\);")
_REMOTE_SOURCE = re.compile(r"""src\s*=\s*["']?(https?:)?//""")
_VIS_SCRIPT = re.compile(r'<script type="text/javascript">(.*)</script>', re.DOTALL)
# bertviz's template fill also fills the marker's name in the comment beside it: weights twice over
_PARAMS = re.compile(r"const params = (.*?); // HACK: \1 is a template marker[^\n]*")
_REQUIRE_SHIM = """
function requirejs(names, callback) {  // bertviz asks require.js for d3 and jQuery, inlined above
    var modules = {d3: window.d3, jquery: window.jQuery};
    callback.apply(null, names.map(function (name) { return modules[name]; }));
}
"""
_FALLBACK = """
<p id="bertviz-fallback" hidden style="padding:0.75em;border:1px solid #e0a800;background:#fff8e1;
   font-family:sans-serif">This attention view could not be drawn in this browser.
   The heatmap on the page shows the same numbers.</p>
<script>
window.addEventListener("load", function () {
    var root = document.querySelector('[id^="bertviz-"]');
    if (!root || !root.querySelector("svg text")) {
        document.getElementById("bertviz-fallback").hidden = false;
    }
});
</script>
"""


def too_long(n_tokens: int) -> str | None:
    """Why an input of ``n_tokens`` tokens is not shown in bertviz, or None when it is."""
    if n_tokens <= MAX_TOKENS:
        return None
    return (
        f"The bertviz views are limited to {MAX_TOKENS} tokens (this input has {n_tokens}): they "
        "send every layer × head × token² weight to the browser at once. Use the heatmap, which "
        "shows one head at a time, for longer inputs."
    )


PAIR_MENU = 30  # px: the head view's second menu row ("Attention:"), where a narrow frame wraps it under "Layer:"


def head_view_height(n_tokens: int, pair: bool = False) -> int:
    """Pixel height of the head view's HTML for ``n_tokens`` tokens (bertviz: 22.5 px a token, under its menu); a
    sentence pair's view has a second menu ("Attention:"), which a narrow frame (a phone) puts on a row of its own,
    pushing the tokens down: room for that row, so the last token is never cut off at the frame's foot."""
    return round(22.5 * n_tokens) + 80 + (PAIR_MENU if pair else 0)


def model_view_height(n_layers: int, n_heads: int, n_tokens: int) -> int:
    """Pixel height of the model view's HTML: one row of thumbnails per layer (bertviz's layout)."""
    thumbnail = n_tokens * 7 * 12 / n_heads + 10
    detail = n_tokens * 18 + 55
    return round(max(n_layers * thumbnail + 38, detail)) + 30


def head_view_html(
    attention: list[np.ndarray], tokens: list[str], sentence_b_start: int | None = None, layer: int = 0,
    heads: list[int] | None = None,
) -> str:
    """bertviz's head view (the heads of one layer, as lines) as a self-contained HTML page, opening on
    ``layer`` with ``heads`` shown (default: every head): the sidebar's layer and head, in the app."""
    view = head_view(_tensors(attention, tokens, sentence_b_start), tokens, sentence_b_start, layer=layer,
                     heads=heads, html_action="return")
    return _offline(view.data)


def model_view_html(
    attention: list[np.ndarray], tokens: list[str], sentence_b_start: int | None = None
) -> str:
    """bertviz's model view (every layer x head as a thumbnail) as a self-contained HTML page."""
    view = model_view(_tensors(attention, tokens, sentence_b_start), tokens, sentence_b_start,
                      display_mode="light", html_action="return")
    return _offline(view.data, fit=True)


def _tensors(attention, tokens, sentence_b_start) -> tuple[torch.Tensor, ...]:
    """Check [heads, n, n] arrays against the tokens; bertviz wants [1, heads, n, n] tensors."""
    n = len(tokens)
    if message := too_long(n):
        raise ValueError(message)
    if not attention:
        raise ValueError("attention has no layers")
    expected = (attention[0].shape[0], n, n)
    for i, layer in enumerate(attention):
        if layer.shape != expected:
            raise ValueError(f"layer {i} attention has shape {layer.shape}, expected "
                             f"{expected} ([heads, tokens, tokens] for {n} tokens)")
    if sentence_b_start is not None and not 0 < sentence_b_start < n:
        raise ValueError(f"sentence_b_start={sentence_b_start} must lie inside the {n} tokens")
    # rounded float64 prints as "0.123" in bertviz's JSON instead of float32's "0.12300000339746475"
    return tuple(torch.from_numpy(np.round(np.asarray(a, np.float64), DECIMALS))[None]
                 for a in attention)


# bertviz draws the model view at a fixed width (a thumbnail per head): wider than its frame, it is scaled
# down to the frame's width (on every resize), so the last heads are never cut off
_FIT = """
function fitToWidth() {
  const body = document.body;
  body.style.zoom = 1;
  const wide = body.scrollWidth;
  if (wide > window.innerWidth) { body.style.zoom = window.innerWidth / wide; }
}
new ResizeObserver(fitToWidth).observe(document.body);
window.addEventListener("resize", fitToWidth);
"""


def _offline(html: str, fit: bool = False) -> str:
    """Swap bertviz's CDN loading for inlined libraries and add the fallback note (and, ``fit``, the script that
    scales a view wider than its frame down to the frame's width)."""
    html, n_cdn = _CDN_SCRIPT.subn("", html)
    html, n_config = _REQUIRE_CONFIG.subn("", html)
    script = _VIS_SCRIPT.search(html)
    if n_cdn != 1 or n_config != 1 or script is None or _REMOTE_SOURCE.search(html):
        raise RuntimeError("bertviz's HTML has changed (its CDN <script> or require.config is not "
                           "where it was), so the view cannot be made to work offline")
    vis_js = _PARAMS.sub(r"const params = \1;", script[1], count=1)
    # a token such as "</script>" must not end the script early
    vis_js = vis_js.replace("</", "<\\/").replace("<!--", "<\\!--")
    libraries = "".join(f"<script>{_library(d, p)}</script>\n" for d, p in _LIBRARIES.items())
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">\n'
        f"{libraries}<script>{_REQUIRE_SHIM}</script>\n</head><body>\n"
        f"{html[:script.start()]}{_FALLBACK}<script>{vis_js}</script>\n"
        + (f"<script>{_FIT}</script>\n" if fit else "") + "</body></html>\n"
    )


@lru_cache
def _library(dist: str, path: str) -> str:
    return Path(str(distribution(dist).locate_file(path))).read_text(encoding="utf-8")
