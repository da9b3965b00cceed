"""Text files are UTF-8: one decoder for every file read as text (``--data``, ``--reference``, ``--corpus``).

What is not UTF-8 is refused in one line that names the file, the line and the byte, and says what to do:

* a file that starts with a UTF-16 or UTF-32 byte-order mark (Windows Notepad's "Unicode", PowerShell's ``>``)
  is refused as a whole (:func:`check_start`), before any line of it is read as text full of NUL characters;
* bytes that are not UTF-8 (:func:`decode_line`, :func:`read_text`): the line, and the byte, of the first;
* a NUL character (UTF-16 text without a byte-order mark, or a binary file): the line it is on.

A UTF-8 byte-order mark is accepted (and dropped).
"""

from __future__ import annotations

import codecs
from pathlib import Path

from ..errors import BadData

SAVE_AS_UTF8 = "save the file as UTF-8 and rerun"
# the UTF-32 marks first: UTF-32-LE's starts with UTF-16-LE's
WIDE = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def wide_encoding(head: bytes) -> str | None:
    """The encoding whose byte-order mark ``head`` (a file's first bytes) starts with, "UTF-16" or "UTF-32"; None
    for any other start."""
    for mark, name in WIDE:
        if head.startswith(mark):
            return name
    return None


def check_start(name: str, head: bytes) -> None:
    """Refuse a file whose first bytes ``head`` are a UTF-16 or UTF-32 byte-order mark (BadData, one line)."""
    wide = wide_encoding(head)
    if wide:
        raise BadData(f"{name} is {wide} text (it starts with a {wide} byte-order mark), not UTF-8: {SAVE_AS_UTF8}")


def problem(raw: bytes) -> str | None:
    """Why one line's bytes are not UTF-8 text (the first bad byte, or a NUL), or None when they are."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start + 1} of the line is 0x{raw[exc.start]:02X}): {SAVE_AS_UTF8}"
    if "\x00" in text:
        return (f"a NUL character at byte {raw.index(0) + 1} of the line (UTF-16 text without a byte-order "
                f"mark, or not a text file): {SAVE_AS_UTF8}")
    return None


def decode_line(name: str, number: int, raw: bytes) -> str:
    """Line ``number`` of file ``name`` as text; BadData naming the file, line and byte when it is not UTF-8."""
    why = problem(raw)
    if why:
        raise BadData(f"{name} line {number}: {why}")
    return raw.decode("utf-8")


def read_text(path: str | Path) -> str:
    """A whole (small) text file as UTF-8 text, read like ``Path.read_text`` (newlines as ``\\n``, a UTF-8
    byte-order mark dropped); BadData, one line, on a UTF-16 or UTF-32 file or on the first line that is not
    UTF-8 text."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadData(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return decode(data, str(path))


def decode(data: bytes, name: str) -> str:
    """The bytes of a whole file (an upload) named ``name`` as :func:`read_text` reads them."""
    check_start(name, data[:4])
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.start
    else:
        bad = data.find(b"\x00")
        if bad < 0:
            return text.replace("\r\n", "\n").replace("\r", "\n")  # newlines as open() reads them
    start, end = data.rfind(b"\n", 0, bad) + 1, data.find(b"\n", bad)
    number, line = data.count(b"\n", 0, bad) + 1, data[start:end if end >= 0 else len(data)]
    raise BadData(f"{name} line {number}: {problem(line)}")
