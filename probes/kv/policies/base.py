"""What every policy is, the registry that finds one by name, and the reading of a policy's written form.

A policy is one class (:class:`Policy`'s subclass, entered in :data:`POLICIES` by :func:`register`): how it is
written (``forms``: the word that starts it and the words it takes after it; ``syntax``: the same for the help), how
its numbers are read and checked (:meth:`Policy.read`), its name, what it says of itself (``evicts``, ``scored``,
``cuts``, :meth:`Policy.covers`), which held keys a query reads (:meth:`Policy.reads`), what its rule keeps between
steps and which key it evicts (:meth:`Policy.start`, :meth:`Policy.placed`, :meth:`Policy.observe`,
:meth:`Policy.victim`, or at once :meth:`Policy.evictions` where no score is read), and the policy a budget sweep runs
at a budget (:meth:`Policy.at_budget`, with ``words`` for the menu). Nothing outside the class names it: the cache,
the streamed and masked runs, the sweep and the CLI ask the policy.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ...errors import BadOption

FAR = torch.iinfo(torch.long).max  # a position no slot holds, sorted last

POLICIES: dict[str, type[Policy]] = {}  # kind -> its class, in the order they were registered


def register(cls: type[Policy]) -> type[Policy]:
    """Enter a policy class in :data:`POLICIES` under its ``kind`` (a class decorator), made a frozen dataclass on the
    way (hashable, compared by its class and numbers, read-only: policies are dict keys and set members). A kind or a
    written word another policy has is refused."""
    if not cls.kind or not cls.forms or not cls.syntax:
        raise TypeError(f"{cls.__name__} needs a kind, its forms and its syntax to be registered")
    if cls.kind in POLICIES:
        raise ValueError(f"a policy named {cls.kind!r} is registered already ({POLICIES[cls.kind].__name__})")
    taken = {word for other in POLICIES.values() for word in other.forms}
    clash = sorted(set(cls.forms) & taken)
    if clash:
        raise ValueError(f"{cls.__name__} starts with {', '.join(clash)}, which another policy starts with")
    if "__dataclass_params__" not in cls.__dict__:
        dataclass(frozen=True)(cls)
    POLICIES[cls.kind] = cls
    return cls


def kinds() -> tuple[str, ...]:
    """The words a policy starts with, in the registry's order (``streaming`` among them: a way of writing sinks)."""
    return tuple(word for cls in POLICIES.values() for word in cls.forms)


def syntax() -> str:
    """Every written form, for the help and the errors (``full, window:W, sinks:S+window:W, streaming:B, ...``)."""
    return ", ".join(form for cls in POLICIES.values() for form in cls.syntax)


class Menu(Mapping[str, str]):
    """The kinds a budget sweep offers, in the registry's order: kind -> its name in words (a policy with ``words``).
    Read from the registry at each use: a policy registered later is offered too."""

    def _now(self) -> dict[str, str]:
        return {kind: cls.words for kind, cls in POLICIES.items() if cls.words is not None}

    def __getitem__(self, kind: str) -> str:
        return self._now()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())

    def __repr__(self) -> str:
        return f"Menu({self._now()!r})"


MENU = Menu()


@dataclass(frozen=True)
class Step:
    """One step of a keeper's heads (h key/value heads, each read by ``group`` query heads), as its policy's rule sees
    it after the attention: ``positions`` ``[h, cap]`` (−1: an empty slot), ``probs`` ``[h·g, cap]`` the newest query's
    attention over the slots (0 where it did not look), ``q`` ``[h·g, d]`` that query, ``keys`` ``[h, cap, d]`` the
    slots' keys, ``scale`` the layer's, ``n_held`` the keys each head holds now (the newest included)."""

    t: int
    positions: torch.Tensor
    probs: torch.Tensor
    q: torch.Tensor
    keys: torch.Tensor
    group: int
    scale: float
    n_held: int


