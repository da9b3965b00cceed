"""Generate's part of the link: the prompt, how many tokens to write, the step shown, and how tokens are chosen."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart

DEFAULT_PROMPT = "Xiaoming gave the apple to Xiaohong because she was"


@dataclass(frozen=True)
class GenerateState(LinkPart):
    prompt: str = DEFAULT_PROMPT  # the start of the text, what the model writes after
    new_tokens: int = 10
    step: int = 0  # the generation step shown
    sample: bool = False  # greedy, or sampled with the seed and filters below
    seed: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
