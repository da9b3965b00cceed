"""Named hook points of the from-scratch pass: one fixed set of places where a callback reads the tensor the
pass computed there, or hands back the tensor the pass goes on with.

    embed                     x = the embeddings                                 [B, L, D]
    for each layer L:
      blocks.L.resid_pre      x = the layer's input                              [B, L, D]
      blocks.L.attn.q/k/v     q, k, v (q, k rotated in rotary families)         [B, H, L, d], k and v [B, H_kv, L, d]
      blocks.L.attn.scores    s = q·kᵀ × scale, masked                           [B, H, L, L]   (eager attention)
      blocks.L.attn.pattern   α = softmax(s)                                     [B, H, L, L]   (eager attention)
      blocks.L.attn.z         z = α·v, each head's output before W_O             [B, H, L, d]
      blocks.L.attn.result    z_h·W_O[h], what each head writes                  [B, L, H, D]   (only when hooked)
      blocks.L.attn_out       the attention's output, Σ_h z_h·W_O[h] + b_O       [B, L, D]
      blocks.L.mlp_out        the MLP's output                                   [B, L, D]
      blocks.L.resid_post     the layer's output (the next layer's input)        [B, L, D]
    final                     the last hidden state, after the final norm        [B, L, D]
    logits                    final · lm_headᵀ                                   [B, L, V]

A hook is ``fn(tensor, point) -> tensor | None``: None reads (the pass goes on with the tensor as it was; the
hook must not change it in place), a tensor edits (the pass goes on with it). :data:`POINTS` is the list with
one line of meaning each; :func:`point` makes a layer's name (``point(1, "attn.pattern")`` →
``"blocks.1.attn.pattern"``). An unknown name is refused, naming the valid ones.

The family files (``gpt2.py``, ``bert.py``, ``llama.py``, the shared loop of ``prenorm.py``) call one function at
every point, :meth:`Pass.at`, and the pass's attention through :meth:`Pass.attend` (which holds the q, k, v, scores,
pattern and z points): a new kind of edit needs no change in any of them. With no hook and no stop, :meth:`Pass.at`
returns its tensor at once, so a pass without hooks costs what it did without hook points.

``stop_after``: the pass ends right after that point's hooks ran (what reads only the layers before one, as QK
attribution does): nothing after it is computed, and there are no logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import torch

from ..errors import BadOption
from .writes import head_writes, write_scale

Hook = Callable[[torch.Tensor, str], "torch.Tensor | None"]  # (tensor, point) -> the tensor to go on with, or None

POINTS: dict[str, str] = {  # every point, in the order a pass reaches them (L: a layer's number)
    "embed": "the embeddings, the first layer's input [B, L, D] (BERT: after its LayerNorm)",
    "blocks.L.resid_pre": "layer L's input, the residual stream [B, L, D]",
    "blocks.L.attn.q": "the queries [B, H, L, d] (rotated, in a rotary family)",
    "blocks.L.attn.k": "the keys [B, H_kv, L, d] (rotated, in a rotary family)",
    "blocks.L.attn.v": "the values [B, H_kv, L, d]",
    "blocks.L.attn.scores": "q·kᵀ × scale, the mask added, before the softmax [B, H, L, L] (eager attention only)",
    "blocks.L.attn.pattern": "the attention probabilities, softmax(scores) [B, H, L, L] (eager attention only)",
    "blocks.L.attn.z": "each head's output, the weighted sum of the values, before W_O [B, H, L, d]",
    "blocks.L.attn.result": "what each head writes, z_h·W_O[h] [B, L, H, D], no bias (computed only when hooked)",
    "blocks.L.attn_out": "the attention's output, Σ_h z_h·W_O[h] + the bias: what the layer adds to x [B, L, D]",
    "blocks.L.mlp_out": "the MLP's output, what the layer adds to x [B, L, D]",
    "blocks.L.resid_post": "layer L's output, the next layer's input [B, L, D]",
    "final": "the last hidden state, after the final norm where there is one [B, L, D]",
    "logits": "the language-model head's scores, final · lm_headᵀ [B, L, V]",
}
LAYER_POINTS = tuple(name[len("blocks.L."):] for name in POINTS if name.startswith("blocks.L."))
EAGER_ONLY = ("attn.scores", "attn.pattern")  # the lazy backends never hold the scores or the probabilities


def point(layer: int, name: str) -> str:
    """The full name of a layer's point: ``point(1, "attn.z")`` → ``"blocks.1.attn.z"``."""
    if name not in LAYER_POINTS:
        raise BadOption(f"unknown point {name!r} of a layer: choose one of {', '.join(LAYER_POINTS)}")
    return f"blocks.{layer}.{name}"


