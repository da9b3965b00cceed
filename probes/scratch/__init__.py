"""Our own forward pass: the transformer families written from scratch in torch (GPT-2, BERT, Llama,
Mistral, Qwen2; each file holds its family's record, see :mod:`probes.families`).

Nothing here calls transformers' modeling code; it only reads the weights of the Hugging Face
module (``model.hf.state_dict()``) and the config. :func:`forward` has the signature of
:func:`probes.hf.forward` and returns the same :class:`~probes.trace.Trace`, so the two can be
compared head by head.

Backends (``attention.BACKENDS``): ``eager`` materialises every probability; ``sdpa`` and ``flash``
keep only the logsumexp per query row and give a lazy Trace, which recovers any head on demand.
Where ``flash`` cannot run (no CUDA), ``sdpa`` runs and the Trace's ``note`` says so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..attention_math import additive_mask, allowed_keys, attention_bytes, row_logsumexp
from ..errors import UnsupportedModel
from ..trace import Outputs, Trace
from .attention import BACKENDS, FLOAT64_BACKENDS, resolve_backend
from .family import DecoderNetwork, Network, RotaryNetwork, SplitNetwork

LAZY_CHUNK = 256  # the lazy backends run the MLP this many positions at a time (peak memory of long inputs)

__all__ = ["BACKENDS", "DecoderNetwork", "FLOAT64_BACKENDS", "Network", "Outputs", "RotaryNetwork", "SplitNetwork",
           "build", "forward", "outputs", "resolve_backend"]

Edit = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, head outputs z [B, H, L, d]) -> the z to go on with
# (layer, q [B, H, L, d], k, v [B, H_kv, L, d], spec) -> the (q, k, v) the layer's attention runs on
QKVEdit = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, object],
                   tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def build(model) -> Network:
    """The from-scratch network for a loaded :class:`~probes.models.LocalModel` (built once, kept by the model:
    ``model.network()``). Raises :class:`UnsupportedModel` naming what is missing: the family, a config option, a
    weight."""
    return model.network()


def forward(model, enc, backend: str = "eager", logits: bool = True, attention_budget: int | None = None,
            edit: Edit | None = None) -> Trace:
    """Run the from-scratch network on an :class:`~probes.models.Encoding` and return its Trace.

    ``eager`` keeps every probability; ``sdpa`` and ``flash`` keep the logsumexp and give a lazy Trace.
    None keeps q, k, v: the Trace recomputes a layer's from its input hidden state when asked.
    ``logits=False`` skips the language-model head (a long input's logits alone can take GBs).
    ``attention_budget`` (bytes): where eager's probabilities of every head would take more, eager still
    computes each layer (the same numbers, so parity with Hugging Face stays exact), but the Trace keeps one
    logsumexp per row instead of the probabilities (lazy).
    ``edit(layer, z)``: an intervention on each layer's head outputs ``z`` ``[B, H, L, d]`` (the weighted sums
    of v, before the output projection), returning the ``z`` the layer goes on with (see :mod:`probes.effects`);
    the Trace then shows the attention of the edited run (layers after the edit see its effect)."""
    net = build(model)
    enc = enc.to(model.device)
    size = attention_bytes(model, enc)
    ran, note = resolve_backend(backend, enc.input_ids.device, model.dtype)
    keep_lse = ran == "eager" and attention_budget is not None and size > attention_budget
    if keep_lse:
        note = (f"every probability would take {size / 2**20:,.0f} MiB at this length (over the "
                f"{attention_budget / 2**20:,.0f} MiB kept): eager attention ran, and each head is recovered from "
                "one logsumexp per row (equal to its softmax up to float32 rounding)")
    attend_with = BACKENDS[ran]
    mask = enc.attention_mask
    hidden: list[torch.Tensor] = []
    probs, lse, specs, kernels = [], [], [], set()
    allowed: dict = {}  # the eager key mask of each rule (causal, window), as numbers to add, built once per pass

    def attend(q, k, v, spec):
        rule = (spec.causal, spec.window)
        if ran == "eager" and rule not in allowed:
            allowed[rule] = additive_mask(allowed_keys(mask, spec.causal, window=spec.window), q.dtype)
        got = attend_with(q, k, v, mask, spec, allowed.get(rule))
        if keep_lse:  # the layer's probabilities are dropped here: one logsumexp per row is kept instead
            got.probs, got.lse = None, row_logsumexp(q, k, mask, spec)
        (probs.append(got.probs) if got.probs is not None else lse.append(got.lse))
        layer = len(specs)
        specs.append(spec)
        kernels.add(got.kernel)
        return got.output if edit is None else edit(layer, got.output)

    with torch.inference_mode():
        out = net(enc.input_ids, mask, enc.token_type_ids, attend=attend, record=hidden.append, logits=logits,
                  chunk=None if ran == "eager" else LAZY_CHUNK)
        rotary = net.rotary(enc.input_ids.shape[1], enc.input_ids.device) if isinstance(net, RotaryNetwork) else None

    def qkv_of(layer: int):  # q, k, v are one linear map (and a rotation) from a layer's input: recomputed
        return net.qkv(layer, hidden[layer])

    return Trace(source=f"scratch/{ran}", model=model.name, tokens=enc.tokens, input_ids=enc.input_ids,
                 attention_mask=mask.bool(), is_causal=net.causal, hidden_states=hidden, logits=out,
                 attn=probs or None, lse=lse or None, scales=[s.scale for s in specs],
                 windows=[s.window for s in specs], rotary=rotary, n_kv_heads=model.n_kv_heads, qkv_of=qkv_of,
                 backend="sdpa:" + "+".join(sorted(kernels)) if ran == "sdpa" else ran, note=note)


class _Stop(Exception):
    """Raised inside a pass of :func:`outputs` at the layer it was asked to stop before."""


def outputs(model, enc, edit: Edit | None = None, logits: bool = True, keep_z: bool = False,
            grad: bool = False, keep_inputs: bool = False, resume: tuple[int, torch.Tensor] | None = None,
            upto: int | None = None, qkv_edit: QKVEdit | None = None) -> Outputs:
    """One from-scratch pass with eager attention (the numbers :func:`forward` computes, bit for bit) that keeps
    no probabilities: what interventions run many times, in batches of edited copies.

    ``edit(layer, z)`` as in :func:`forward`; ``keep_z`` keeps every layer's (edited) head outputs (from the
    first layer run), ``keep_inputs`` every layer's input; ``resume=(layer, x)`` starts at ``layer`` from its
    input ``x`` ``[B, L, D]`` (a clean pass's ``inputs``, shared by copies edited from that layer on);
    ``grad`` records the pass for autograd (the attention and activations then work out of place), so a
    gradient can flow back to whatever ``edit`` multiplied in (head gates). ``upto``: stop at layer ``upto``'s
    attention, its input recorded (``keep_inputs``) and nothing after it run: ``hidden`` is then that input, and
    there are no logits (what reads only the layers before one, as QK attribution does). ``qkv_edit(layer, q, k, v,
    spec)``: an intervention on each layer's q, k and v before its attention, returning the (q, k, v) it runs on
    (k and v may come back with one head per query head: grouped heads then stop sharing them); path patching
    (:mod:`probes.effects.path_patching`) recomputes one head's q, k or v there."""
    net = build(model)
    net_layers = len(net.layers)
    enc = enc.to(model.device)
    mask = enc.attention_mask
    allowed: dict = {}
    kept: list[torch.Tensor] = []
    last: list[torch.Tensor] = []
    residual: list[torch.Tensor] = []

    def attend(q, k, v, spec):
        if attend.layer == upto:
            raise _Stop
        if qkv_edit is not None:
            q, k, v = qkv_edit(attend.layer, q, k, v, spec)
        rule = (spec.causal, spec.window)
        if rule not in allowed:
            allowed[rule] = additive_mask(allowed_keys(mask, spec.causal, window=spec.window), q.dtype)
        z = BACKENDS["eager"](q, k, v, mask, spec, allowed[rule]).output
        if edit is not None:
            z = edit(attend.layer, z)
        attend.layer += 1
        if keep_z:
            kept.append(z)
        return z

    attend.layer = resume[0] if resume else 0
    layer_inputs: list[torch.Tensor] = []

    def keep_last(x):  # the last hidden state is kept (and every layer's input, when asked)
        if keep_inputs and len(layer_inputs) < net_layers:
            layer_inputs.append(x)
        last[:] = [x]

    with torch.enable_grad() if grad else torch.inference_mode():
        try:
            out = net(enc.input_ids, mask, enc.token_type_ids, attend=attend, record=keep_last, logits=logits,
                      residual=residual.append, resume=resume)
        except _Stop:
            out = None
    return Outputs(hidden=last[-1], logits=out, residual=residual[0] if residual else None,
                   z=kept if keep_z else None, inputs=layer_inputs if keep_inputs else None)
