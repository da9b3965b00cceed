"""CJK text in the PNG/SVG downloads (dashboard/fonts.py): with the font registered, vl-convert draws the glyphs.

Where a character has no font, vl-convert draws the same empty box for it, so two texts made of the same
characters in another order give the very same picture; drawn glyphs tell them apart."""

from __future__ import annotations

import io
import logging

import altair as alt
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from dashboard import fonts

STORY = "小明把苹果给了小红"
SHUFFLED = "小红把苹果给了小明"  # the same characters: only drawn glyphs make it look different
TOFU = "\ue000" * len(STORY)  # private-use characters: no font has them, so they are always boxes


def _chart(text: str) -> alt.Chart:
    frame = pd.DataFrame({"token": [text, "她"], "weight": [0.6, 0.4]})
    return alt.Chart(frame, title=text).mark_bar().encode(x=alt.X("token:N", title=text), y="weight:Q")


def _pixels(text: str) -> np.ndarray:
    import vl_convert

    return np.asarray(Image.open(io.BytesIO(vl_convert.vegalite_to_png(_chart(text).to_json(), scale=2))).convert("L"))


def test_cjk_is_drawn_in_the_png_and_written_in_the_svg():
    import vl_convert

    folder = fonts.register()
    assert folder is not None, f"no CJK font here: {fonts.INSTALL}"
    story, shuffled, tofu = _pixels(STORY), _pixels(SHUFFLED), _pixels(TOFU)
    assert story.shape != shuffled.shape or not np.array_equal(story, shuffled)  # glyphs, not one box for all
    assert story.shape != tofu.shape or not np.array_equal(story, tofu)
    assert (story < 128).sum() > (tofu < 128).sum()  # a hanzi has more ink than an empty box's outline
    svg = vl_convert.vegalite_to_svg(_chart(STORY).to_json())
    assert STORY in svg  # the SVG keeps the text as text: the viewer's fonts draw it


def test_register_is_once_per_process(monkeypatch):
    import vl_convert

    calls = []
    monkeypatch.setattr(vl_convert, "register_font_directory", calls.append)
    monkeypatch.setattr(fonts, "_done", False)
    monkeypatch.setattr(fonts, "_registered", None)
    monkeypatch.setattr(fonts, "find", lambda: fonts.Path("/some/fonts"))
    assert fonts.register() == fonts.register() == fonts.Path("/some/fonts")
    assert calls == ["/some/fonts"]


def test_no_cjk_font_is_one_clear_log_line_and_no_error(monkeypatch, caplog):
    import vl_convert

    monkeypatch.setattr(vl_convert, "register_font_directory", lambda path: pytest.fail("nothing to register"))
    monkeypatch.setattr(fonts, "_done", False)
    monkeypatch.setattr(fonts, "_registered", None)
    monkeypatch.setattr(fonts, "_packaged", lambda: None)
    monkeypatch.setattr(fonts, "SYSTEM_DIRS", ())
    with caplog.at_level(logging.INFO, logger="dashboard"):
        assert fonts.register() is None
        assert fonts.register() is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "no CJK font found" in warned[0] and "paperang-p2-fonts-cjk" in warned[0]


def test_a_system_cjk_font_is_found_by_its_file_name(tmp_path):
    (tmp_path / "noto").mkdir()
    (tmp_path / "noto" / "NotoSansCJK-Regular.ttc").write_bytes(b"")
    (tmp_path / "dejavu").mkdir()
    (tmp_path / "dejavu" / "DejaVuSans.ttf").write_bytes(b"")
    assert fonts._system((str(tmp_path / "dejavu"), str(tmp_path / "noto"))) == tmp_path / "noto"
    assert fonts._system((str(tmp_path / "dejavu"),)) is None
