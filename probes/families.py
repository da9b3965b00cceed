"""The model families: the registry that finds their records.

Each record (:class:`~probes.scratch.family.Family`) lives beside its network in ``probes/scratch/<file>.py``
(a module-level ``FAMILIES`` tuple); this module collects them. Adding a family is one file with its record:
nothing else names it. Architectures no record covers still load, in the Hugging Face view only.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from . import scratch
from .scratch.family import Capture, Family

__all__ = ["Capture", "Family", "coverage", "families", "family_of", "markdown_table"]


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


def coverage() -> str:
    """One line for people: which families the from-scratch path covers."""
    titles = [f.title for f in families()]
    return "the from-scratch path covers " + ", ".join(titles[:-1]) + " and " + titles[-1]


def markdown_table() -> str:
    """The table of what the from-scratch path covers (docs/models.md), written from the records (a test keeps the
    page equal to it)."""
    lines = ["| family | `model_type` | positions | implemented | refused (`UnsupportedModel`, naming the option) |",
             "|---|---|---|---|---|"]
    for f in families():
        types = ", ".join(f"`{t}`" for t in f.model_types)
        lines.append(f"| {f.title} | {types} | {f.positions} | {f.implemented} | {f.refused} |")
    return "\n".join(lines)
