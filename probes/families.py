"""The model families: the registry that finds their records.

Each record (:class:`~probes.scratch.family.Family`) lives beside its network in ``probes/scratch/<file>.py``
(a module-level ``FAMILIES`` tuple); this module collects them. Adding a family is one file with its record:
nothing else names it. Architectures no record covers still load, in the Hugging Face view only.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterable
from functools import cache

from . import scratch
from .scratch.family import Capture, DecoderNetwork, Family, Network

__all__ = ["Capture", "Family", "coverage", "decoders", "families", "family_of", "in_words", "markdown_table"]


@cache
def families() -> tuple[Family, ...]:
    """Every family, from the ``FAMILIES`` record of each module in ``probes/scratch``."""
    found: list[Family] = []
    for info in sorted(pkgutil.iter_modules(scratch.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{scratch.__name__}.{info.name}")
        found += getattr(module, "FAMILIES", ())
    types = [t for f in found for t in f.model_types]
    if len(types) != len(set(types)):
        raise RuntimeError(f"two family records claim the same model_type: {sorted(types)}")
    return tuple(sorted(found, key=lambda f: f.name))


def family_of(config) -> Family | None:
    """The family covering this config's ``model_type``, or None (Hugging Face view only)."""
    kind = getattr(config, "model_type", None)
    return next((f for f in families() if kind in f.model_types), None)


def decoders() -> tuple[Family, ...]:
    """The families whose from-scratch network writes text: a :class:`~probes.scratch.family.DecoderNetwork` (a
    final norm, a language-model head, positions after a KV cache), what generation and the logit lens run on. Read
    from each record's network class, which defines the methods ``DecoderNetwork`` adds to ``Network``
    (``tests/scratch/test_family.py`` builds every family's network and checks that this agrees)."""
    added = [name for name, value in vars(DecoderNetwork).items()
             if inspect.isfunction(value) and not name.startswith("_") and name not in vars(Network)]
    classes = {f.name: getattr(f.network, "func", f.network) for f in families()}  # a partial's class
    return tuple(f for f in families() if all(callable(getattr(classes[f.name], name, None)) for name in added))


def in_words(chosen: Iterable[Family] | None = None) -> str:
    """The titles of ``chosen`` (None: every family), in the registry's order, as a sentence lists them:
    "BERT, DistilBERT, … and RoBERTa". README, docs/index.md and docs/generation.md hold their lists to it
    (``tests/test_docs.py``)."""
    titles = [f.title for f in (families() if chosen is None else chosen)]
    return ", ".join(titles[:-1]) + " and " + titles[-1] if len(titles) > 1 else "".join(titles)


def coverage() -> str:
    """One line for people: which families the from-scratch path covers."""
    return "the from-scratch path covers " + in_words()


def markdown_table() -> str:
    """The table of what the from-scratch path covers (docs/models.md), written from the records (a test keeps the
    page equal to it)."""
    lines = ["| family | `model_type` | positions | implemented | refused (`UnsupportedModel`, naming the option) |",
             "|---|---|---|---|---|"]
    for f in families():
        types = ", ".join(f"`{t}`" for t in f.model_types)
        lines.append(f"| {f.title} | {types} | {f.positions} | {f.implemented} | {f.refused} |")
    return "\n".join(lines)
