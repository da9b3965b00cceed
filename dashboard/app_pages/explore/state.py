"""Explore's part of the link: the clicked cell's key token, the word-level view, what the heatmap is coloured by."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart, choice, whole

# what Explore's heatmap is coloured by: value -> its name in the app
COLOURS = {"weights": "attention weights", "norms": "value-weighted norms", "rollout": "rollout"}


@dataclass(frozen=True)
class ExploreState(LinkPart):
    key: int = whole(-1)  # the key token of the clicked cell (its column, and "Why this weight?"); -1: none
    words: bool = False  # word-level view (pieces merged)
    colour: str = choice("weights", COLOURS)  # the heatmap: attention weights, value-weighted norms or rollout
    hide_first: bool = False  # the heatmap of weights: the first token hidden, each row rescaled over the rest
