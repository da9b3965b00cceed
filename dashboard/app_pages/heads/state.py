"""Heads' part of the link: the built-in probe run on the current model, over how many items, and the label whose
grid is shown. A link with ``ran=heads`` runs the probe again when it opens."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart


@dataclass(frozen=True)
class HeadsState(LinkPart):
    probe: str = "positional"
    items: int = 100  # half choose each label's head, half judge it: 30 or more each
    label: str = ""  # "" = the one that gains most
