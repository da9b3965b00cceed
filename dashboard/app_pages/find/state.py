"""Find heads' part of the link (the question itself is the core's: ``ask_query``, ``ask_key``, ``ask_against``)."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart, choice

FIND_MEASURES = ("weight", "norm", "ablation")


@dataclass(frozen=True)
class FindState(LinkPart):
    find_measure: str = choice("weight", FIND_MEASURES)  # what the grid is coloured by
    count_sink: bool = False  # whether a word's first piece that is the text's first token (the sink) is counted
