"""Chart downloads: the PNG and SVG a user gets are real images of the chart on the page."""

import numpy as np

from dashboard.app_pages.explore import charts as explore_charts
from dashboard.core import token_charts, ui


def test_png_and_svg_downloads_render_the_chart():
    chart = token_charts.attention_heatmap(["[CLS]", "she", "[SEP]"], np.full((3, 3), 1 / 3), "Layer 1, head 2")
    png = ui._png(chart)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000
    svg = ui._svg(chart).decode()
    assert svg.startswith("<svg") and "Layer 1, head 2" in svg and "1: she" in svg


def test_downloads_of_big_charts_are_not_cut_by_altairs_row_limit():
    multiples = explore_charts.layer_multiples(np.full((12, 40, 40), 1 / 40), layer=0)  # 19,200 rows
    assert ui._png(multiples).startswith(b"\x89PNG")


def test_safe_shows_user_text_as_typed_never_as_markdown():
    import re

    for text in ("[Session expired: log in again](https://evil.example/login)", "![t](https://evil.example/t.png)",
                 "**bold** _it_ `code` # title :red[x] <b>x</b> $x$ 1. item | a |"):
        escaped = ui.safe(text)
        assert re.sub(r"\\(.)", r"\1", escaped).replace("\u2060", "") == text  # nothing lost
        assert "://" not in escaped.replace("\\", "")  # no bare address left for the autolinker
        assert not re.search(r"(?<!\\)[\[\]()*_`#:<>$|!]", escaped)  # every markdown character escaped
    assert ui.safe("she was hungry") == "she was hungry"
