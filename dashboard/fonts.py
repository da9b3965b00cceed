"""A CJK font for the charts' PNG/SVG downloads. vl-convert draws text with the fonts it finds on the server,
and a server without a Chinese, Japanese or Korean font draws "小明把苹果给了小红" as empty boxes.
``register()`` hands vl-convert one: WenQuanYi Micro Hei from the ``paperang-p2-fonts-cjk`` wheel (2.3 MB; the
file is byte for byte Debian's fonts-wqy-microhei), else a CJK font that the system has. Nothing is fetched."""

from __future__ import annotations

import importlib.util
import logging
import threading
from pathlib import Path

log = logging.getLogger("dashboard")

PACKAGE = "paperang_p2_fonts_cjk"  # its fonts/ folder holds wqy-microhei.ttc (zh-Hans, zh-Hant, ja, ko)
# where Debian's CJK font packages put their files: fonts-noto-cjk, fonts-wqy-microhei/zenhei, fonts-droid-fallback
SYSTEM_DIRS = ("/usr/share/fonts/opentype/noto", "/usr/share/fonts/truetype/wqy", "/usr/share/fonts/truetype/droid")
CJK_FILES = ("*CJK*.tt[cf]", "*CJK*.otf", "wqy-*.tt[cf]", "DroidSansFallback*.ttf")
INSTALL = "pip install paperang-p2-fonts-cjk (or apt-get install fonts-noto-cjk)"

_lock = threading.Lock()
_done = False
_registered: Path | None = None


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
