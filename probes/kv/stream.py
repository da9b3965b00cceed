"""Streamed evaluation: a text read one token at a time through a cache that forgets, as StreamingLLM evaluates,
and the per-head effects of each policy.

:func:`stream` runs a decoder over the text token by token, every layer attending over its
:class:`~probes.kv.cache.Slots` and evicting as its policy says, and scores each next token: the streamed perplexity,
the bytes the cache holds, and when each key left each head (:class:`Streamed`). With ``shadow`` policies the model
runs on the full cache and each policy only *watches* every head: what it would keep from that head's own
(unchanged) attention, and how much of the head's attention mass those keys hold (:class:`Watched`).

Why the shadow is enough for one head: cutting only head h of layer l changes nothing before layer l, so the head's
queries and keys are the full run's, and so is what its policy keeps. :func:`head_effects` therefore runs, for each
head, one full pass with that head's keys masked as the shadow recorded them, resumed at its layer: the loss change
when only that head's cache is cut (the masked pass equals the streamed run with that head alone cut, a float64
test says so).
"""

from __future__ import annotations

import math
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..attention_math import repeat_kv
from ..errors import BadOption, InputTooLong, UnsupportedModel
from ..head_index import check_head
from ..scratch import DecoderNetwork, Pass, eager_attention, net_logits
from ..seam import reader
from .cache import Slots
from .policies import Full, Policy, rows_at

Plan = Sequence[Sequence[Policy]]  # the policy of each key/value head of each layer: plan[layer][head]
MIN_TOKENS = 2  # a perplexity needs one predicted token


def everywhere(policy: Policy, n_layers: int, kv_heads: int) -> list[list[Policy]]:
    """The plan that applies ``policy`` to every key/value head."""
    return [[policy] * kv_heads for _ in range(n_layers)]


def one_head(policy: Policy, layer: int, head: int, n_layers: int, kv_heads: int) -> list[list[Policy]]:
    """The plan that cuts only key/value head ``head`` of ``layer`` (every other head keeps its full cache)."""
    return only(policy, [(layer, head)], n_layers, kv_heads)


def only(policy: Policy, heads: Sequence[tuple[int, int]], n_layers: int, kv_heads: int) -> list[list[Policy]]:
    """The plan that applies ``policy`` to the key/value heads ``(layer, head)`` listed, the full cache elsewhere;
    a head the model does not have is refused by name."""
    plan = everywhere(Full(), n_layers, kv_heads)
    for layer, head in heads:
        check_head((layer, head), n_layers, kv_heads, "key/value head", "the model's key/value heads")
        plan[layer][head] = policy
    return plan


@dataclass
class Streamed:
    """One streamed run of a text under a plan. ``losses`` ``[T − 1]`` (float64): the next-token loss at each step
    (step t predicts token t + 1); ``kv_bytes``: the most the whole cache held (keys and values, every layer and
    head, while a step attended), against ``full_kv_bytes`` for every token; ``evicted_at`` ``[layers, H_kv, T]``:
    the first step that no longer sees each key (T: kept to the end; ``strided`` skips keys without evicting them)."""

    policy: str
    tokens: int
    losses: torch.Tensor
    kv_bytes: int
    full_kv_bytes: int
    seen_fraction: float  # the keys each query read, over the keys before it, averaged over steps and heads
    evicted_at: torch.Tensor
    seconds: float
    watched: dict[str, Watched] = field(default_factory=dict)  # shadow runs: what each policy would keep

    @property
    def perplexity(self) -> float:
        """exp of the mean next-token loss (inf past what a float holds)."""
        loss = float(self.losses.mean())
        return math.exp(loss) if loss < math.log(sys.float_info.max) else math.inf

    @property
    def kept_fraction(self) -> float:
        """The cache's bytes against the full cache's, at their largest (1.0: nothing saved)."""
        return self.kv_bytes / self.full_kv_bytes


@dataclass
class Watched:
    """What one policy would keep of every head while the model reads the full cache (``shadow=True``):
    ``evicted_at`` ``[layers, H_kv, T]`` as in :class:`Streamed`, and ``mass`` ``[layers, H]``: the share of each
    query head's attention (the full run's) on the keys the policy keeps, averaged over the steps."""

    policy: Policy
    evicted_at: torch.Tensor
    mass: torch.Tensor


