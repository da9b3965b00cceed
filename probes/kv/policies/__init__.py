"""What a head keeps: the KV-cache policies and static sparse patterns, one class each, found by name in one registry
(:data:`POLICIES`), and the reading of a policy's written form (:func:`parse`).

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

Adding a policy is one class: a subclass of :class:`Policy` marked ``@register`` (:mod:`.base` says what it owns;
:mod:`.builtin` holds the ones above). The parser, the help, the cache, the streamed and masked runs, the sweep's
menu and the CLI find it in :data:`POLICIES`.
"""

from __future__ import annotations

from .base import FAR, MENU, POLICIES, Menu, Policy, Step, at_least, kinds, parse, parse_list, register, rows_at, syntax
from .builtin import H2O, POOL, STREAMING_SINKS, Full, Sinks, SnapKV, Split, Strided, Tova, Window

__all__ = ["FAR", "H2O", "MENU", "POLICIES", "POOL", "STREAMING_SINKS", "Full", "Menu", "Policy", "Sinks", "SnapKV",
           "Split", "Step", "Strided", "Tova", "Window", "at_least", "default_recent", "kinds", "parse",
           "parse_list", "register", "rows_at", "syntax"]


def default_recent(policy: Policy) -> int:
    """H2O's recent part (half the budget, as in the paper's equal split) and SnapKV's observation window
    (min(32, B/2))."""
    assert isinstance(policy, Split) and policy.budget is not None
    return policy.default_recent(policy.budget)


_LIVE = {  # the registry's lists under the names they had as constants, read at each use
    "KINDS": kinds,  # the words a policy starts with
    "SYNTAX": syntax,  # the written forms, for the help
    "EVICTING": lambda: tuple(kind for kind, cls in POLICIES.items() if cls.evicts),
    "SCORED": lambda: tuple(kind for kind, cls in POLICIES.items() if cls.scored),
}


def __getattr__(name: str):
    """``KINDS``, ``SYNTAX``, ``EVICTING``, ``SCORED``: the registry's, as it is now (a policy registered later is in
    them)."""
    if name in _LIVE:
        return _LIVE[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