def split(name: str) -> tuple[int | None, str]:
    """``"blocks.1.attn.z"`` → ``(1, "attn.z")``; ``"logits"`` → ``(None, "logits")``. No check."""
    if name.startswith("blocks."):
        layer, _, rest = name[len("blocks."):].partition(".")
        if layer.isdigit():
            return int(layer), rest
    return None, name


def layer_of(name: str) -> int:
    """The layer of a layer's point: ``layer_of("blocks.1.attn.z")`` → 1 (what a hook on every layer reads)."""
    layer, _ = split(name)
    if layer is None:
        raise BadOption(f"{name!r} is not a point of one layer")
    return layer


def check(name: str, n_layers: int) -> str:
    """``name`` if it is a point of a network of ``n_layers`` layers, else :class:`BadOption` listing them all."""
    layer, rest = split(name)
    if (layer is None and rest in POINTS and not rest.startswith("blocks.")) or \
            (layer is not None and layer < n_layers and rest in LAYER_POINTS):
        return name
    where = f" (layers 0–{n_layers - 1})" if layer is not None and rest in LAYER_POINTS else ""
    raise BadOption(f"unknown hook point {name!r}{where}: the points are {', '.join(POINTS)}, with L a layer's "
                    f"number (blocks.0.attn.z); a layer's point without its layer (attn.z) means every layer")


def expand(names: Iterable[str], n_layers: int) -> list[str]:
    """Full names: a layer's point without its layer (``"attn.z"``) stands for that point of every layer."""
    out = []
    for name in names:
        if name in LAYER_POINTS:
            out += [f"blocks.{i}.{name}" for i in range(n_layers)]
        else:
            out.append(check(name, n_layers))
    return out


def table(hooks: Mapping[str, Hook | Sequence[Hook]] | None, n_layers: int) -> dict[str, list[Hook]]:
    """``{full name: [hook, …]}`` from a mapping whose values are a hook or a list of hooks (run in order) and
    whose keys may be a layer's point without its layer (every layer)."""
    out: dict[str, list[Hook]] = {}
    for name, fns in (hooks or {}).items():
        fns = [fns] if callable(fns) else list(fns)
        for full in expand([name], n_layers):
            out.setdefault(full, []).extend(fns)
    return out


class _Stopped(Exception):
    """Ends a pass at its ``stop_after`` point: raised by :meth:`Pass.at`, caught by :meth:`Pass.__call__` only."""


Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, object, "Pass"], torch.Tensor]