def check_decoder(model) -> None:
    """:class:`UnsupportedModel` saying why a KV cache does not apply to ``model`` (any ``ModelLike``, a served one
    too: it reads the model's facts only), else nothing."""
    if not model.is_causal:
        raise UnsupportedModel(f"{model.name} is an encoder: it reads the whole text at once and keeps no KV cache, so "
                               "cache policies do not apply; pick a decoder such as smollm2 or gpt2")
    if not model.predicts_tokens:
        raise UnsupportedModel(f"{model.name} has no language-model head, so there is no perplexity to measure")
    if not model.scratch_supported:
        raise UnsupportedModel(f"the KV lab runs on the from-scratch path, which cannot run {model.name}: "
                               f"{model.scratch_problem}")


def decoder_network(model) -> DecoderNetwork:
    """The from-scratch decoder of a model held here (what the readers run), after :func:`check_decoder`."""
    check_decoder(model)
    net = model.network()
    if not isinstance(net, DecoderNetwork):
        raise UnsupportedModel(f"{model.name}'s from-scratch network has no KV cache; pick smollm2 or gpt2")
    if any(getattr(getattr(layer, "spec", None), "softcap", None) is not None for layer in net.layers):
        raise UnsupportedModel(f"{model.name} soft-caps its attention scores (attn_logit_softcapping), which the KV "
                               "lab's cache slots do not implement; pick smollm2 or gpt2")
    return net


def check_windows(model, net, n_tokens: int) -> None:
    """:class:`UnsupportedModel` where the network has layers with their own sliding window (Mistral, Qwen2, Phi-3,
    Gemma 2 and 3) shorter than the text: the KV lab's cache slots read every key a policy keeps, and such a layer
    reads none further back than its window, so past it the lab's numbers (its full cache first) would not be the
    model's. A text within the smallest window is read exactly (the window hides nothing there)."""
    windows = [w for layer in net.layers if (w := getattr(getattr(layer, "spec", None), "window", None)) is not None]
    if windows and n_tokens > min(windows):
        raise UnsupportedModel(f"{model.name} has sliding-window layers (a window of {min(windows)} tokens), which the "
                               f"KV lab's cache slots do not implement, and the text is {n_tokens} tokens: give a "
                               f"text of {min(windows)} tokens or fewer, or pick smollm2 or gpt2")


_last: list[tuple[weakref.ref, str, torch.Tensor]] = []  # the last text read and its ids (see token_ids)


def token_ids(model, text: str) -> torch.Tensor:
    """The text's token ids ``[1, T]`` (InputTooLong past the model's context; at least :data:`MIN_TOKENS`). The
    last text's are kept (for as long as its model lives): several policies over one text tokenize it once."""
    if _last and _last[0][0]() is model and _last[0][1] == text:
        return _last[0][2]
    try:
        ids = model.encode(text).input_ids
    except InputTooLong as exc:
        raise InputTooLong(exc.n_tokens, exc.max_tokens, model.name, "give a shorter text: the policies keep each "
                           "token's own position, so the text must fit the model's context") from None
    if ids.shape[1] < MIN_TOKENS:
        raise BadOption(f"the text is {ids.shape[1]} token long: give at least {MIN_TOKENS} tokens, so that one is "
                        "predicted")
    ids = ids.to(model.device)
    try:
        _last[:] = [(weakref.ref(model), text, ids)]
    except TypeError:  # a model that takes no weak reference is not remembered
        _last.clear()
    return ids


def capacity_of(heads: Sequence[Policy], tokens: int) -> int:
    """The slots one layer's cache needs: the largest budget where every head evicts, else every token."""
    if all(p.evicts for p in heads):
        return min(tokens, max(p.budget or tokens for p in heads))
    return tokens