class _Spelled(type):
    """``Policy("window", budget=8, recent=8)``, a policy built by its kind before policies were classes, still
    builds the registered class, with a DeprecationWarning."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Policy:
            if not args or not isinstance(args[0], str):
                raise TypeError("Policy is the base of the policy classes: write parse('window:8'), or build a "
                                "class of probes.kv.policies.POLICIES")
            kind, *rest = args
            if kind not in POLICIES:
                raise BadOption(f"unknown policy kind {kind!r}: choose from {', '.join(POLICIES)}")
            warnings.warn("Policy(kind, ...) is deprecated: write parse(name), or build the policy's class "
                          f"(POLICIES[{kind!r}])", DeprecationWarning, stacklevel=2)
            return POLICIES[kind](*rest, **kwargs)
        return super().__call__(*args, **kwargs)


@dataclass(frozen=True)
class Policy(metaclass=_Spelled):
    """One policy: its class says which (``kind``, the registry's name), its numbers how much. ``budget``: the keys a
    query sees (None: every past key, ``full`` and ``strided``); ``sinks``: first tokens always kept; ``recent``:
    newest tokens always kept (the window of ``window``/``sinks``, H2O's recent part, SnapKV's observation window,
    ``strided``'s local part); ``stride``: ``strided``'s C."""

    budget: int | None = None
    sinks: int = 0
    recent: int = 0
    stride: int = 0

    kind: ClassVar[str] = ""  # its name in the registry (and in tables and links)
    forms: ClassVar[dict[str, tuple[str, ...]]] = {}  # the word it starts with -> the words it takes after it
    first_after: ClassVar[dict[str, tuple[str, ...]]] = {}  # a starting word -> words that may come before it
    bare: ClassVar[bool] = False  # its starting word takes no number (``full``)
    syntax: ClassVar[tuple[str, ...]] = ()  # its written forms, for the help (``h2o:B[+recent:R]``)
    words: ClassVar[str | None] = None  # its name in a sweep's menu (None: a sweep does not offer it)
    evicts: ClassVar[bool] = True  # the cache is bounded by the budget (else it keeps every key: full, strided)
    scored: ClassVar[bool] = False  # what it keeps depends on attention weights (H2O, TOVA, SnapKV)
    cuts: ClassVar[bool] = True  # a query reads less than the full cache (False: full attention)
    reads_keys: ClassVar[bool] = False  # its rule re-reads the held keys (SnapKV's vote)

    @classmethod
    def read(cls, word: str, parts: dict[str, int], whole: str) -> Policy:
        """The policy from its written numbers (``parts``: word -> number, ``word`` the one it started with, every
        other word one that ``forms`` allows), checked: :class:`BadOption` naming ``whole`` says what is wrong."""
        raise NotImplementedError

    @classmethod
    def at_budget(cls, budget: int, sinks: int) -> Policy:
        """The policy of this kind that reads at most ``budget`` keys (≥ 1), ``sinks`` the first tokens a policy with
        sinks keeps, or :class:`BadOption` saying why there is none. By default ``kind:budget``."""
        return cls.read(cls.kind, {cls.kind: budget}, f"{cls.kind}:{budget}")

    @property
    def name(self) -> str:
        """The policy as one writes it (what :func:`parse` reads back)."""
        return f"{self.kind}:{self.budget}"

    def covers(self, tokens: int) -> bool:
        """Whether a text of ``tokens`` tokens fits the budget, so nothing is ever cut (the policy is full attention
        there: the proof holds it to the full cached pass bit for bit)."""
        assert self.budget is not None
        return self.budget >= tokens

    def reads(self, query: int | torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
        """Of the keys a head holds, those the query at position ``query`` reads (the keys at positions ``key``; both
        broadcast): a static pattern (``strided``'s), or None: every held key."""
        return None

    def start(self, heads: int, capacity: int, dtype: torch.dtype, device: torch.device | str) -> Any:
        """What its rule keeps between steps for ``heads`` key/value heads of ``capacity`` slots (None: nothing)."""
        return None

    def placed(self, state: Any, slots: torch.Tensor) -> None:
        """The newest token went into ``slots`` ``[h]`` of the heads."""

    def observe(self, state: Any, step: Step) -> None:
        """Every step's attention, while the cache fills and after."""

    def victim(self, state: Any, step: Step) -> torch.Tensor:
        """The slot each head frees ``[h]``, its cache full (``step.n_held`` = the budget)."""
        raise NotImplementedError(f"{type(self).__name__} evicts but says no victim")

    def evictions(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
        """When each key of a text of ``n`` tokens leaves a head ``[n]`` int32 (``n``: kept to the end), where that
        follows from positions alone; None where the rule reads scores and only a replay says."""
        if not self.evicts:
            return torch.full((n,), n, dtype=torch.int32, device=device)
        return None


def oldest_past(step: Step, sinks: int) -> torch.Tensor:
    """The oldest held key past the first ``sinks`` positions, per head: the slot a window (with or without sinks)
    frees."""
    held = step.positions >= 0
    far = torch.full_like(step.positions, FAR)
    return torch.where(held & (step.positions >= sinks), step.positions, far).argmin(-1)


def rows_at(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Each head's rows of ``x`` ``[h, n, d]`` at ``index`` ``[h, m]``: ``[h, m, d]``, ``x[i, index[i]]`` (the keys a
    head holds, by slot or by position). Indexing copies whole rows; ``gather`` with the index expanded over ``d``
    reads an index per number, and was most of a replayed layer's time."""
    return x[torch.arange(x.shape[0], device=x.device)[:, None], index]


def _number(text: str, what: str, whole: str) -> int:
    # ASCII digits only: \d and int() also read '٣' and '３' as 3
    if not re.fullmatch(r"[0-9]{1,9}", text):
        raise BadOption(f"policy {whole!r}: {what} must be a whole number (got {text!r}); write {syntax()}")
    return int(text)


def at_least(value: int, minimum: int, what: str, whole: str) -> int:
    """``value``, or :class:`BadOption`: ``what`` in policy ``whole`` must be at least ``minimum``."""
    if value < minimum:
        raise BadOption(f"policy {whole!r}: {what} must be at least {minimum} (got {value})")
    return value


def parse(text: str) -> Policy:
    """A policy from its written form (``"sinks:4+window:252"``), or :class:`BadOption` saying what is wrong in one
    line: an unknown word, a number that is not a whole one, a number where none goes, a word twice, a word its
    policy does not take, and its class's own checks (a window below 1, sinks at or above the budget...)."""
    whole = text.strip()
    starts = {word: cls for cls in POLICIES.values() for word in cls.forms}
    taken = {word for cls in POLICIES.values() for after in cls.forms.values() for word in after}
    parts: dict[str, int] = {}
    order: list[str] = []
    for part in whole.lower().split("+"):
        key, _, value = part.strip().partition(":")
        if key in starts and starts[key].bare:
            if value:
                raise BadOption(f"policy {whole!r}: {key} takes no number: write {key}")
        elif key not in starts and key not in taken:
            raise BadOption(f"unknown policy {key or whole!r} in {whole!r}: write {syntax()}")
        elif not value:
            raise BadOption(f"policy {whole!r}: {key} needs a number ({key}:N); write {syntax()}")
        if key in parts:
            raise BadOption(f"policy {whole!r} names {key} twice")
        parts[key] = 0 if starts.get(key) is not None and starts[key].bare else _number(value, key, whole)
        order.append(key)
    word = order[0] if order else ""
    for cls in POLICIES.values():  # a word that may come before its policy's first (window:252+sinks:4)
        for first, before in cls.first_after.items():
            if word in before and first in parts:
                word = first
    policy = starts.get(word)
    if policy is None:
        raise BadOption(f"policy {whole!r}: start with one of {', '.join(kinds())}; write {syntax()}")
    extra = set(parts) - {word} - set(policy.forms[word])
    if extra:
        raise BadOption(f"policy {whole!r}: {word} does not take {', '.join(sorted(extra))}; write {syntax()}")
    return policy.read(word, parts, whole)


def parse_list(text: str) -> list[Policy]:
    """Policies from a comma-separated list (``"full,window:256,h2o:256"``), each once."""
    names = [p for p in (part.strip() for part in text.split(",")) if p]
    if not names:
        raise BadOption(f"no policy given: write a comma-separated list of {syntax()}")
    policies = [parse(name) for name in names]
    seen: set[Policy] = set()
    for p in policies:
        if p in seen:
            raise BadOption(f"policy {p.name!r} is listed twice")
        seen.add(p)
    return policies

