"""The Circuit page's part of the link: what the grid of every earlier head is coloured by, the convention of the
scores from the weights, and path patching's corrupted text and the part it patches into. A link with
``ran=patch`` runs path patching again when it opens."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart, choice, parsed
from probes.effects.compose import CONVENTIONS

CIRCUIT_GRIDS = ("weights k", "weights q", "weights v", "text k", "text q")  # source and kind
PATCH_INTO = ("k", "q", "v")
MAX_PATCH_TEXT = 20_000  # characters of path patching's corrupted text in a link (the page checks its tokens)


def _patch_text(raw: str) -> str:
    if len(raw) > MAX_PATCH_TEXT:
        raise ValueError(f"a corrupted text is at most {MAX_PATCH_TEXT:,} characters")
    return raw


@dataclass(frozen=True)
class CircuitState(LinkPart):
    circuit_grid: str = choice("weights k", CIRCUIT_GRIDS)
    convention: str = choice("raw", CONVENTIONS)
    patch_text: str = parsed("", _patch_text)  # "" = the page's own minimal pair of the story sentence
    patch_into: str = choice("k", PATCH_INTO)
