"""What every benchmark does with its table: print it, and with ``--out``, write it under that folder too."""

from __future__ import annotations

from pathlib import Path


def publish(text: str, out: Path | None, name: str) -> None:
    """Print ``text``; with ``out`` (a folder, made if missing) also write it to ``out / name``."""
    print(text)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text.rstrip("\n") + "\n")


def section(text: str, label: str) -> list[str]:
    """The lines of the block that starts with ``label:`` in a saved result (up to a blank line), or []."""
    lines = text.splitlines()
    begin = next((i for i, line in enumerate(lines) if line.startswith(f"{label}:")), None)
    if begin is None:
        return []
    end = next((i for i in range(begin, len(lines)) if not lines[i].strip()), len(lines))
    return lines[begin:end]
