"""The KV lab's budget sweeps as tables people read: which policy a kind and a budget name, a sweep's perplexity and
bytes, what one head kept at every step (binned to a picture's size), and each head cut alone, most hurt first.

Pure functions of the runs :mod:`probes.kv.stream` returns (no model, no Streamlit): the app's page "What if it
attended less?" draws them, and a report can print them.

A *budget* B is the number of keys a query reads at most, the newest included. Each kind reads it its own way (its
class's :meth:`~probes.kv.policies.Policy.at_budget`; the menu lists every registered policy with ``words``):

    window     window:B                      the last B keys
    sinks      sinks:S+window:(B − S)        the first S keys (the attention sinks) and the last B − S
    h2o        h2o:B                         the last B/2, and the B/2 older keys with the most attention so far
    tova       tova:B                        the B keys the newest query attends to most, step by step
    snapkv     snapkv:B                      the last queries' vote over the held keys
    strided    strided:B+window:B            the last B keys and every B-th before them (Sparse Transformer's
                                             fixed pattern, stride = window): it evicts nothing, so it reads a
                                             little more than B keys at the end of a long text and saves no memory
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..errors import BadOption
from .policies import MENU, POLICIES, Policy
from .stream import seen_by

KINDS = MENU  # the kinds a budget sweep offers, in the order a menu lists them: kind -> its name in words (live)
SINKS = 4  # the first tokens sinks + window keeps (StreamingLLM's choice)
BINS = 120  # a kept-token picture has at most this many rows and columns


def policy_at(kind: str, budget: int, sinks: int = SINKS) -> Policy:
    """The policy of ``kind`` (:data:`KINDS`) that reads at most ``budget`` keys (see the module's table; each
    policy's :meth:`~probes.kv.policies.Policy.at_budget`), or :class:`BadOption` saying why there is none (an
    unknown kind, a budget too small for it)."""
    if kind not in KINDS:
        raise BadOption(f"unknown policy kind {kind!r}: choose from {', '.join(KINDS)}")
    if budget < 1:
        raise BadOption(f"a budget of {budget} keys: a query reads at least 1 key (its own)")
    return POLICIES[kind].at_budget(budget, sinks)


@dataclass(frozen=True)
class Planned:
    """One run of a sweep: ``kind`` at ``budget``, as ``policy``."""

    kind: str
    budget: int
    policy: Policy


@dataclass(frozen=True)
class Plan:
    """A sweep's runs, and what was left out of it: ``covered`` the budgets that hold the whole text (full
    attention there: the full run says it), ``skipped`` one line per (kind, budget) that names no policy."""

    runs: list[Planned]
    covered: list[int]
    skipped: list[str]


def sweep_plan(kinds: Iterable[str], budgets: Iterable[int], tokens: int, sinks: int = SINKS) -> Plan:
    """The runs a sweep of ``kinds`` × ``budgets`` needs on a text of ``tokens`` tokens: a budget at or above the
    text's length is full attention for every kind (left out, in ``covered``); a budget a kind cannot take (sinks
    at or above it) is left out with its reason."""
    budgets = sorted({int(b) for b in budgets})
    covered = [b for b in budgets if b >= tokens]
    runs, skipped = [], []
    for kind in kinds:
        for budget in budgets:
            if budget in covered:
                continue
            try:
                policy = policy_at(kind, budget, sinks)
            except BadOption as exc:
                skipped.append(f"{KINDS.get(kind, kind)} at {budget}: {exc}")
                continue
            runs.append(Planned(kind, budget, policy))
    return Plan(runs, covered, skipped)


def summary(run) -> dict:
    """What a page keeps of one :class:`~probes.kv.stream.Streamed` run: plain numbers and small arrays (``evicted_at``
    ``[layers, H_kv, T]`` int32, ``losses`` ``[T − 1]``), no tensors."""
    return dict(policy=run.policy, tokens=int(run.tokens), perplexity=float(run.perplexity),
                loss=float(run.losses.mean()), kv_bytes=int(run.kv_bytes), full_kv_bytes=int(run.full_kv_bytes),
                seen_fraction=float(run.seen_fraction),
                evicted_at=run.evicted_at.to(torch.int32).cpu().numpy(), losses=run.losses.double().cpu().numpy())


def sweep_frame(planned: Sequence[Planned], runs: Sequence[Mapping]) -> pd.DataFrame:
    """One row per run of a sweep (``runs``: :func:`summary` of each, in ``planned``'s order): ``kind``, ``policy``
    (its name in words), ``name`` (as :func:`~probes.kv.policies.parse` reads it), ``budget``, ``perplexity``,
    ``kv_bytes`` (the most the cache held), ``full_kv_bytes``, ``saved`` (the share of the full cache's bytes not
    held) and ``seen_fraction`` (the share of past keys a query read, averaged over steps, heads and layers)."""
    if len(planned) != len(runs):
        raise ValueError(f"{len(runs)} runs for {len(planned)} planned")
    rows = [dict(kind=p.kind, policy=p.policy.words, name=p.policy.name, budget=p.budget,
                 perplexity=r["perplexity"], kv_bytes=r["kv_bytes"], full_kv_bytes=r["full_kv_bytes"],
                 saved=1 - r["kv_bytes"] / r["full_kv_bytes"], seen_fraction=r["seen_fraction"])
            for p, r in zip(planned, runs, strict=True)]
    columns = ["kind", "policy", "name", "budget", "perplexity", "kv_bytes", "full_kv_bytes", "saved",
               "seen_fraction"]
    return pd.DataFrame(rows, columns=columns)


def memory_frame(sweep: pd.DataFrame) -> pd.DataFrame:
    """The memory a sweep's budgets hold (a :func:`sweep_frame`), one row per budget and footprint: the policies that
    hold the same bytes and read the same share of keys (every kind that evicts holds B keys a head at a budget B)
    named together, in the sweep's order. Columns: ``budget``, ``policies``, ``kv_bytes``, ``full_kv_bytes``,
    ``saved``, ``seen_fraction``."""
    keys = ["budget", "kv_bytes", "full_kv_bytes", "saved", "seen_fraction"]
    if sweep.empty:
        return pd.DataFrame(columns=["budget", "policies", *keys[1:]])
    rounded = sweep.assign(seen_fraction=sweep["seen_fraction"].round(12), saved=sweep["saved"].round(12))
    groups = rounded.groupby(keys, sort=False)["policy"].agg(lambda names: ", ".join(dict.fromkeys(names)))
    out = groups.reset_index().rename(columns={"policy": "policies"})
    return out[["budget", "policies", *keys[1:]]].sort_values(["budget", "kv_bytes"], kind="stable").reset_index(
        drop=True)


def kv_head(head: int, n_heads: int, kv_heads: int) -> int:
    """The key/value head query head ``head`` reads (grouped-query attention: ``n_heads / kv_heads`` query heads
    share one)."""
    if n_heads % kv_heads:
        raise ValueError(f"{n_heads} query heads do not split into {kv_heads} key/value heads")
    return head // (n_heads // kv_heads)


def kept_picture(policy: Policy, evicted_at: np.ndarray | torch.Tensor, bins: int = BINS) -> pd.DataFrame:
    """What one key/value head read at every step, as a picture of at most ``bins`` × ``bins`` cells: the steps
    (queries) and the keys in bins of ``ceil(T / bins)`` positions, each cell the share of its (step, key) pairs
    that the head read, among those a causal model could (the key not after the step). Cells wholly in the future
    are left out. Columns: ``step``, ``step_end``, ``key``, ``key_end`` (each bin's first position and one past its
    last), ``kept`` (0 to 1), ``pairs`` (the pairs counted). One token a bin when the text has ``bins`` tokens or
    fewer: ``kept`` is then 1 (read) or 0 (evicted, or skipped by ``strided``)."""
    seen = seen_by(policy, torch.as_tensor(np.asarray(evicted_at)).long()).numpy()
    n = seen.shape[0]
    size = max(1, math.ceil(n / bins))
    starts = np.arange(0, n, size)
    ends = np.minimum(starts + size, n)
    causal = np.tril(np.ones((n, n), dtype=np.int64))
    # sums over each bin of rows, then of columns (np.add.reduceat at the bins' first positions)
    read = np.add.reduceat(np.add.reduceat(seen.astype(np.int64), starts, axis=0), starts, axis=1)
    could = np.add.reduceat(np.add.reduceat(causal, starts, axis=0), starts, axis=1)
    s, k = np.nonzero(could)
    return pd.DataFrame({"step": starts[s], "step_end": ends[s], "key": starts[k], "key_end": ends[k],
                         "kept": read[s, k] / could[s, k], "pairs": could[s, k]})


def heads_frame(rows: Sequence[Mapping]) -> pd.DataFrame:
    """Each key/value head cut alone (the rows of :func:`~probes.kv.stream.head_effects`, one policy's), most hurt
    first: ``policy``, ``layer``, ``kv_head``, ``query_heads`` (as "0–2"), ``head`` (its first query head: where
    Explore opens it), ``loss_change`` (nats), ``mass`` (the share of its query heads' attention on the keys it
    kept) and ``seen_fraction``."""
    out = pd.DataFrame([dict(policy=r["policy"], layer=int(r["layer"]), kv_head=int(r["kv_head"]),
                             query_heads=_span(r["query_heads"]), head=int(min(r["query_heads"])),
                             loss_change=float(r["loss_change"]), mass=float(r["mass"]),
                             seen_fraction=float(r["seen_fraction"])) for r in rows],
                       columns=["policy", "layer", "kv_head", "query_heads", "head", "loss_change", "mass",
                                "seen_fraction"])
    return out.sort_values(["loss_change", "layer", "kv_head"], ascending=[False, True, True],
                           kind="stable").reset_index(drop=True)


def _span(heads: Sequence[int]) -> str:
    heads = sorted(int(h) for h in heads)
    return str(heads[0]) if len(heads) == 1 else f"{heads[0]}–{heads[-1]}"
