"""Each key/value head cut alone, one layer at a time: :func:`probes.kv.stream.head_effects`'s numbers without its
token-by-token shadow run, and each cut pass computing only the steps the cut can change.

Two facts make it cheaper, the same numbers (a float64 test holds them to ≤ 1e-10 against
:func:`~probes.kv.stream.head_effects`):

* the shadow (what each policy would keep of every head while the model reads the full cache) needs only each
  layer's full-cache q and k: the policy is replayed over them step by step as :func:`~probes.kv.stream.run_masked`
  replays it (slot = position), inside the one full pass that also gives the full loss and each layer's input;
* cutting one head of layer l changes nothing at the steps before its first eviction (a policy that reads every
  earlier key there reads what the full cache reads), at that layer or after it: the cut pass starts at layer l and
  at that step, reading the earlier steps' keys and values from the full pass, and the earlier steps' losses are the
  full pass's.

Its ``progress(done, total)`` counts layers computed, each weighted by the steps it computes, so the bar moves
evenly in time. Additive: :func:`probes.kv.stream.head_effects` is unchanged (the CLI's).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

from ..attention_math import repeat_kv
from ..scratch import Pass, eager_attention
from ..seam import reader
from .cache import Slots
from .policies import Policy, rows_at
from .stream import (
    HeadEffects,
    Watched,
    capacity_of,
    check_windows,
    decoder_network,
    next_token_losses,
    seen_by,
    token_ids,
)


def _replayed(policy: Policy, heads: int, group: int, q: torch.Tensor, k: torch.Tensor, scale: float,
              n: int) -> torch.Tensor:
    """When each key leaves each of a layer's ``heads`` key/value heads ``[H_kv, n]`` under ``policy``, replayed over
    the layer's full-cache ``q`` ``[1, H, n, d]`` and ``k`` ``[1, H_kv, n, d]`` (as :func:`run_masked` does)."""
    static = policy.evictions(n, q.device)
    if static is not None:
        return static[None].expand(heads, -1).clone()
    plan = [policy] * heads
    slots = Slots(plan, capacity_of(plan, n), group, scale, n, q.dtype, q.device)
    scores = (q[0] @ repeat_kv(k, group)[0].transpose(-2, -1)) * scale  # [H, T, T]
    for t in range(n):
        slots.place(t)
        held = slots.positions.clamp(min=0)
        sees = slots.allowed(t)
        row = scores[:, t].gather(-1, held.repeat_interleave(group, dim=0))
        row = torch.softmax(row.masked_fill(~sees, float("-inf")), dim=-1)
        keys = rows_at(k[0], held) if policy.reads_keys else k[0]
        slots.after(t, row, q[0, :, t], keys)
    return slots.evicted_at


