"""A long text the project ships for the KV lab: UD English-EWT's dev sentences in their order (web text: blog posts,
reviews, emails, answers), from the pinned registry package :mod:`probes.datasets.dependencies` reads, joined into
running text. UD English-EWT is © its authors, CC BY-SA 4.0 (see docs/head-probes.md)."""

from __future__ import annotations

import re

from ..datasets.dependencies import ewt

NO_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}'’”]|n't|'s|'re|'ve|'ll|'d|'m)(?=\s|$)")
NO_SPACE_AFTER = re.compile(r"([(\[{$“]) ")


def detokenized(words: list[str]) -> str:
    """A sentence's words as running text: no space before punctuation and clitics, none after an opening bracket."""
    text = " ".join(words)
    text = NO_SPACE_BEFORE.sub(r"\1", text)
    return NO_SPACE_AFTER.sub(r"\1", text)


def ewt_text(model, tokens: int, split: str = "dev") -> str:
    """EWT's sentences of ``split`` in order, as many whole ones as fit in ``tokens`` tokens of ``model``'s
    tokenizer (at least one)."""
    out: list[str] = []
    used = 0
    for sentence in ewt(split):
        piece = detokenized(sentence.words)
        n = len(model.tokenizer(" " + piece if out else piece, add_special_tokens=False)["input_ids"])
        if out and used + n > tokens:
            break
        out.append(piece)
        used += n
    return " ".join(out)
