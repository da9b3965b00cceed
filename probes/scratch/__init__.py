"""Our own forward pass: the transformer families written from scratch in torch (each file holds its family's
record; :mod:`probes.families` collects them, and ``probes.families.in_words()`` names them).

Nothing here calls transformers' modeling code; it only reads the weights of the Hugging Face
module (``model.hf.state_dict()``) and the config. :func:`forward` has the signature of
:func:`probes.hf.forward` and returns the same :class:`~probes.trace.Trace`, so the two can be
compared head by head.

Backends (``attention.BACKENDS``): ``eager`` materialises every probability; ``sdpa`` and ``flash``
keep only the logsumexp per query row and give a lazy Trace, which recovers any head on demand.
Where ``flash`` cannot run (no CUDA), ``sdpa`` runs and the Trace's ``note`` says so.

**Hook points** (:mod:`probes.scratch.hooks`): every pass goes through one fixed set of named points (``embed``,
each layer's ``resid_pre``, ``attn.q``, ``attn.k``, ``attn.v``, ``attn.scores``, ``attn.pattern``, ``attn.z``,
``attn.result``, ``attn_out``, ``mlp_out``, ``resid_post``, then ``final`` and ``logits``), where a callback
``fn(tensor, point)`` reads the tensor (returns None) or edits it (returns the tensor the pass goes on with).
:func:`run_with_hooks` is the pass the interventions use (TransformerLens's name for it: eager attention, no
probabilities kept, ``stop_after`` a point); :func:`forward` takes the same hooks. Ablation, path patching, QK
attribution, the logit lens, direct logit attribution and head importance (:mod:`probes.effects`) are hooks on it::

    from probes import scratch
    from probes.scratch import point
    seen = {}
    def read(pattern, name):  # [B, H, L, L]; returns None: the pass goes on with it
        seen[name] = pattern
    def zero_head_2(z, name):  # [B, H, L, d]: head 2 writes nothing (an edit: the z the pass goes on with)
        z = z.clone()
        z[:, 2] = 0.0
        return z
    ran = scratch.run_with_hooks(model, enc, {point(1, "attn.pattern"): read, point(1, "attn.z"): zero_head_2})
    seen["blocks.1.attn.pattern"], ran.logits  # layer 1's pattern; the logits of the edited run
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from ..attention_math import additive_mask, allowed_keys, attention_bytes, row_logsumexp
from ..errors import BadOption
from ..trace import Trace
from .attention import BACKENDS, FLOAT64_BACKENDS, Attended, attention, resolve_backend
from .family import (
    DecoderNetwork,
    Network,
    RotaryNetwork,
    SplitNetwork,
    head_writer,
    head_writes,
    refuse_final_softcap,
    write_scale,
)
from .hooks import LAYER_POINTS, POINTS, Hook, Pass, layer_of, point, split
from .prenorm import net_logits

eager_attention = attention  # the eager formula's public name (`attention` is also its module's name: importing that
# from outside would read as reaching into probes.scratch.attention)
LAZY_CHUNK = 256  # the lazy backends run the MLP this many positions at a time (peak memory of long inputs)

__all__ = ["BACKENDS", "DecoderNetwork", "FLOAT64_BACKENDS", "Hook", "LAYER_POINTS", "Network", "POINTS", "Pass",
           "eager_attention", "head_writer", "head_writes", "net_logits", "refuse_final_softcap", "write_scale",
           "Ran", "RotaryNetwork", "SplitNetwork", "build", "forward", "layer_of", "point",
           "resolve_backend", "run_with_hooks"]

Hooks = Mapping[str, "Hook | list[Hook]"]  # {point: hook, or hooks run in order}; "attn.z" alone: every layer's
LAZY_UNHOOKABLE = ("attn.q", "attn.k", "attn.scores", "attn.pattern")  # a lazy Trace recomputes q and k itself


def build(model) -> Network:
    """The from-scratch network for a loaded :class:`~probes.models.LocalModel` (built once, kept by the model:
    ``model.network()``). Raises :class:`UnsupportedModel` naming what is missing: the family, a config option, a
    weight."""
    return model.network()


def forward(model, enc, backend: str = "eager", logits: bool = True, attention_budget: int | None = None,
            hooks: Hooks | None = None) -> Trace:
    """Run the from-scratch network on an :class:`~probes.models.Encoding` and return its Trace.

    ``eager`` keeps every probability; ``sdpa`` and ``flash`` keep the logsumexp and give a lazy Trace.
    None keeps q, k, v: the Trace recomputes a layer's from its input hidden state when asked.
    ``logits=False`` skips the language-model head (a long input's logits alone can take GBs).
    ``attention_budget`` (bytes): where eager's probabilities of every head would take more, eager still
    computes each layer (the same numbers, so parity with Hugging Face stays exact), but the Trace keeps one
    logsumexp per row instead of the probabilities (lazy).
    ``hooks``: ``{point: fn}`` (:mod:`probes.scratch.hooks`), as in :func:`run_with_hooks`; the Trace then shows the
    attention of the edited run (an edit of ``attn.z`` in one layer changes what the layers after it see). A lazy
    Trace recomputes each head's q and k from its layer's input, so it refuses hooks on ``attn.q``, ``attn.k``,
    ``attn.scores`` and ``attn.pattern``."""
    net = build(model)
    enc = enc.to(model.device)
    size = attention_bytes(model, enc)
    ran, note = resolve_backend(backend, enc.input_ids.device, model.dtype)
    keep_lse = ran == "eager" and attention_budget is not None and size > attention_budget
    if keep_lse:
        assert attention_budget is not None  # keep_lse is set only under a budget
        note = (f"every probability would take {size / 2**20:,.0f} MiB at this length (over the "
                f"{attention_budget / 2**20:,.0f} MiB kept): eager attention ran, and each head is recovered from "
                "one logsumexp per row (equal to its softmax up to float32 rounding)")
    if ran != "eager" or keep_lse:
        for name in hooks or {}:
            if split(name)[1] in LAZY_UNHOOKABLE:
                raise BadOption(f"hook point {name!r}: this Trace is lazy (it recovers each head from its q and k, "
                                "recomputed from the layer's input), so it cannot show an edit of q, k, the scores or "
                                "the pattern; run the eager backend within its attention budget")
    attend_with = BACKENDS[ran]
    mask = enc.attention_mask
    hidden: list[torch.Tensor] = []
    probs: list[torch.Tensor] = []
    lse: list[torch.Tensor] = []
    specs, kernels = [], set()
    allowed: dict = {}  # the eager key mask of each rule (causal, window), as numbers to add, built once per pass

    def attend(layer, q, k, v, spec, via: Pass):
        if ran == "eager":
            rule = (spec.causal, spec.window)
            if rule not in allowed:
                allowed[rule] = additive_mask(allowed_keys(mask, spec.causal, window=spec.window), q.dtype)
            out, p = attention(q, k, v, allowed[rule], spec.scale, via.edit_of("attn.scores", layer),
                               via.edit_of("attn.pattern", layer), softcap=spec.softcap)
            got = Attended(out, probs=p, kernel="eager")
        else:
            got = attend_with(q, k, v, mask, spec)
        if keep_lse:  # the layer's probabilities are dropped here: one logsumexp per row is kept instead
            got.probs, got.lse = None, row_logsumexp(q, k, mask, spec)
        if got.probs is not None:
            probs.append(got.probs)
        else:
            assert got.lse is not None  # every backend hands back the probabilities or the logsumexp (Attended)
            lse.append(got.lse)
        specs.append(spec)
        kernels.add(got.kernel)
        return got.output

    record = lambda x, name: hidden.append(x)  # noqa: E731 (each layer's input, then the last hidden state)
    with torch.inference_mode():
        out, _ = Pass(net, attend, hooks, then={"resid_pre": record, "final": record})(
            enc.input_ids, mask, enc.token_type_ids, logits=logits, chunk=None if ran == "eager" else LAZY_CHUNK)
        rotary = rotary_of(net, enc.input_ids.shape[1], enc.input_ids.device)

    def qkv_of(layer: int):  # q, k, v are one linear map (and a rotation) from a layer's input: recomputed
        return net.qkv(layer, hidden[layer])

    if ran != "eager" and "softcap_math" in kernels:
        note = " ".join(filter(None, (note, "no fused kernel soft-caps its scores: the soft-capped layers ran the "
                                      "formula (cap·tanh(s / cap), then the mask) and kept one logsumexp per row")))
    return Trace(source=f"scratch/{ran}", model=model.name, tokens=enc.tokens, input_ids=enc.input_ids,
                 attention_mask=mask.bool(), is_causal=net.causal, hidden_states=hidden, logits=out,
                 attn=probs or None, lse=lse or None, scales=[s.scale for s in specs],
                 windows=[s.window for s in specs], softcaps=[s.softcap for s in specs], rotary=rotary,
                 n_kv_heads=model.n_kv_heads, qkv_of=qkv_of,
                 backend="sdpa:" + "+".join(sorted(kernels)) if ran == "sdpa" else ran, note=note)


def rotary_of(net: Network, length: int, device: torch.device | str):
    """What a Trace keeps of a rotary network's positions (None: not rotary): its one (cos, sin) pair, or each
    layer's where the layers turn by different angles (ModernBERT's global and local θ, Gemma 3's table per layer
    type)."""
    if not isinstance(net, RotaryNetwork):
        return None
    tables = [net.rotary(length, device, layer) for layer in range(len(net.layers))]
    same = all(torch.equal(t[0], tables[0][0]) and torch.equal(t[1], tables[0][1]) for t in tables)
    return tables[0] if same else tables


@dataclass
class Ran:
    """What :func:`run_with_hooks` hands back: the logits and the last hidden state (None when the pass stopped before
    them, or ``logits=False``, or the model has no language-model head) and the tensors of the points it was asked to
    ``keep``, by full name (``ran["blocks.1.attn.z"]``; :meth:`each` lists one point of every layer)."""

    logits: torch.Tensor | None  # [B, L, V]
    final: torch.Tensor | None  # [B, L, D]: the last hidden state, after the final norm where there is one
    kept: dict[str, torch.Tensor] = field(default_factory=dict)
    stopped: str | None = None  # the point the pass stopped after (``stop_after``), or None: it ran to the end

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.kept[name]

    def each(self, name: str) -> list[torch.Tensor]:
        """The kept tensors of a layer's point (``"attn.z"``, ``"resid_pre"``) in layer order: one per layer the
        pass ran (from ``resume``'s layer, up to ``stop_after``)."""
        got = sorted((layer, x) for full, x in self.kept.items() for layer, rest in [split(full)] if rest == name)
        return [x for _, x in got]


def run_with_hooks(model, enc, hooks: Hooks | None = None, *, keep: Iterable[str] = (), stop_after: str | None = None,
                   logits: bool = True, grad: bool = False, resume: tuple[int, torch.Tensor] | None = None) -> Ran:
    """One from-scratch pass with eager attention (the numbers :func:`forward` computes, bit for bit) that keeps no
    probabilities: what interventions run, many times, in batches of edited copies.

    ``hooks``: ``{point: fn}`` or ``{point: [fn, …]}`` (:mod:`probes.scratch.hooks`; a layer's point without its
    layer, ``"attn.z"``, is that point of every layer): ``fn(tensor, point)`` returns None to read, or the tensor the
    pass goes on with. ``keep``: points whose tensors :class:`Ran` hands back (after every hook there: what the pass
    went on with), e.g. ``keep=("resid_pre", "attn.z")``. ``stop_after``: a point's full name; the pass ends right
    after it (``blocks.3.resid_pre``: layer 3's input is kept and nothing of layer 3 runs), with no logits.
    ``logits=False`` skips the language-model head. ``grad`` records the pass for autograd (the attention and the
    activations then work out of place), so a gradient can flow back to what an edit multiplied in (head gates).
    ``resume=(layer, x)`` starts at ``layer`` from its input ``x`` ``[B, L, D]`` (a clean pass's ``resid_pre``,
    shared by copies edited from that layer on); the first point reached is then that layer's ``resid_pre``."""
    net = build(model)
    enc = enc.to(model.device)
    mask = enc.attention_mask
    allowed: dict = {}

    def attend(layer, q, k, v, spec, via: Pass):  # eager attention, the scores and pattern points inside it
        rule = (spec.causal, spec.window)
        if rule not in allowed:
            allowed[rule] = additive_mask(allowed_keys(mask, spec.causal, window=spec.window), q.dtype)
        return attention(q, k, v, allowed[rule], spec.scale, via.edit_of("attn.scores", layer),
                         via.edit_of("attn.pattern", layer), softcap=spec.softcap)[0]

    kept: dict[str, torch.Tensor] = {}
    store = kept.__setitem__
    then = {name: lambda x, full: store(full, x) for name in (*keep, "final")}
    with torch.enable_grad() if grad else torch.inference_mode():
        one = Pass(net, attend, hooks, stop_after, then)
        out, stopped = one(enc.input_ids, mask, enc.token_type_ids, logits=logits, resume=resume)
    final = kept.pop("final", None) if "final" not in keep else kept.get("final")
    return Ran(logits=out, final=final, kept=kept, stopped=one.stop_after if stopped else None)


def run(model, enc, hooks: Hooks | None = None, *, keep: Iterable[str] = (), stop_after: str | None = None,
        logits: bool = True, grad: bool = False, resume: tuple[int, torch.Tensor] | None = None) -> Ran:
    """Deprecated: :func:`run_with_hooks` (the same arguments, the same pass); ``run`` is :func:`probes.run`'s word."""
    warnings.warn("probes.scratch.run is deprecated: use probes.scratch.run_with_hooks (the same arguments)",
                  DeprecationWarning, stacklevel=2)
    return run_with_hooks(model, enc, hooks, keep=keep, stop_after=stop_after, logits=logits, grad=grad, resume=resume)
