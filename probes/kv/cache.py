"""A KV cache that forgets: each layer's slots, the position each key/value head holds in each slot, and the
policies (:mod:`probes.kv.policies`) that choose what to evict, one step at a time.

One step of a layer (:meth:`Slots.place`, then the attention, then :meth:`Slots.after`):

    place      the newest token's key and value go into a free slot of each key/value head
    attend     the newest query reads the keys its head holds (:meth:`Slots.allowed`), nothing else
    evict      a head whose cache holds its budget frees one slot, chosen by its policy, so the next token fits

Heads of one layer may follow different policies (:class:`Keeper`: one policy over some heads). An evicted key
never comes back; :attr:`Slots.evicted_at` records, per head and position, the first step that no longer sees it.

``ring=False`` (the shadow mode of :func:`probes.kv.stream.stream`): slot = position, the storage is the full cache's,
and the slots only say which positions the policy would still hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .policies import FAR, Policy, Step

__all__ = ["FAR", "Keeper", "Slots"]


class Keeper:
    """One policy over ``heads`` (key/value head indices) of one layer, each read by ``group`` query heads: the
    slots' bookkeeping; which keys a query reads and which one leaves are the policy's (:mod:`probes.kv.policies`)."""

    def __init__(self, policy: Policy, heads: Sequence[int], group: int, capacity: int, scale: float,
                 dtype: torch.dtype, device: torch.device | str):
        self.policy = policy
        self.heads = torch.tensor(list(heads), dtype=torch.long, device=device)
        self.query_heads = (self.heads[:, None] * group + torch.arange(group, device=device)).reshape(-1)
        self.group = group
        self.scale = scale
        self.state = policy.start(len(heads), capacity, dtype, device)  # what its rule keeps between steps
        self.count = 0  # keys each of its heads holds: one arrives every step, one leaves each full head (all at once)
        self.every = False  # whether it keeps every head of its layer (then no head is picked out)

    def placed(self, slots: torch.Tensor) -> None:
        """The newest token went into ``slots`` ``[h]`` of this keeper's heads."""
        self.count += 1
        self.policy.placed(self.state, slots)

    def visible(self, t: int, positions: torch.Tensor) -> torch.Tensor:
        """Which held keys the query at step ``t`` reads ``[h, cap]``: every held one, or the policy's pattern."""
        held = positions >= 0
        pattern = self.policy.reads(t, positions)
        return held if pattern is None else held & pattern

    def choose(self, t: int, positions: torch.Tensor, probs: torch.Tensor, q: torch.Tensor,
               keys: torch.Tensor) -> torch.Tensor | None:
        """After step ``t``: the slot each head frees ``[h]``, or None while its heads are not full.
        ``positions`` ``[h, cap]`` (−1: empty), ``probs`` ``[h·g, cap]``: the newest query's attention over the slots
        (0 where it did not look), ``q`` ``[h·g, d]`` that query, ``keys`` ``[h, cap, d]`` the slots' keys."""
        p = self.policy
        step = Step(t, positions, probs, q, keys, self.group, self.scale, self.count)
        p.observe(self.state, step)  # every step's attention, full or not
        if not p.evicts or self.count < (p.budget or 0):  # its heads fill up together, and empty together
            return None
        self.count -= 1
        return p.victim(self.state, step)


class Slots:
    """One layer's slots: ``positions`` ``[H_kv, capacity]`` (the position each head holds in each slot, −1: empty)
    and the keepers of its heads. ``plan``: the policy of each key/value head."""

    def __init__(self, plan: Sequence[Policy], capacity: int, group: int, scale: float, tokens: int,
                 dtype: torch.dtype, device: torch.device | str, ring: bool = True):
        self.positions = torch.full((len(plan), capacity), -1, dtype=torch.long, device=device)
        self.ring = ring
        self.capacity = capacity
        by_policy: dict[Policy, list[int]] = {}
        for head, policy in enumerate(plan):
            by_policy.setdefault(policy, []).append(head)
        self.keepers = [Keeper(p, heads, group, capacity, scale, dtype, device) for p, heads in by_policy.items()]
        if len(self.keepers) == 1:
            self.keepers[0].every = True
        self.group = group
        self.every_head = torch.arange(len(plan), device=device)
        self.evicted_at = torch.full((len(plan), tokens), tokens, dtype=torch.int32, device=device)

    @staticmethod
    def _of(x: torch.Tensor, keeper: Keeper, query: bool = False) -> torch.Tensor:
        """A keeper's rows of ``x`` (by key/value head, or by query head): all of it, not a copy, when it keeps
        every head."""
        if keeper.every:
            return x
        return x[keeper.query_heads if query else keeper.heads]

    def place(self, t: int) -> torch.Tensor:
        """Put position ``t`` in a free slot of every head (slot t without a ring); returns the slots ``[H_kv]``."""
        if self.ring:
            if any(k.count >= self.capacity for k in self.keepers):
                raise RuntimeError(f"a head's cache has no free slot at step {t}")
            slots = (self.positions < 0).int().argmax(-1)  # the first free slot of each head
        else:
            slots = torch.full((self.positions.shape[0],), t, dtype=torch.long, device=self.positions.device)
        self.positions[self.every_head, slots] = t
        for keeper in self.keepers:
            keeper.placed(self._of(slots, keeper))
        return slots

    def allowed(self, t: int) -> torch.Tensor:
        """The slots the query at step ``t`` reads, by query head ``[H, capacity]``."""
        if len(self.keepers) == 1:
            out = self.keepers[0].visible(t, self.positions)
        else:
            out = torch.zeros_like(self.positions, dtype=torch.bool)
            for keeper in self.keepers:
                out[keeper.heads] = keeper.visible(t, self.positions[keeper.heads])
        return out.repeat_interleave(self.group, dim=0)

    def after(self, t: int, probs: torch.Tensor, q: torch.Tensor, keys: torch.Tensor) -> None:
        """Each keeper sees step ``t``'s attention (``probs`` ``[H, capacity]``, query ``q`` ``[H, d]``, ``keys``
        ``[H_kv, capacity, d]``) and frees the slots its policy evicts."""
        for keeper in self.keepers:
            victims = keeper.choose(t, self._of(self.positions, keeper), self._of(probs, keeper, True),
                                    self._of(q, keeper, True), self._of(keys, keeper))
            if victims is None:
                continue
            gone = self.positions[keeper.heads, victims]
            self.evicted_at[keeper.heads, gone] = t + 1  # step t + 1 is the first that does not see it
            self.positions[keeper.heads, victims] = -1

    def held(self) -> int:
        """Keys held now, over every head."""
        return sum(k.count * len(k.heads) for k in self.keepers)
