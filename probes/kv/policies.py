"""What a head keeps: the KV-cache policies and static sparse patterns, by name, and the rule each one follows.

A decoder's layer keeps each past token's key and value in its cache (``probes.scratch.generate``); attending less
means a query sees only some of them. Every policy here says, per key/value head, which keys the query at step t
sees. ``budget`` B is that number of keys, the newest token included; once a head's cache holds B keys, the policy
evicts one after each step so the next token fits. An evicted key never comes back.

    full                 every past key (the cache grows with the text)
    window:W             the last W keys (a sliding window; Mistral's rule)
    sinks:S+window:W     the first S keys and the last W (StreamingLLM, Xiao et al. 2024: the first tokens are
                         attention sinks; the same pattern as Longformer's and BigBird's local + global attention,
                         with the first S tokens global); ``streaming:B`` is sinks:4+window:B−4
    h2o:B                heavy hitters and recent tokens (H2O, Zhang et al. 2023): the last R = B/2 keys always,
                         and of the older ones those with the most attention received so far (summed over the steps
                         since each arrived, and over the query heads reading the key/value head); ``+recent:R``
    tova:B               token omission via attention (TOVA, Oren et al. 2024): evict the key with the least
                         attention from the newest query, averaged over the query heads that read the key/value
                         head (each head chooses for itself: a head cut alone keeps what it keeps among the others;
                         the paper and kvpress average over the whole layer, :func:`probes.kv.compress` does that);
                         the newest key is kept
    snapkv:B             SnapKV (Li et al. 2024): the last w queries (``+observe:w``, default min(32, B/2)) vote:
                         their attention over the cached keys, recomputed over what the cache holds now, averaged,
                         smoothed along positions by a mean over 5 neighbours and averaged over the query heads of
                         the key/value head; the w newest keys are kept, the lowest-voted older one is evicted.
                         (SnapKV compresses a prompt once; streamed, the vote runs at every step once the cache is
                         full. :func:`probes.kv.compress` is the prompt-once form that kvpress implements.)
    strided:C+window:W   Sparse Transformer's strided pattern (Child et al. 2019): the last W keys and every C-th
                         key before them (t − s divisible by C). A static mask, not an eviction: every key is seen
                         again C steps later, so the cache keeps them all and only the work shrinks.

Positions stay the text's own (a key keeps the rotation of the position it had): StreamingLLM's re-numbering of the
positions inside the cache is not done here, and a text must fit the model's context window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadOption

KINDS = ("full", "window", "sinks", "streaming", "h2o", "tova", "snapkv", "strided")
EVICTING = ("window", "sinks", "h2o", "tova", "snapkv")  # a cache bounded by the budget
SCORED = ("h2o", "tova", "snapkv")  # what they keep depends on attention scores
POOL = 5  # SnapKV's smoothing: a mean over this many neighbouring positions
STREAMING_SINKS = 4  # streaming:B keeps the first 4 tokens (StreamingLLM's choice)
SYNTAX = ("full, window:W, sinks:S+window:W, streaming:B, h2o:B[+recent:R], tova:B, snapkv:B[+observe:W], "
          "strided:C+window:W")


@dataclass(frozen=True)
class Policy:
    """One policy: ``kind`` (:data:`KINDS`) and its numbers. ``budget``: the keys a query sees (None: every past
    key, ``full`` and ``strided``); ``sinks``: first tokens always kept; ``recent``: newest tokens always kept (the
    window of ``window``/``sinks``, H2O's recent part, SnapKV's observation window, ``strided``'s local part);
    ``stride``: ``strided``'s C."""

    kind: str
    budget: int | None = None
    sinks: int = 0
    recent: int = 0
    stride: int = 0

    @property
    def name(self) -> str:
        """The policy as one writes it (what :func:`parse` reads back)."""
        if self.kind == "full":
            return "full"
        if self.kind == "window":
            return f"window:{self.recent}"
        if self.kind == "sinks":
            return f"sinks:{self.sinks}+window:{self.recent}"
        if self.kind == "h2o":
            return f"h2o:{self.budget}" + ("" if self.recent == default_recent(self) else f"+recent:{self.recent}")
        if self.kind == "snapkv":
            return f"snapkv:{self.budget}" + ("" if self.recent == default_recent(self) else f"+observe:{self.recent}")
        if self.kind == "tova":
            return f"tova:{self.budget}"
        return f"strided:{self.stride}+window:{self.recent}"

    @property
    def evicts(self) -> bool:
        """Whether the cache is bounded by the budget (else it keeps every key: full, strided)."""
        return self.kind in EVICTING

    @property
    def scored(self) -> bool:
        """Whether what it keeps depends on attention weights (H2O, TOVA, SnapKV)."""
        return self.kind in SCORED

    def covers(self, tokens: int) -> bool:
        """Whether a text of ``tokens`` tokens fits the budget, so nothing is ever cut (the policy is full attention
        there: the proof holds it to the full cached pass bit for bit)."""
        if self.kind == "full":
            return True
        if self.kind == "strided":
            return self.recent >= tokens or self.stride == 1
        assert self.budget is not None
        return self.budget >= tokens


def default_recent(policy: Policy) -> int:
    """H2O's recent part (half the budget, as in the paper's equal split) and SnapKV's observation window
    (min(32, B/2))."""
    assert policy.budget is not None
    if policy.kind == "h2o":
        return policy.budget // 2
    return min(32, policy.budget // 2)


def _number(text: str, what: str, whole: str) -> int:
    if not re.fullmatch(r"\d{1,9}", text):
        raise BadOption(f"policy {whole!r}: {what} must be a whole number (got {text!r}); write {SYNTAX}")
    return int(text)


def parse(text: str) -> Policy:
    """A :class:`Policy` from its name (``"sinks:4+window:252"``), or :class:`BadOption` saying what is wrong in one
    line: an unknown kind, a window below 1, sinks at or above the budget, a recent part at or above it."""
    whole = text.strip()
    parts: dict[str, int] = {}
    order: list[str] = []
    for part in whole.lower().split("+"):
        key, _, value = part.strip().partition(":")
        if key == "full" and not value:
            parts[key] = 0
            order.append(key)
            continue
        if key not in (*KINDS, "recent", "observe"):
            raise BadOption(f"unknown policy {key or whole!r} in {whole!r}: write {SYNTAX}")
        if not value:
            raise BadOption(f"policy {whole!r}: {key} needs a number ({key}:N); write {SYNTAX}")
        if key in parts:
            raise BadOption(f"policy {whole!r} names {key} twice")
        parts[key] = _number(value, key, whole)
        order.append(key)
    main = order[0] if order else ""
    if main in ("window",) and "sinks" in parts:
        main = "sinks"
    allowed = {"full": set(), "window": set(), "sinks": {"window"}, "streaming": {"sinks"}, "h2o": {"recent"},
               "tova": set(), "snapkv": {"observe"}, "strided": {"window"}}
    if main not in allowed:
        raise BadOption(f"policy {whole!r}: start with one of {', '.join(KINDS)}; write {SYNTAX}")
    extra = set(parts) - {main} - allowed[main]
    if extra:
        raise BadOption(f"policy {whole!r}: {main} does not take {', '.join(sorted(extra))}; write {SYNTAX}")
    if main == "full":
        return Policy("full")
    if main == "window":
        return Policy("window", budget=_at_least(parts["window"], 1, "the window", whole), recent=parts["window"])
    if main == "sinks":
        if "window" not in parts:
            raise BadOption(f"policy {whole!r}: sinks need a window after them (sinks:4+window:252), or write "
                            "streaming:256")
        window = _at_least(parts["window"], 1, "the window", whole)
        sinks = _at_least(parts["sinks"], 1, "the sinks", whole)
        return Policy("sinks", budget=sinks + window, sinks=sinks, recent=window)
    if main == "streaming":
        budget = _at_least(parts["streaming"], 2, "the budget", whole)
        sinks = parts.get("sinks", STREAMING_SINKS)
        if sinks >= budget:
            raise BadOption(f"policy {whole!r}: {sinks} sinks leave no room for a window in a budget of {budget}: "
                            "give fewer sinks than the budget")
        return Policy("sinks", budget=budget, sinks=_at_least(sinks, 1, "the sinks", whole), recent=budget - sinks)
    if main == "strided":
        if "window" not in parts:
            raise BadOption(f"policy {whole!r}: strided needs its local window (strided:64+window:64)")
        return Policy("strided", stride=_at_least(parts["strided"], 1, "the stride", whole),
                      recent=_at_least(parts["window"], 1, "the window", whole))
    budget = _at_least(parts[main], 2 if main != "tova" else 1, "the budget", whole)
    policy = Policy(main, budget=budget)
    extra_key = {"h2o": "recent", "snapkv": "observe"}.get(main)
    recent = parts.get(extra_key, default_recent(policy)) if extra_key else 0
    if extra_key:
        recent = _at_least(recent, 1, f"the {extra_key} part", whole)
        if recent >= budget:
            raise BadOption(f"policy {whole!r}: {extra_key}:{recent} must be below the budget {budget}, which "
                            "keeps room for the tokens it chooses")
    return Policy(main, budget=budget, recent=recent)


def _at_least(value: int, minimum: int, what: str, whole: str) -> int:
    if value < minimum:
        raise BadOption(f"policy {whole!r}: {what} must be at least {minimum} (got {value})")
    return value


def parse_list(text: str) -> list[Policy]:
    """Policies from a comma-separated list (``"full,window:256,h2o:256"``), each once."""
    names = [p for p in (part.strip() for part in text.split(",")) if p]
    if not names:
        raise BadOption(f"no policy given: write a comma-separated list of {SYNTAX}")
    policies = [parse(name) for name in names]
    seen: set[Policy] = set()
    for p in policies:
        if p in seen:
            raise BadOption(f"policy {p.name!r} is listed twice")
        seen.add(p)
    return policies
