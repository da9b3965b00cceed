"""Probe data: readers (CoNLL-U, UD English-EWT, coreference items) and a cache that fetches pinned
registry archives (version + sha256) once. No third-party text is committed to this repository."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BadItem:
    """One item of a data file that cannot be used: where it is (file and line) and why."""

    file: str  # the data file (or built-in name) it came from
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


class Items(list):
    """The usable items of a data set, in order, with the bad ones that were skipped (``bad``), so a run
    can report every one of them (or, ``--strict``, refuse)."""

    def __init__(self, items=(), bad=(), notes=()):
        super().__init__(items)
        self.bad: list[BadItem] = list(bad)
        self.notes: list[str] = list(notes)  # what a reader did to place items (said once, with counts)