@reader
def head_effects_layered(model, text: str, policies: Sequence[Policy], *,
                         progress: Callable[[int, int], None] | None = None) -> HeadEffects:
    """Every key/value head of every layer cut alone by each policy: :func:`probes.kv.stream.head_effects`'s rows and
    watched keys, computed layer by layer (see the module's docstring). ``progress(done, total)`` in layer-steps."""
    net = decoder_network(model)
    ids = token_ids(model, text)
    n = ids.shape[1]
    check_windows(model, net, n)
    policies = [p for p in policies if p.cuts]
    n_layers, kv_heads = model.n_layers, model.n_kv_heads
    group = model.n_heads // kv_heads
    causal = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
    evicted: dict[str, list[torch.Tensor]] = {p.name: [] for p in policies}
    mass: dict[str, list[torch.Tensor]] = {p.name: [] for p in policies}
    inputs: list[torch.Tensor] = []
    kept_kv: list[tuple[torch.Tensor, torch.Tensor]] = []
    final: list[torch.Tensor] = []
    # work counted in layer-steps (one layer over one step): the full pass's n_layers · n first, then each cut pass's
    # layers from its own times its steps from its first eviction, added once the full pass has said them
    done, total = 0, n_layers * n

    def tick(k: int) -> None:
        nonlocal done
        done += k
        if progress is not None:
            progress(done, total)

    def full_attend(i, q, k, v, spec, via: Pass):
        out, probs = eager_attention(q, k, v, causal[None, None], spec.scale)
        kept_kv.append((k, v))
        for policy in policies:
            left = _replayed(policy, k.shape[1], group, q, k, spec.scale, n)
            seen = torch.stack([seen_by(policy, left[h]) for h in range(k.shape[1])])  # [H_kv, T, T]
            share = (probs[0] * seen.repeat_interleave(group, dim=0)).sum(-1).double().mean(-1)  # [H]
            evicted[policy.name].append(left.cpu())
            mass[policy.name].append(share.cpu())
        tick(n)
        return out

    with torch.inference_mode():
        Pass(net, full_attend, then={"final": lambda x, name: final.append(x),
                                      "resid_pre": lambda x, name: inputs.append(x)})(
            ids, torch.ones_like(ids), None, logits=False)
        full = next_token_losses(net, ids, final[-1])
        full_loss = float(full.mean())
        watched = {p.name: Watched(p, torch.stack(evicted[p.name]), torch.stack(mass[p.name])) for p in policies}
        # every cut: its policy, layer, head, what the head reads, and the first step where that differs
        cuts = []
        for policy in policies:
            for layer in range(n_layers):
                for head in range(kv_heads):
                    seen = seen_by(policy, watched[policy.name].evicted_at[layer, head].to(ids.device))
                    differs = (seen != causal).any(-1).nonzero()
                    first = int(differs[0]) if len(differs) else n
                    cuts.append((policy, layer, head, seen, first))
                    total += (n_layers - layer) * (n - first)
        steps = torch.arange(1, n + 1, dtype=torch.float64)
        rows = []
        for policy, layer, head, seen, first in cuts:
            heads = torch.arange(head * group, (head + 1) * group, device=ids.device)
            if first >= n:  # the policy reads every key this head's full cache reads: nothing changes
                loss = full_loss
            else:
                loss = _cut_loss(net, ids, layer, heads, seen, first, inputs, kept_kv, full,
                                 functools.partial(tick, n - first))
            rows.append(dict(policy=policy.name, layer=layer, kv_head=head, query_heads=[int(h) for h in heads],
                             loss_change=loss - full_loss,
                             mass=float(watched[policy.name].mass[layer, heads.cpu()].mean()),
                             seen_fraction=float((seen.sum(-1).double().cpu() / steps).mean())))
    return HeadEffects(rows=rows, full_loss=full_loss, tokens=n, watched=watched)


def _cut_loss(net, ids: torch.Tensor, layer: int, heads: torch.Tensor, seen: torch.Tensor, first: int,
              inputs: list[torch.Tensor], kept_kv: list[tuple[torch.Tensor, torch.Tensor]], full: torch.Tensor,
              tick: Callable[[], None]) -> float:
    """The mean next-token loss with only ``heads`` of ``layer`` reading what ``seen`` ``[T, T]`` says: the pass from
    that layer and step ``first`` on (the earlier steps are the full pass's: their keys, values and losses)."""
    n = ids.shape[1]
    causal = torch.ones(n - first, n, dtype=torch.bool, device=ids.device).tril(first)
    final: list[torch.Tensor] = []

    def attend(i, q, k, v, spec, via: Pass):
        k_before, v_before = kept_kv[i]
        k = torch.cat([k_before[:, :, :first], k], dim=2)
        v = torch.cat([v_before[:, :, :first], v], dim=2)
        allowed = causal[None, None]
        if i == layer:
            allowed = allowed.expand(1, q.shape[1], n - first, n).clone()
            allowed[0, heads] &= seen[first:]
        tick()
        return eager_attention(q, k, v, allowed, spec.scale)[0]

    Pass(net, attend, then={"final": lambda x, name: final.append(x)})(
        ids[:, first:], torch.ones_like(ids[:, first:]), None, logits=False, start=first,
        resume=(layer, inputs[layer][:, first:]))
    later = next_token_losses(net, ids[:, first:], final[-1])  # steps first … T − 2
    return float((full[:first].sum() + later.sum()) / (n - 1))


__all__ = ["head_effects_layered"]