def footprint(plan: Plan, evicted_at: torch.Tensor) -> tuple[int, float]:
    """What a run held and read, from when each key left each head (``evicted_at`` ``[layers, H_kv, T]``): the most
    keys the whole cache held while a step attended, and the share of the keys before each query that it read,
    averaged over steps, heads and layers (``strided`` reads its pattern of what it holds)."""
    n = evicted_at.shape[-1]
    steps = torch.arange(n)
    held = torch.zeros(n, dtype=torch.long)
    shares = []
    for heads, left in zip(plan, evicted_at, strict=True):
        # a key leaves after it came (left[k] > k), so the keys held at step t are the t + 1 that came less those
        # gone by then (left[k] ≤ t): counts from a histogram of the steps they left, without a [T, T] matrix
        gone = torch.zeros(left.shape[0], n + 1, dtype=torch.long).scatter_add_(
            1, left.long(), torch.ones_like(left, dtype=torch.long)).cumsum(-1)[:, :n]
        count = (steps + 1) - gone  # [H_kv, T]
        held += count.sum(0)  # keys held at each step
        seen = torch.stack([count[h] if p.reads(steps[:1, None], steps[None, :1]) is None  # every held key read
                            else seen_by(p, row).sum(-1) for h, (p, row) in enumerate(zip(heads, left, strict=True))])
        shares.append(float((seen.double() / (steps + 1)).mean()))
    return int(held.max()), sum(shares) / len(shares)


def run_stream(net, ids: torch.Tensor, plan: Plan, *, shadow: Sequence[Policy] = (), name: str = "",
               progress: Callable[[int, int], None] | None = None) -> Streamed:
    """Read ``ids`` ``[1, T]`` one token at a time through ``net`` (a :class:`DecoderNetwork`, in its own dtype),
    each layer's cache following ``plan``; with ``shadow`` policies, ``plan`` must be full and each of them watches
    every head (:class:`Watched`). ``progress(done, total)`` after each step."""
    if shadow and any(p.cuts for heads in plan for p in heads):
        raise ValueError("shadow policies watch a full cache: give a full plan")
    n_tokens, n_layers = ids.shape[1], len(net.layers)
    lm_head = net.lm_head
    assert lm_head is not None
    dtype, device = lm_head.dtype, ids.device
    layers: list[Slots] = []  # made at each layer's first step, once its q and k say its group
    storage: list[tuple[torch.Tensor, torch.Tensor]] = []
    watchers: list[list[Slots]] = []
    mass = [torch.zeros(n_layers, 0, dtype=torch.float64) for _ in shadow]
    final: list[torch.Tensor] = []
    losses = torch.empty(n_tokens - 1, dtype=torch.float64)
    t0 = time.perf_counter()

    def attend(i, q, k, v, spec, via: Pass):
        if len(layers) <= i:  # the first step: this layer's slots, for its group and scale
            group, heads = q.shape[1] // k.shape[1], plan[i]
            capacity = capacity_of(heads, n_tokens)
            layers.append(Slots(heads, capacity, group, spec.scale, n_tokens, dtype, device))
            storage.append((k.new_zeros(1, k.shape[1], capacity, k.shape[-1]),
                            v.new_zeros(1, v.shape[1], capacity, v.shape[-1])))
            watchers.append([Slots([p] * len(heads), n_tokens, group, spec.scale, n_tokens, dtype, device, ring=False)
                             for p in shadow])
            for j in range(len(shadow)):
                if mass[j].shape[1] == 0:
                    mass[j] = torch.zeros(n_layers, q.shape[1], dtype=torch.float64)
        slots, (keys, values) = layers[i], storage[i]
        at = slots.place(t)  # the newest key and value into a free slot of each head
        every = torch.arange(k.shape[1], device=k.device)
        keys[0, every, at] = k[0, :, 0]
        values[0, every, at] = v[0, :, 0]
        used = min(t + 1, keys.shape[2])  # slots are filled from the first: those past `used` were never written
        allowed = slots.allowed(t)  # [H, cap]: what each query head reads
        out, probs = eager_attention(q, keys[:, :, :used], values[:, :, :used], allowed[None, :, None, :used],
                                     spec.scale, via.edit_of("attn.scores", i), via.edit_of("attn.pattern", i))
        row = probs.new_zeros(probs.shape[1], keys.shape[2])
        row[:, :used] = probs[0, :, 0]  # [H, cap]: the newest query's weights
        slots.after(t, row, q[0, :, 0], keys[0])  # evict what the policy says
        if watchers[i]:  # the shadows: slot = position, the full cache's keys
            group = q.shape[1] // k.shape[1]
            scores = (q[0, :, 0, None, :] @ repeat_kv(keys, group)[0].transpose(-2, -1))[:, 0] * spec.scale  # [H, T]
            for watcher, share in zip(watchers[i], mass, strict=True):
                watcher.place(t)
                sees = watcher.allowed(t)
                shadow_row = torch.softmax(scores.masked_fill(~sees, float("-inf")), dim=-1)
                share[i] += (row * sees).sum(-1).double().cpu()  # the full run's mass on what it would keep
                watcher.after(t, shadow_row, q[0, :, 0], keys[0])
        return out

    for t in range(n_tokens):
        final.clear()
        Pass(net, attend, then={"final": lambda x, name: final.append(x)})(
            ids[:, t:t + 1], torch.ones_like(ids[:, t:t + 1]), None, logits=False, start=t)
        if t + 1 < n_tokens:
            logits = net_logits(net, final[-1][0, -1])  # as cached_pass makes them
            losses[t] = F.cross_entropy(logits.double()[None], ids[0, t + 1:t + 2]).item()
        if progress is not None:
            progress(t + 1, n_tokens)
    k0 = storage[0][0]
    bytes_per_key = 2 * k0.shape[-1] * k0.element_size()
    full_bytes = n_layers * k0.shape[1] * n_tokens * bytes_per_key
    watched = {p.name: Watched(p, torch.stack([w[j].evicted_at for w in watchers]).cpu(), mass[j] / n_tokens)
               for j, p in enumerate(shadow)}
    evicted_at = torch.stack([s.evicted_at for s in layers]).cpu()
    most_held, seen = footprint(plan, evicted_at)
    return Streamed(policy=name, tokens=n_tokens, losses=losses, kv_bytes=most_held * bytes_per_key,
                    full_kv_bytes=full_bytes, seen_fraction=seen, evicted_at=evicted_at,
                    seconds=time.perf_counter() - t0,
                    watched=watched)


