"""What every benchmark does with its table: print it, and with ``--out``, write it under that folder too."""

from __future__ import annotations

from pathlib import Path


def publish(text: str, out: Path | None, name: str) -> None:
    """Print ``text``; with ``out`` (a folder, made if missing) also write it to ``out / name``."""
    print(text)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text.rstrip("\n") + "\n")
