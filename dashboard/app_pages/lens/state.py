"""The logit lens's part of the link: its view, and the first position of the window shown on a long text."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart, choice, whole

LENS_VIEWS = ("layers", "heads")


@dataclass(frozen=True)
class LensState(LinkPart):
    lens_view: str = choice("layers", LENS_VIEWS)
    lens_from: int = whole(-1, least=-1)  # -1: the last positions
