"""The policies the KV lab ships, one class each (the table in :mod:`probes.kv.policies` says what each keeps)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ...errors import BadOption
from .base import FAR, Policy, Step, at_least, oldest_past, register, rows_at

POOL = 5  # SnapKV's smoothing: a mean over this many neighbouring positions
STREAMING_SINKS = 4  # streaming:B keeps the first 4 tokens (StreamingLLM's choice)


@register
class Full(Policy):
    """Every past key: the cache grows with the text."""

    kind = "full"
    forms = {"full": ()}
    bare = True
    syntax = ("full",)
    evicts = False
    cuts = False

    @classmethod
    def read(cls, word: str, parts: dict[str, int], whole: str) -> Policy:
        return cls()

    @property
    def name(self) -> str:
        return "full"

    def covers(self, tokens: int) -> bool:
        return True


@register
class Window(Policy):
    """The last W keys (``budget`` = ``recent`` = W): a sliding window, Mistral's rule. Evicts the oldest key."""

    kind = "window"
    forms = {"window": ()}
    syntax: ClassVar[tuple[str, ...]] = ("window:W",)  # (Sinks, a window with sinks, writes two)
    words = "window"

    @classmethod
    def read(cls, word: str, parts: dict[str, int], whole: str) -> Policy:
        window = at_least(parts["window"], 1, "the window", whole)
        return cls(budget=window, recent=window)

    @property
    def name(self) -> str:
        return f"window:{self.recent}"

    def victim(self, state: Any, step: Step) -> torch.Tensor:
        return oldest_past(step, self.sinks)

    def evictions(self, n: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
        """The window's keys leave W steps after they came, the sinks never."""
        steps = torch.arange(n, device=device)
        leave = (steps + self.recent).clamp(max=n)
        return torch.where(steps < self.sinks, n, leave).to(torch.int32)


@register
class Sinks(Window):
    """The first S keys and the last W (StreamingLLM, Xiao et al. 2024: the first tokens are attention sinks).
    ``streaming:B`` is ``sinks:4+window:B−4``; ``window:W+sinks:S`` reads as ``sinks:S+window:W``. Evicts the oldest
    key past the sinks."""

    kind = "sinks"
    forms = {"sinks": ("window",), "streaming": ("sinks",)}
    first_after = {"sinks": ("window",)}
    syntax = ("sinks:S+window:W", "streaming:B")
    words = "sinks + window"

    @classmethod
    def read(cls, word: str, parts: dict[str, int], whole: str) -> Policy:
        if word == "streaming":
            budget = at_least(parts["streaming"], 2, "the budget", whole)
            sinks = parts.get("sinks", STREAMING_SINKS)
            if sinks >= budget:
                raise BadOption(f"policy {whole!r}: {sinks} sinks leave no room for a window in a budget of "
                                f"{budget}: give fewer sinks than the budget")
            return cls(budget=budget, sinks=at_least(sinks, 1, "the sinks", whole), recent=budget - sinks)
        if "window" not in parts:
            raise BadOption(f"policy {whole!r}: sinks need a window after them (sinks:4+window:252), or write "
                            "streaming:256")
        window = at_least(parts["window"], 1, "the window", whole)
        sinks = at_least(parts["sinks"], 1, "the sinks", whole)
        return cls(budget=sinks + window, sinks=sinks, recent=window)

    @classmethod
    def at_budget(cls, budget: int, sinks: int) -> Policy:
        """``sinks`` sinks and a window of the rest."""
        if budget <= sinks:
            raise BadOption(f"a budget of {budget} keys leaves no room for a window after {sinks} sinks")
        window = budget - sinks
        return cls.read("sinks", {"sinks": sinks, "window": window}, f"sinks:{sinks}+window:{window}")

    @property
    def name(self) -> str:
        return f"sinks:{self.sinks}+window:{self.recent}"


class Split(Policy):
    """A budget B split between the newest keys, always kept (``recent``: its ``part`` word, by default
    :meth:`default_recent`), and older ones its rule chooses by score."""

    part: ClassVar[str] = ""
    scored = True

    @staticmethod
    def default_recent(budget: int) -> int:
        raise NotImplementedError

    @classmethod
    def read(cls, word: str, parts: dict[str, int], whole: str) -> Policy:
        budget = at_least(parts[word], 2, "the budget", whole)
        recent = at_least(parts.get(cls.part, cls.default_recent(budget)), 1, f"the {cls.part} part", whole)
        if recent >= budget:
            raise BadOption(f"policy {whole!r}: {cls.part}:{recent} must be below the budget {budget}, which keeps "
                            "room for the tokens it chooses")
        return cls(budget=budget, recent=recent)

    @classmethod
    def at_budget(cls, budget: int, sinks: int) -> Policy:
        if budget < 2:
            raise BadOption(f"{cls.words} splits its budget between recent and chosen keys: give it 2 keys or more")
        return super().at_budget(budget, sinks)

    @property
    def name(self) -> str:
        assert self.budget is not None
        same = self.recent == self.default_recent(self.budget)
        return f"{self.kind}:{self.budget}" + ("" if same else f"+{self.part}:{self.recent}")


@register
class H2O(Split):
    """Heavy hitters and recent tokens (H2O, Zhang et al. 2023): the last R = B/2 keys always, and of the older ones
    those with the most attention received so far (summed over the steps since each arrived, and over the query
    heads reading the key/value head). Its state: the attention each slot received."""

    kind = "h2o"
    forms = {"h2o": ("recent",)}
    syntax = ("h2o:B[+recent:R]",)
    words = "H2O"
    part = "recent"

    @staticmethod
    def default_recent(budget: int) -> int:
        return budget // 2  # the paper's equal split

    def start(self, heads: int, capacity: int, dtype: torch.dtype, device: torch.device | str) -> Any:
        return torch.zeros(heads, capacity, dtype=dtype, device=device)  # attention received so far

    def placed(self, state: Any, slots: torch.Tensor) -> None:
        state[torch.arange(len(slots)), slots] = 0  # a fresh slot has received nothing

    def observe(self, state: Any, step: Step) -> None:
        state += step.probs.view(len(state), step.group, -1).sum(1)  # every step accumulates, full or not

    def victim(self, state: Any, step: Step) -> torch.Tensor:
        """The least attention received, of the keys older than the recent part."""
        older = (step.positions >= 0) & (step.positions <= step.t - self.recent)
        return state.masked_fill(~older, float("inf")).argmin(-1)


@register
class Tova(Policy):
    """Token omission via attention (TOVA, Oren et al. 2024): evict the key with the least attention from the newest
    query, averaged over the query heads that read the key/value head (each head chooses for itself: a head cut alone
    keeps what it keeps among the others; the paper and kvpress average over the whole layer,
    :func:`probes.kv.compress.compress` does that); the newest key is kept."""

    kind = "tova"
    forms = {"tova": ()}
    syntax = ("tova:B",)
    words = "TOVA"
    scored = True

    @classmethod
    def read(cls, word: str, parts: dict[str, int], whole: str) -> Policy:
        return cls(budget=at_least(parts["tova"], 1, "the budget", whole))

    def victim(self, state: Any, step: Step) -> torch.Tensor:
        score = step.probs.view(step.positions.shape[0], step.group, -1).mean(1)
        older = (step.positions >= 0) & (step.positions < step.t)
        return score.masked_fill(~older, float("inf")).argmin(-1)


@register
class SnapKV(Split):
    """SnapKV (Li et al. 2024): the last w queries (``+observe:w``, default min(32, B/2)) vote: their attention over
    the cached keys, recomputed over what the cache holds now, averaged, smoothed along positions by a mean over
    :data:`POOL` neighbours and averaged over the query heads of the key/value head; the w newest keys are kept, the
    lowest-voted older one is evicted. (SnapKV compresses a prompt once; streamed, the vote runs at every step once
    the cache is full. :func:`probes.kv.compress.compress` is the prompt-once form that kvpress implements.) Its
    state: the last w queries."""

    kind = "snapkv"
    forms = {"snapkv": ("observe",)}
    syntax = ("snapkv:B[+observe:W]",)
    words = "SnapKV"
    part = "observe"
    reads_keys = True

    @staticmethod
    def default_recent(budget: int) -> int:
        return min(32, budget // 2)

    def start(self, heads: int, capacity: int, dtype: torch.dtype, device: torch.device | str) -> Any:
        return _Recent(self.recent)

    def observe(self, state: Any, step: Step) -> None:
        state.add(step.t, step.q)

    def victim(self, state: Any, step: Step) -> torch.Tensor:
        """The vote: the last queries' attention over the held keys (each query reads the held keys up to its own
        position), averaged over the queries and the group's query heads, smoothed by a mean over :data:`POOL`
        neighbours along the older keys in position order; the lowest such key is evicted."""
        positions, keys = step.positions, step.keys
        n_heads, n_held = positions.shape[0], step.n_held  # every head holds as many keys (one leaves after this)
        held = positions >= 0
        order = torch.where(held, positions, torch.full_like(positions, FAR)).argsort(-1)[:, :n_held]  # by position
        where = positions.gather(-1, order)  # [h, n]: the held positions, in order
        k = rows_at(keys, order)  # [h, n, d]
        at, qs = state.at, state.queries  # [w], [h·g, w, d]
        w = len(at)
        # one product a key/value head, its group's queries stacked ([h, g·w, d] @ [h, d, n]): k is read as it is,
        # not broadcast over the group (which copied it g times a step)
        scores = torch.bmm(qs.view(n_heads, step.group * w, -1), k.transpose(1, 2)) * step.scale
        scores = scores.view(n_heads, step.group, w, -1)  # [h, g, w, n]
        scores = scores.masked_fill(where[:, None, None, :] > at[None, None, :, None], float("-inf"))
        vote = torch.softmax(scores, dim=-1).mean(2).mean(1)  # [h, n]: over the queries, then the group
        n_older = n_held - self.recent  # the older keys come first (the recent ones are all held)
        pooled = F.avg_pool1d(vote[:, None, :n_older], kernel_size=POOL, stride=1, padding=POOL // 2)[:, 0]
        return order.gather(-1, pooled.argmin(-1, keepdim=True))[:, 0]


class _Recent:
    """SnapKV's state: the last ``size`` queries in the order they came, ``queries`` ``[h·g, w, d]``, and their
    positions, ``at`` ``[w]`` (w ≤ size), each kept as one tensor (a step appends to it, dropping the oldest once
    full), so a vote reads them without stacking them again."""

    def __init__(self, size: int):
        self.size = size
        self.at = torch.empty(0, dtype=torch.long)
        self.queries: torch.Tensor | None = None

    def add(self, t: int, q: torch.Tensor) -> None:
        if self.queries is None:
            self.at = self.at.to(q.device)
            self.queries = q[:, None].clone()  # (the caller's q may be a view of its own storage)
        else:
            keep = self.size - 1  # the newest size − 1, then this one
            self.queries = torch.cat([self.queries[:, -keep:] if keep else self.queries[:, :0], q[:, None]], dim=1)
        tail = self.at[-(self.size - 1):] if self.size > 1 else self.at[:0]
        self.at = torch.cat([tail, torch.tensor([t], dtype=torch.long, device=self.at.device)])

    def __len__(self) -> int:
        return len(self.at)


@register
class Strided(Policy):
    """Sparse Transformer's strided pattern (Child et al. 2019): the last W keys and every C-th key before them
    (t − s divisible by C). A static mask, not an eviction: every key is seen again C steps later, so the cache keeps
    them all and only the work shrinks. At a sweep's budget B: ``strided:B+window:B``."""

    kind = "strided"
    forms = {"strided": ("window",)}
    syntax = ("strided:C+window:W",)
    words = "strided"
    evicts = False

    @classmethod
    def read(cls, word: str, parts: dict[str, int], whole: str) -> Policy:
        if "window" not in parts:
            raise BadOption(f"policy {whole!r}: strided needs its local window (strided:64+window:64)")
        return cls(stride=at_least(parts["strided"], 1, "the stride", whole),
                   recent=at_least(parts["window"], 1, "the window", whole))

    @classmethod
    def at_budget(cls, budget: int, sinks: int) -> Policy:
        return cls.read("strided", {"strided": budget, "window": budget}, f"strided:{budget}+window:{budget}")

    @property
    def name(self) -> str:
        return f"strided:{self.stride}+window:{self.recent}"

    def covers(self, tokens: int) -> bool:
        return self.recent >= tokens or self.stride == 1

    def reads(self, query: int | torch.Tensor, key: torch.Tensor) -> torch.Tensor | None:
        back = query - key
        return (back < self.recent) | (back % self.stride == 0)