class Pass:
    """One pass of a from-scratch network with hooks: what a network's ``__call__`` is given (``via``); calling the
    pass (:meth:`__call__`) runs the network through it.

    ``attention(layer, q, k, v, spec, pass)`` computes a layer's head outputs z ``[B, H, L, d]`` from its q, k and v
    (the caller's: eager in :func:`probes.scratch.run_with_hooks`, a backend in :func:`probes.scratch.forward`, a KV
    cache in generation); an eager one asks :meth:`edit_of` for the scores and pattern hooks. ``hooks``: ``{point:
    hook or [hooks]}`` (:func:`table`); ``then``: more hooks, run after those at the same point (what the caller
    records of the pass, once every edit is made); ``stop_after``: a point's full name, or None. ``net``: the
    network (the ``attn.result`` point reads its ``head_out``)."""

    def __init__(self, net, attention: Attention, hooks: Mapping | None = None, stop_after: str | None = None,
                 then: Mapping | None = None):
        n_layers = len(net.layers)
        self.net = net
        self.attention = attention
        self.hooks = table(hooks, n_layers)
        for name, fns in table(then, n_layers).items():  # the caller's own reads, after the given hooks
            self.hooks.setdefault(name, []).extend(fns)
        self.stop_after = None if stop_after is None else check(stop_after, n_layers)
        # (layer, name) of every point with something to do: a hook, the stop, attn_out where attn.result is hooked
        self._where = {split(full) for full in [*self.hooks, *([self.stop_after] if self.stop_after else [])]}
        self._where |= {(layer, "attn_out") for layer, name in list(self._where) if name == "attn.result"}
        self.active = bool(self._where)  # False: every point returns its tensor at once
        self._z: dict[int, torch.Tensor] = {}  # each layer's z, kept only while attn.result is hooked there

    def at(self, name: str, layer: int | None, x: torch.Tensor) -> torch.Tensor:
        """The point ``name`` of ``layer`` (None: a point of the whole network) reached with ``x``: its hooks run in
        order, each on what the one before handed on; returns the tensor the pass goes on with."""
        if (layer, name) not in self._where:  # nothing to do here: the tensor as it came
            return x
        full = name if layer is None else f"blocks.{layer}.{name}"
        if name == "attn_out" and layer is not None and (layer, "attn.result") in self._where:
            x = self._result(layer, x)
        for fn in self.hooks.get(full, ()):
            got = fn(x, full)
            if got is not None:
                x = got
        if full == self.stop_after:
            raise _Stopped
        return x

    def edit_of(self, name: str, layer: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """``x -> x`` running the point ``name`` of ``layer`` (what an eager attention calls on its scores and
        pattern), or None when nothing is hooked there (the attention then works in place, as without hooks)."""
        if (layer, name) not in self._where:
            return None
        return lambda x: self.at(name, layer, x)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, spec) -> torch.Tensor:
        """Layer ``layer``'s attention, as a network calls it: the q, k, v points, the attention (with the scores and
        pattern points inside it), the z point; returns the z the layer goes on with."""
        if self.active:
            q, k, v = self.at("attn.q", layer, q), self.at("attn.k", layer, k), self.at("attn.v", layer, v)
        z = self.attention(layer, q, k, v, spec, self)
        if self.active:
            z = self.at("attn.z", layer, z)
            if (layer, "attn.result") in self._where:
                self._z[layer] = z
        return z

    def _result(self, layer: int, out: torch.Tensor) -> torch.Tensor:
        """The attn.result point, run at attn_out: each head's write z_h·W_O[h] ``[B, L, H, D]`` (Gemma: times its
        post-attention norm frozen at this pass, :func:`~probes.scratch.family.head_writes`); when a hook edits it,
        the attention's output becomes the sum of the heads' writes plus the output bias (Gemma: the post-norm stays
        frozen at the unedited pass's scale)."""
        z = self._z.pop(layer)
        b_o = self.net.head_out(layer)[1]  # [D] or None
        # [B, L, H, D]; through the post-attention norm frozen at this pass (Gemma): the writes sum to attn_out
        result = head_writes(self.net, layer, z).transpose(1, 2)
        name = f"blocks.{layer}.attn.result"
        edited = False
        for fn in self.hooks.get(name, ()):  # none where the pass only stops here
            got = fn(result, name)
            if got is not None:
                result, edited = got, True
        if name == self.stop_after:
            raise _Stopped
        if not edited:
            return out
        out = result.sum(2)
        if b_o is None:
            return out
        scale = write_scale(self.net, layer, z)  # a post-attention norm scales the bias too (OLMo 2), frozen
        return out + (b_o.to(out.dtype) if scale is None else b_o.to(out.dtype) * scale.to(out.dtype))

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 token_type_ids: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor | None, bool]:
        """The network over ``input_ids`` with this pass (``kwargs``: ``logits``, ``chunk``, ``start``, ``resume``):
        ``(logits or None, whether it stopped at stop_after)``."""
        try:
            return self.net(input_ids, attention_mask, token_type_ids, via=self, **kwargs), False
        except _Stopped:
            return None, True
