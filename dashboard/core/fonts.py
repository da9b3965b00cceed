"""A CJK font for the charts' PNG/SVG downloads. vl-convert draws text with the fonts it finds on the server,
and a server without a Chinese, Japanese or Korean font draws "小明把苹果给了小红" as empty boxes.
``register()`` hands vl-convert one: WenQuanYi Micro Hei from the ``paperang-p2-fonts-cjk`` wheel (2.3 MB; the
file is byte for byte Debian's fonts-wqy-microhei), else a CJK font that the system has. Nothing is fetched.

The page itself: ``webfont()`` writes the same font, as a WOFF, where Streamlit serves it to the browser
(``dashboard/static/fonts/``, git-ignored), and ``.streamlit/config.toml`` names it in the theme's fonts, after the
visitor's own CJK fonts: a browser without one (a Linux desktop without fonts-noto-cjk) still draws Chinese in the
sidebar, the callouts and the charts' tick labels, not empty boxes."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path

log = logging.getLogger("dashboard")

PACKAGE = "paperang_p2_fonts_cjk"  # its fonts/ folder holds wqy-microhei.ttc (zh-Hans, zh-Hant, ja, ko)
# where Debian's CJK font packages put their files: fonts-noto-cjk, fonts-wqy-microhei/zenhei, fonts-droid-fallback
SYSTEM_DIRS = ("/usr/share/fonts/opentype/noto", "/usr/share/fonts/truetype/wqy", "/usr/share/fonts/truetype/droid")
CJK_FILES = ("*CJK*.tt[cf]", "*CJK*.otf", "wqy-*.tt[cf]", "DroidSansFallback*.ttf")
INSTALL = "pip install paperang-p2-fonts-cjk (or apt-get install fonts-noto-cjk)"

# the webfont: its CSS family (not the system font's name, so that a visitor's own WenQuanYi comes first) and where
# Streamlit serves it ([server] enableStaticServing: dashboard/static/ at app/static/); both named in config.toml
FAMILY = "WenQuanYi Micro Hei Web"
WEBFONT = Path(__file__).resolve().parents[1] / "static" / "fonts" / "wqy-microhei.woff"
URL = "app/static/fonts/wqy-microhei.woff"

_lock = threading.Lock()
_done = False
_registered: Path | None = None
_served: dict[Path, Path | None] = {}


def _packaged() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "fonts"
    return folder if any(folder.glob("*.tt[cf]")) else None


def _system(dirs: tuple[str, ...] | None = None) -> Path | None:
    for folder in map(Path, SYSTEM_DIRS if dirs is None else dirs):
        if folder.is_dir() and any(f for pattern in CJK_FILES for f in folder.rglob(pattern)):
            return folder
    return None


def find() -> Path | None:
    """The folder of the CJK font to use, or None when there is none here."""
    return _packaged() or _system()


def register() -> Path | None:
    """Register a CJK font folder with vl-convert, once per process, and return it (None, with one warning in
    the log, when there is no CJK font here: the downloads still work, with CJK drawn as boxes)."""
    global _done, _registered
    with _lock:
        if _done:
            return _registered
        folder = find()
        if folder is None:
            log.warning("no CJK font found: Chinese, Japanese and Korean text in the PNG/SVG downloads will be "
                        "drawn as empty boxes; install one with: %s", INSTALL)
        else:
            import vl_convert

            vl_convert.register_font_directory(str(folder))
            log.info("CJK font for the chart downloads: %s", folder)
        _done, _registered = True, folder
        return folder


def _write_woff(source: Path, target: Path) -> None:
    """The collection's first face (WenQuanYi Micro Hei; the second is its Mono twin) as a WOFF: browsers take no
    .ttc, and WOFF's zlib makes the 5.2 MB face 2.1 MB (once: a newer file is kept; docs/app.md, "Downloads")."""
    from fontTools.ttLib import TTCollection

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")  # another process may be writing it too
    face = TTCollection(str(source)).fonts[0]
    face.flavor = "woff"
    face.save(str(partial))
    os.replace(partial, target)


def webfont(target: Path = WEBFONT, folder: Path | None = None) -> Path | None:
    """The CJK webfont the page's theme names (``FAMILY`` at ``URL``), written to ``target`` from the installed
    ``paperang-p2-fonts-cjk`` (``folder``: its fonts/ folder, found when None), once per process; kept when it is
    newer than the package's file. None, with one warning in the log, where there is no packaged font or the folder
    cannot be written: the page then draws CJK with the visitor's own fonts."""
    with _lock:
        if target in _served:
            return _served[target]
        found = None
        source = next(iter(sorted((folder or _packaged() or Path("/nonexistent")).glob("wqy-microhei.tt[cf]"))), None)
        if source is None:
            log.warning("no packaged CJK font: browsers without a Chinese, Japanese or Korean font of their own will "
                        "show such text as empty boxes; install it with: pip install paperang-p2-fonts-cjk")
        else:
            try:
                if not target.is_file() or target.stat().st_mtime < source.stat().st_mtime:
                    _write_woff(source, target)
                found = target
            except (OSError, ImportError) as exc:
                log.warning("could not write the CJK webfont to %s (%s): browsers without a CJK font of their own "
                            "will show Chinese, Japanese and Korean text as empty boxes", target, exc)
        _served[target] = found
        return found
