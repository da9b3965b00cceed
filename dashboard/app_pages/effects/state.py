"""Does it matter?'s part of the link: the measure of a head taken out, and how it is taken out."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart, choice

EFFECT_MEASURES = ("loss", "top_changed", "token_change", "hidden_change", "embedding_change")
ABLATIONS = ("zero", "mean")


@dataclass(frozen=True)
class EffectsState(LinkPart):
    effects_measure: str = choice("", ("", *EFFECT_MEASURES))  # "" = the page's default for the model
    effects_how: str = choice("zero", ABLATIONS)