def static_evictions(policy: Policy, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """When each key leaves a head under a policy that reads no scores ``[n]`` (n: kept to the end), as the policy
    says (:meth:`~probes.kv.policies.Policy.evictions`: the window's keys leave W steps after they came, the sinks
    never); n everywhere for a policy whose rule reads scores."""
    left = policy.evictions(n, device)
    return torch.full((n,), n, dtype=torch.int32, device=device) if left is None else left


ROWS = 256  # query rows a layer-at-a-time run attends at once


def run_masked(net, ids: torch.Tensor, plan: Plan, *, name: str = "",
               progress: Callable[[int, int], None] | None = None) -> Streamed:
    """The same run as :func:`run_stream`, one layer at a time instead of one token at a time: each layer's q and k
    of the whole text (which depend only on the layers below, cut as the plan says), the policy replayed over
    them step by step (:class:`~probes.kv.cache.Slots`, slot = position) to find what each head reads at each step,
    then the layer's attention at once with that mask. The same numbers (a float64 test holds them to ≤ 1e-10
    and the evictions equal), without the per-token pass: what the app runs. ``progress(done, layers)``."""
    n, n_layers = ids.shape[1], len(net.layers)
    lm_head = net.lm_head
    assert lm_head is not None
    dtype, device = lm_head.dtype, ids.device
    evicted: list[torch.Tensor] = []
    t0 = time.perf_counter()

    def attend(i, q, k, v, spec, via: Pass):
        heads = plan[i]
        group = q.shape[1] // k.shape[1]
        static = [left for left in (p.evictions(n, device) for p in heads) if left is not None]  # from positions
        if len(static) < len(heads):  # a rule reads scores: replay the policies over the layer's own attention, in a
            slots = Slots(heads, capacity_of(heads, n), group, spec.scale, n, dtype, device)  # cache its size
            scores = (q[0] @ repeat_kv(k, group)[0].transpose(-2, -1)) * spec.scale  # [H, T, T]
            votes = any(p.reads_keys for p in heads)
            for t in range(n):
                slots.place(t)
                held = slots.positions.clamp(min=0)  # [H_kv, cap]: the position in each slot
                sees = slots.allowed(t)
                row = scores[:, t].gather(-1, held.repeat_interleave(group, dim=0))  # the held keys' scores
                row = torch.softmax(row.masked_fill(~sees, float("-inf")), dim=-1)
                keys = rows_at(k[0], held) if votes else k[0]
                slots.after(t, row, q[0, :, t], keys)
            left = slots.evicted_at
        else:
            left = torch.stack(static)
        if all(p == heads[0] for p in heads) and bool((left == left[:1]).all()):  # one mask for every head (a
            seen = seen_by(heads[0], left[0])[None, None]  # policy that reads no scores): [1, 1, T, T], broadcast
        else:
            seen = torch.stack([seen_by(p, left[h]) for h, p in enumerate(heads)]).repeat_interleave(group, dim=0)[None]
        evicted.append(left.cpu())
        if progress is not None:
            progress(i + 1, n_layers)
        # the queries ROWS at a time: each row's softmax is its own, and the scores of a long text stay a few MiB
        # instead of [H, T, T] (fewer fresh pages for the allocator to fault in, layer after layer)
        return torch.cat([eager_attention(q[:, :, a:a + ROWS], k, v, seen[..., a:a + ROWS, :], spec.scale)[0]
                          for a in range(0, n, ROWS)], dim=2)

    final: list[torch.Tensor] = []
    Pass(net, attend, then={"final": lambda x, name: final.append(x)})(ids, torch.ones_like(ids), None, logits=False)
    losses = next_token_losses(net, ids, final[-1])
    k_width = net.head_out(0)[0].shape[1]  # d: the head width
    bytes_per_key = 2 * k_width * lm_head.element_size()
    kv_heads = len(plan[0])
    evicted_at = torch.stack(evicted)
    most_held, seen_fraction = footprint(plan, evicted_at)
    return Streamed(policy=name, tokens=n, losses=losses, kv_bytes=most_held * bytes_per_key,
                    full_kv_bytes=n_layers * kv_heads * n * bytes_per_key, seen_fraction=seen_fraction,
                    evicted_at=evicted_at, seconds=time.perf_counter() - t0)


METHODS = ("streamed", "masked")


@reader
def stream(model, text: str, policy: Policy, *, method: str = "streamed",
           heads: Sequence[tuple[int, int]] | None = None,
           progress: Callable[[int, int], None] | None = None) -> Streamed:
    """The text read with ``policy`` on every key/value head of every layer (or only on ``heads``, ``(layer,
    kv_head)`` pairs, the others keeping their full cache): ``streamed``, token by token through the evicting cache
    (:func:`run_stream`, as StreamingLLM evaluates; the bytes it holds are real), or ``masked``, layer by layer with
    the same masks (:func:`run_masked`: the same numbers, many times faster)."""
    if method not in METHODS:
        raise BadOption(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")
    net = decoder_network(model)
    if heads is None:
        plan, name = everywhere(policy, model.n_layers, model.n_kv_heads), policy.name
    else:
        plan = only(policy, heads, model.n_layers, model.n_kv_heads)
        name = f"{policy.name} on " + ", ".join(f"{layer}.{head}" for layer, head in heads)
    ids = token_ids(model, text)
    check_windows(model, net, ids.shape[1])
    with torch.inference_mode():
        run = run_stream if method == "streamed" else run_masked
        return run(net, ids, plan, name=name, progress=progress)


# -- each head alone: the masked full pass -------------------------------------------------------------------

def seen_by(policy: Policy, evicted_at: torch.Tensor) -> torch.Tensor:
    """Which keys each query of one key/value head read under ``policy`` ``[T, T]``, from when each key left it
    (``evicted_at`` ``[T]``): the past, not yet evicted, and the policy's pattern (``strided``'s)."""
    n = evicted_at.shape[-1]
    steps = torch.arange(n, device=evicted_at.device)
    back = steps[:, None] - steps[None, :]
    seen = (back >= 0) & (steps[:, None] < evicted_at[None, :].long())
    pattern = policy.reads(steps[:, None], steps[None, :])
    if pattern is not None:
        seen &= pattern
    return seen


def masked_pass(net, ids: torch.Tensor, masks: dict[int, tuple[torch.Tensor, torch.Tensor]],
                resume: tuple[int, torch.Tensor] | None = None,
                inputs: list[torch.Tensor] | None = None) -> torch.Tensor:
    """One full causal pass of ``ids`` ``[1, T]`` with eager attention, where ``masks[layer] = (query heads [n],
    seen [n, T, T])`` hides from those heads the keys they did not read; the last hidden state ``[1, T, D]`` (after
    the final norm). ``resume=(layer, x)`` starts at that layer from its input; ``inputs`` (a list) collects each
    layer's input."""
    n = ids.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()[None, None]
    final: list[torch.Tensor] = []

    def attend(i, q, k, v, spec, via: Pass):
        allowed = causal
        if i in masks:
            heads, seen = masks[i]
            allowed = causal.expand(1, q.shape[1], n, n).clone()
            allowed[0, heads] &= seen
        return eager_attention(q, k, v, allowed, spec.scale)[0]

    then: dict[str, Callable] = {"final": lambda x, name: final.append(x)}
    if inputs is not None:
        then["resid_pre"] = lambda x, name: inputs.append(x)
    Pass(net, attend, then=then)(ids, torch.ones_like(ids), None, logits=False, resume=resume)
    return final[-1]


def next_token_losses(net, ids: torch.Tensor, final: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """The next-token losses ``[T − 1]`` (float64) of a pass's last hidden state ``[1, T, D]``: its logits made
    ``chunk`` positions at a time (a long text's whole logits would take GBs)."""
    n = ids.shape[1]
    out = torch.empty(n - 1, dtype=torch.float64)
    for start in range(0, n - 1, chunk):
        end = min(start + chunk, n - 1)
        logits = net_logits(net, final[0, start:end])
        out[start:end] = F.cross_entropy(logits.double(), ids[0, start + 1:end + 1], reduction="none").cpu()
    return out


@dataclass
class HeadEffects:
    """Each key/value head cut alone, under each policy: the rows (``policy``, ``layer``, ``kv_head``,
    ``query_heads``, ``loss_change``: the mean next-token loss with only this head cut, less the full pass's, in
    nats; ``mass``: the share of its query heads' attention the kept keys hold; ``seen_fraction``) and the full
    pass's mean loss."""

    rows: list[dict]
    full_loss: float
    tokens: int
    watched: dict[str, Watched]


@reader
def head_effects(model, text: str, policies: Sequence[Policy], *,
                 progress: Callable[[int, int], None] | None = None) -> HeadEffects:
    """Every key/value head of every layer cut alone by each policy (see the module's docstring): one streamed run
    watching them all (shadow), then one masked pass per head and policy, resumed at the head's layer."""
    net = decoder_network(model)
    ids = token_ids(model, text)
    check_windows(model, net, ids.shape[1])
    policies = [p for p in policies if p.cuts]
    n_layers, kv_heads, n = model.n_layers, model.n_kv_heads, ids.shape[1]
    group = model.n_heads // kv_heads
    total = n + len(policies) * n_layers * kv_heads
    done = 0

    def tick(k: int = 1) -> None:
        nonlocal done
        done += k
        if progress is not None:
            progress(done, total)

    with torch.inference_mode():
        watch = run_stream(net, ids, everywhere(Full(), n_layers, kv_heads), shadow=policies,
                           progress=None if progress is None else lambda d, _n: progress(d, total))
        done = n
        inputs: list[torch.Tensor] = []
        full = next_token_losses(net, ids, masked_pass(net, ids, {}, inputs=inputs))
        full_loss = float(full.mean())
        steps = torch.arange(1, n + 1, dtype=torch.float64)
        rows = []
        for policy in policies:
            w = watch.watched[policy.name]
            for layer in range(n_layers):
                for head in range(kv_heads):
                    seen = seen_by(policy, w.evicted_at[layer, head].to(ids.device))
                    heads = torch.arange(head * group, (head + 1) * group, device=ids.device)
                    cut = masked_pass(net, ids, {layer: (heads, seen[None])}, resume=(layer, inputs[layer]))
                    loss = float(next_token_losses(net, ids, cut).mean())
                    rows.append(dict(policy=policy.name, layer=layer, kv_head=head,
                                     query_heads=[int(h) for h in heads], loss_change=loss - full_loss,
                                     mass=float(w.mass[layer, heads.cpu()].mean()),
                                     seen_fraction=float((seen.sum(-1).double().cpu() / steps).mean())))
                    tick()
    return HeadEffects(rows=rows, full_loss=full_loss, tokens=n, watched=watch.watched)
