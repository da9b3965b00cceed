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

from dashboard.core import fonts

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

    calls: list[str] = []  # each folder registered
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


# the page's webfont (fonts.webfont and .streamlit/config.toml): the browser gets the same WenQuanYi Micro Hei

def test_the_webfont_is_the_packaged_face_as_a_woff_that_has_the_story(tmp_path, monkeypatch):
    from fontTools.ttLib import TTFont

    monkeypatch.setattr(fonts, "_served", {})
    target = tmp_path / "static" / "fonts" / "wqy-microhei.woff"
    assert fonts.webfont(target) == target
    face = TTFont(str(target))
    assert face.flavor == "woff"  # a browser takes it (not the .ttc collection)
    assert face["name"].getDebugName(1) == "WenQuanYi Micro Hei"  # the proportional face, not the Mono one
    assert all(ord(ch) in face.getBestCmap() for ch in set(STORY + "，因为她很饿"))
    assert target.stat().st_size < 3_000_000  # compressed: the .ttc's face is 5.2 MB
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no partial file left behind
    written = target.stat().st_mtime_ns
    monkeypatch.setattr(fonts, "_served", {})  # a new process: the file is newer than the package's, so it is kept
    monkeypatch.setattr(fonts, "_write_woff", lambda *a: pytest.fail("written again"))
    assert fonts.webfont(target) == target and target.stat().st_mtime_ns == written


def test_the_theme_serves_the_webfont_after_the_visitors_own_cjk_fonts():
    import subprocess
    import tomllib

    root = fonts.Path(fonts.__file__).resolve().parents[2]
    config = tomllib.loads((root / ".streamlit" / "config.toml").read_text())
    assert config["server"]["enableStaticServing"] is True
    [face] = config["theme"]["fontFaces"]
    assert (face["family"], face["url"]) == (fonts.FAMILY, fonts.URL)
    # Streamlit serves dashboard/static/ (next to the main script, app.py or serve.py) at app/static/
    assert fonts.URL == "app/static/" + fonts.WEBFONT.relative_to(root / "dashboard" / "static").as_posix()
    ranges = [tuple(int(x, 16) for x in span.strip().removeprefix("U+").split("-"))
              for span in face["unicodeRange"].split(",")]
    assert all(any(lo <= ord(ch) <= hi for lo, hi in ranges) for ch in STORY + "，")
    assert not any(lo <= ord("A") <= hi for lo, hi in ranges)  # a page without CJK never downloads it
    for theme in ("light", "dark"):  # both (a font set in [theme] alone makes the app always light)
        for key in ("font", "codeFont"):
            names = [n.strip().strip("'\"") for n in config["theme"][theme][key].split(",")]
            assert names[-1] == fonts.FAMILY  # last: the visitor's own CJK fonts come first
            assert {"Noto Sans CJK SC", "Microsoft YaHei", "PingFang SC"} <= set(names)
    ignored = subprocess.run(["git", "check-ignore", "-q", str(fonts.WEBFONT)], cwd=root)
    assert ignored.returncode == 0  # written at run time from the installed package, never committed


def test_without_the_package_or_a_writable_folder_the_page_goes_without_a_webfont(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(fonts, "_served", {})
    (tmp_path / "empty").mkdir()
    (tmp_path / "a file").write_text("")
    with caplog.at_level(logging.INFO, logger="dashboard"):
        assert fonts.webfont(tmp_path / "out.woff", folder=tmp_path / "empty") is None
        assert fonts.webfont(tmp_path / "out.woff", folder=tmp_path / "empty") is None  # once per process
        assert fonts.webfont(tmp_path / "a file" / "out.woff") is None  # its folder cannot be made
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert "paperang-p2-fonts-cjk" in warned[0] and "empty boxes" in warned[0]
    assert "could not write the CJK webfont" in warned[1]
