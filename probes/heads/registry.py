"""The probe registry: one :class:`Probe` record per probe.

A record says everything the CLI (``python -m probes profile``), the checkpointed runner
(:mod:`probes.heads.profile`) and the app's Heads page need to know about a probe: its name, one line
about it for people, its default data, how it reads and checks that data, how its items become model
inputs (texts by default; a probe may build its own :class:`~probes.models.Encoding` instead), how it
scores the Traces of those items, how chunk results combine exactly, and which data sets
``profile --probe all --data DATA`` runs it on.

Each record lives beside its code in ``probes/heads/<file>.py`` (a module-level ``PROBES`` tuple);
:func:`probes` collects them, ordered by ``order``. Adding a probe is one file with its record:
nothing else names it. The probes never run a model: they read the Traces that the runner in
:mod:`probes.heads.profile` hands them. Which items a data name means (the built-in names, files by their
extension) is :mod:`probes.datasets.catalog`'s to say.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import pandas as pd

from ..datasets import BadItem, Items
from ..datasets.catalog import read_items, sentence_data, texts
from ..errors import BadData
from .combine import Combine, mean

if TYPE_CHECKING:
    from ..seam import ModelLike


def from_data(check: Callable[[str, list], None] | None = None,
              unusable: Callable[[object], str | None] | None = None) -> Callable[[str | None, int | None], Items]:
    """A ``read_items`` for probes that read a data set: read it, let ``check(data, items)`` refuse data that
    does not suit the probe at all (with ``BadData``), set aside the items ``unusable(item)`` gives a
    reason for (with the reader's own bad items, in ``bad``), keep the first ``limit`` usable items."""
    def read(data: str | None, limit: int | None) -> Items:
        if data is None:  # (a probe that reads a data set has a default one)
            raise BadData("this probe reads a data set: give one with --data")
        items = read_items(data)
        bad = list(getattr(items, "bad", []))
        if check is not None and items:
            check(data, items)
        usable = []
        for item in items:
            reason = unusable(item) if unusable is not None else None
            if reason:
                bad.append(BadItem(data, getattr(item, "line", 0), reason))
            else:
                usable.append(item)
        return Items(usable[:limit] if limit else usable, bad, getattr(items, "notes", []))
    return read


@dataclass(frozen=True)
class Probe:
    name: str  # the --probe value and the ``probe`` column
    about: str  # one line for people (the Heads page)
    order: int  # where it stands among the probes (CLI, "all", the app's menu)
    default_data: str | None  # built-in data name, or None when the probe makes its own inputs
    read_items: Callable[[str | None, int | None], list]  # (data, limit) -> items; BadData when data does not suit
    score: Callable[[list, Iterable], pd.DataFrame]  # (items, their Traces in the same order) -> tidy DataFrame;
    # the runner hands the items in any order (shortest text first), so a score must not depend on it
    reads: Callable[[str], bool] = sentence_data  # does `profile --probe all --data DATA` run it on DATA?
    texts: Callable[[list], list[str]] = texts  # items -> texts, run in batches by the runner
    encodings: Callable[[ModelLike, list], list] | None = None  # (model, items) -> Encodings, instead of texts
    combine: Combine = mean()  # (chunk frames, all items) -> the whole result, exactly (probes.heads.combine)
    # labels that are plain shares (0..1) read as they are, not against their baseline: (label, what it is, for people)
    shares: tuple[tuple[str, str], ...] = ()
    # how a label's best head is judged on held-out items (probes.evidence.probes): "accuracy" (a share of hits
    # among n: Wilson's interval), "mean" (a mean over examples: a bootstrap over items), or None (a description,
    # not a claim: entropy, a pattern class)
    judged: Callable[[str], str | None] = lambda label: "accuracy"
    # the data-only baseline of each label chosen on one half of the items and scored on the other (the best fixed
    # offset of the chosen half): (chosen items, judged items, causal) -> {label: score}; None: the judged half's own
    # ``baseline`` column (uniform attention, the nearest candidate, a head's own controls)
    heldout_baseline: Callable[[list, list, bool], dict[str, float]] | None = None
    # word-pair probes: items -> their (query word, target word) pairs, whose labels a decoder may be unable to
    # attend at all (every target after its query): such a label is left out of a causal run, and said
    pairs: Callable[[list], list] | None = None

    def items(self, data: str | None, limit: int | None) -> list:
        """The probe's items: ``data`` (its default data when None), the first ``limit`` of them."""
        return self.read_items(data or self.default_data, limit)


@cache
def probes() -> dict[str, Probe]:
    """Every probe by name, in order, from the ``PROBES`` record(s) of each module in ``probes/heads``."""
    from .. import heads

    found: list[Probe] = []
    for info in sorted(pkgutil.iter_modules(heads.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{heads.__name__}.{info.name}")
        found += [p for p in getattr(module, "PROBES", ()) if isinstance(p, Probe)]
    names = [p.name for p in found]
    if len(names) != len(set(names)) or names.count("all"):
        raise RuntimeError(f"probe names must be unique and not 'all': {sorted(names)}")
    return {p.name: p for p in sorted(found, key=lambda p: (p.order, p.name))}


def get(name: str) -> Probe:
    """The record of one probe; ``BadData`` naming the choices for an unknown name."""
    found = probes().get(name)
    if found is None:
        raise BadData(f"unknown probe {name!r}: choose one of {', '.join(probes())} or all")
    return found


def for_data(data: str | None) -> list[Probe]:
    """What ``--probe all`` runs: every probe, or with ``--data DATA`` the probes that read it."""
    return [p for p in probes().values() if not data or p.reads(data)]


def share_labels() -> dict[str, str]:
    """The labels some probe scores as a plain share from 0 to 1, read as it is rather than as a gain over its
    baseline (positional's ``sink``), with what each is: whichever table they come in (a run, a corpus run's
    ``corpus`` rows)."""
    return {label: about for p in probes().values() for label, about in p.shares}
