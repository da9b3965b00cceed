"""Path patching: does a sender head reach one receiver head through its query, its key or its value?

Activation patching (:mod:`.ablation`) replaces a head's output everywhere downstream. Path patching follows one
path: the direct write of a sender head s (in a layer before the receiver's) into the input of ONE receiver head's
q, k or v (Wang et al. 2022, "Interpretability in the wild"; Goldowsky-Dill et al. 2023). On two texts of the same
length in tokens, clean and corrupted:

    Δ_s  = (z_s(corrupted) − z_s(clean)) · W_O[s]   the sender's output on the corrupted text minus on the clean
    x'   = x + Δ_s                                   x: the receiver layer's input on the clean text
    q_r  = q of head r recomputed from x'  (or k, or v: of the key/value head r reads, h // (H / H_kv))

Every other head of the receiver's layer, the receiver's other two inputs and the residual stream itself stay clean;
the receiver's output then changes, and the layers after it run on. What is measured, per sender: how the
receiver's attention pattern moved (``pattern_change``: the largest |Δα| of one cell; ``pattern_shift``: the mean
over query rows of the total variation ½·Σ_j |Δα_ij|, 0 = unchanged, 1 = all of the row's weight moved; with
``cells``: the mean weight on those (query, key) cells, clean and patched) and the model's outputs
(:mod:`.measures`: the change in the next-token loss and, given targets, in a logit difference, for decoders with a
language-model head; hidden-state changes for every model).

Batched like :func:`.ablation.ablate_each`: copy b of a pass patches sender b, and the pass starts at the receiver's
layer from the clean pass's input there (``resume``), the receiver's q, k or v replaced by edit hooks on the receiver
layer's ``attn.q``, ``attn.k`` and ``attn.v`` (:func:`receiver_hooks`, on :func:`probes.scratch.run_with_hooks`). A
pass holds ``batch`` copies' logits and activations, so its size comes from a byte budget (``budget``, default
:data:`~probes.effects.ablation.WORK_BUDGET`; :func:`~probes.effects.ablation.copy_bytes` is one sender's share,
:func:`fixed_bytes` what a pass holds whatever its size): the peak stays near the clean pass's own, whatever the number
of senders (smollm2, 162 senders into 18.6: ``benchmarks/path_patching_memory.py``). In a post-norm model (BERT) a
layer's input is the normed residual, so Δ_s added to it is the sender's write as the residual carries it, without the
norms between: the pattern change is still the receiver's own, the path an approximation. Gemma's post-attention norm
scales the attention's output, not linear in its heads: a sender's Δ_s is Δz_h·W_O[h] times that norm frozen at the
clean pass's scale ((1 + w) ÷ rms of the clean attention output, :func:`~probes.scratch.write_scale`), the
sender's write as it reaches the residual with the rest of the clean pass held; the receiver's scores are soft-capped
as the layer caps them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd
import torch

from ..attention_math import Spec, repeat_kv
from ..errors import BadOption
from ..head_index import check_heads, check_index, check_position, check_receiver, parse_head as parse_one
from ..scratch import BACKENDS, build, point, run_with_hooks, write_scale
from ..seam import reader
from .ablation import MAX_BATCH, WORK_BUDGET, copy_bytes
from .measures import LOGIT_POSITIONS, compare, lm_network, lm_stats

INTO = ("q", "k", "v")
PATTERN_MEASURES = ("pattern_change", "pattern_shift")
ABOUT = {
    "pattern_change": "largest |Δ| of one attention weight of the receiver",
    "pattern_shift": "mean over query rows of ½·Σ|Δ weight| (0: the pattern unchanged, 1: all weight moved)",
    "cells": "mean weight of the receiver on the chosen (query, key) cells, patched",
    "cells_change": "change in that mean weight (patched − clean)",
}


@dataclass
class PathPatch:
    """The effect of each sender on one receiver head through its q, k or v. ``frame``: one row per sender
    (``layer``, ``head``, then each measure's change); ``clean_pattern``: the receiver's attention on the clean
    text ``[n, n]``; ``patterns``: each sender's patched pattern ``[S, n, n]`` (``keep_patterns``, else None)."""

    model: str
    receiver: tuple[int, int]
    into: str
    tokens: list[str]
    frame: pd.DataFrame
    clean_pattern: torch.Tensor
    patterns: torch.Tensor | None = None
    cells: list[tuple[int, int]] | None = None
    clean_cells: float | None = None

    def ranked(self, by: str | None = None) -> pd.DataFrame:
        """The senders by effect, largest first: |loss change| where there is a loss, else the pattern shift."""
        by = by or ("loss" if "loss" in self.frame else "pattern_shift")
        return self.frame.reindex(self.frame[by].abs().sort_values(ascending=False).index).reset_index(drop=True)


def parse_head(spec: str, model, what: str = "head") -> tuple[int, int]:
    """``"1.2"`` -> (1, 2), checked against the model's size (:func:`probes.head_index.parse_head`)."""
    return parse_one(spec, model.n_layers, model.n_heads, what, model.name)


def _encode(model, text):
    return model.encode(text) if isinstance(text, str) else text


def _check(model, receiver, into, senders, n, cells):
    layer, head = check_receiver(receiver, model.n_layers, model.n_heads, model.name)
    if into not in INTO:
        raise BadOption(f"unknown input {into!r}: patch into one of q, k, v")
    # a sender writes before the receiver reads: a head of the layers before the receiver's
    check_heads(senders, layer, model.n_heads, "sender", f"the layers before receiver {layer}.{head}")
    if not senders:
        raise BadOption("no senders given")
    for q, k in cells or ():
        check_index(q, n, "query token", f"the text's {n} tokens")
        check_index(k, n, "key token", f"the text's {n} tokens")


def fixed_bytes(model, length: int, lm: bool) -> int:
    """Bytes a pass holds whatever its number of copies: with a language-model head (``lm``), the logits of
    :data:`~probes.effects.measures.LOGIT_POSITIONS` positions (of one copy or several), and their float64 copy and
    log-softmax for the loss (:func:`~probes.effects.measures.lm_stats`). ``length`` is kept for callers."""
    size = torch.empty((), dtype=model.dtype).element_size()
    return (size + 16) * LOGIT_POSITIONS * model.config.vocab_size if lm else 0


@reader
def batch_for(model, length: int, lm: bool, budget: int | None = None) -> int:
    """Senders per pass within ``budget`` bytes, at most :data:`MAX_BATCH`. A budget given that is too small for one
    sender is refused (:class:`BadOption`, saying how much one needs); the default, :data:`WORK_BUDGET`, gives one
    sender a pass then (a long text on a machine that chose no bound)."""
    one, fixed = copy_bytes(model, length), fixed_bytes(model, length, lm)
    if budget is None:
        return max(1, min(MAX_BATCH, (WORK_BUDGET - fixed) // one))
    if budget < fixed + one:
        raise BadOption(f"path patching a text of {length} tokens on {model.name} needs {(fixed + one) / 2**20:,.0f} "
                        f"MiB for one sender at a time, more than the {budget / 2**20:,.0f} MiB it may use: shorten "
                        "the text")
    return min(MAX_BATCH, (budget - fixed) // one)


@reader
def path_patch(model, clean, corrupted, receiver: tuple[int, int], into: str = "k",
               senders: Sequence[tuple[int, int]] | None = None, cells: Sequence[tuple[int, int]] | None = None,
               position: int | None = None, targets: tuple[int, int] | None = None, batch: int | None = None,
               keep_patterns: bool = False, progress: Callable[[int, int], None] | None = None,
               budget: int | None = None) -> PathPatch:
    """Patch each sender's output on ``corrupted`` into receiver ``(layer, head)``'s ``into`` (q, k or v) on ``clean``
    (two texts, or :class:`~probes.models.Encoding` s of one text each, of the same length in tokens). ``senders``:
    default every head before the receiver's layer. ``cells``: (query, key) token pairs whose mean receiver weight is
    reported; ``position``, ``targets``: as in :func:`probes.effects.measures.compare`; ``batch``: senders per pass
    (at most; default: as many as ``budget`` bytes hold, :func:`batch_for`, whose default is :data:`WORK_BUDGET`; a
    budget given that is too small for one sender is refused before any pass runs); ``progress(done, total)``: called
    after each pass, ``done`` senders of ``total`` patched. The numbers do not depend on the batch: each copy is its
    own row of the same pass."""
    r_layer, r_head = receiver
    if senders is None:
        senders = [(layer, head) for layer in range(max(r_layer, 0)) for head in range(model.n_heads)]
    senders = [(s_layer, s_head) for s_layer, s_head in senders]
    enc, enc_c = _encode(model, clean), _encode(model, corrupted)  # an empty text is refused here (EmptyInput)
    if enc.input_ids.shape != enc_c.input_ids.shape or enc.input_ids.shape[0] != 1:
        raise BadOption(f"path patching needs two texts of the same length in tokens: the clean one has "
                        f"{enc.input_ids.shape[-1]}, the corrupted {enc_c.input_ids.shape[-1]} on {model.name} "
                        "(change words for words of one token each)")
    n = int(enc.attention_mask.sum())
    cells = [(q, k) for q, k in cells] if cells else None
    _check(model, receiver, into, senders, n, cells)
    check_position(position, n)
    lm = model.predicts_tokens
    length = enc.input_ids.shape[1]
    size = batch if budget is None and batch else min(batch or MAX_BATCH, batch_for(model, length, lm, budget))
    net = build(model)

    x_at = point(r_layer, "resid_pre")
    base = run_with_hooks(model, enc, logits=False, keep=[x_at, "attn.z"])  # logits: a few positions at a time
    base_z = base.each("attn.z")
    # the senders' z on the corrupted text: the layers before the receiver's
    other = run_with_hooks(model, enc_c, logits=False, keep=["attn.z"], stop_after=x_at).each("attn.z")
    x = base[x_at]  # [1, L, D]: the receiver layer's clean input
    ids = enc.input_ids[0].to(x.device)
    unembedding = lm_network(model)[1] if lm else None  # lm: model.predicts_tokens
    softcap = getattr(build(model), "logit_softcap", None)  # Gemma 2: the logits are soft-capped
    stats = lambda hidden: lm_stats(ids, n, position, targets, hidden=hidden,  # noqa: E731
                                    unembedding=unembedding, softcap=softcap) if lm else None
    assert base.final is not None  # no stop_after: the clean pass reaches its final point
    clean_lm = stats(base.final)
    with torch.inference_mode():
        heads_out = {layer: net.head_out(layer)[0] for layer in {s for s, _ in senders}}  # W_O [H, d, D]
        # Gemma: a post-attention norm, frozen at the clean pass's scale ([L, D]; None: no norm after the attention)
        scales = {layer: write_scale(net, layer, base_z[layer][0]) for layer in heads_out}

    def write(s, h):  # sender (s, h)'s change of write: Δz_h·W_O[h] (times the frozen post-norm, Gemma)
        delta = (other[s][0, h] - base_z[s][0, h]).to(heads_out[s]) @ heads_out[s][h]
        scale = scales[s]
        return delta if scale is None else delta * scale.to(delta.dtype)

    def deltas(part):  # [S, L, D]: each sender's write, made per pass (all of them at once: S × L × D floats)
        with torch.inference_mode():
            return torch.stack([write(s, h) for s, h in part]).to(x)

    mask = enc.attention_mask.to(x.device)
    spec = Spec(model.family.scale(model.config, r_layer), causal=net.causal,
                window=model.family.window(model.config, r_layer),
                softcap=model.family.softcap(model.config, r_layer))  # the receiver layer's attention
    clean_pattern: list[torch.Tensor] = []
    rows, patterns = [], []
    for start in range(0, len(senders), size):
        chunk = deltas(senders[start:start + size])
        got_pattern: list[torch.Tensor] = []
        copies = replace(enc, input_ids=enc.input_ids.expand(len(chunk), -1),
                         attention_mask=enc.attention_mask.expand(len(chunk), -1),
                         token_type_ids=None if enc.token_type_ids is None else enc.token_type_ids.expand(len(chunk),
                                                                                                           -1))
        hooks = receiver_hooks(net, receiver, into, x + chunk, mask, spec, clean_pattern, got_pattern)
        got = run_with_hooks(model, copies, hooks, logits=False, resume=(r_layer, x.expand(len(chunk), -1, -1)))
        assert got.final is not None  # no stop_after: the pass reaches its final point
        measured = compare(base.final[0], got.final, n, clean_lm, stats(got.final), position)
        patched = got_pattern[0][:, :n, :n].double().cpu()
        clean = clean_pattern[0][0, :n, :n].double().cpu()
        delta = patched - clean[None]
        measured["pattern_change"] = delta.abs().amax((1, 2))
        measured["pattern_shift"] = 0.5 * delta.abs().sum(-1).mean(-1)
        if cells:
            q_idx, k_idx = torch.tensor(cells).T
            measured["cells"] = patched[:, q_idx, k_idx].mean(-1)
            measured["cells_change"] = measured["cells"] - clean[q_idx, k_idx].mean()
        rows.append({key: value.cpu() for key, value in measured.items()})
        if keep_patterns:
            patterns.append(patched)
        if progress is not None:
            progress(start + len(chunk), len(senders))

    frame = pd.DataFrame(senders, columns=["layer", "head"])
    order = [*PATTERN_MEASURES, *(("cells", "cells_change") if cells else ()),
             *(k for k in rows[0] if k not in PATTERN_MEASURES and not k.startswith("cells"))]
    for key in order:
        frame[key] = torch.cat([r[key] for r in rows]).numpy()
    clean = clean_pattern[0][0, :n, :n].double().cpu()
    tokens = [t.text if hasattr(t, "text") else str(t) for t in enc.tokens[0][:n]] if enc.tokens else []
    clean_cells = float(clean[tuple(torch.tensor(cells).T)].mean()) if cells else None
    return PathPatch(model.name, (r_layer, r_head), into, tokens, frame, clean,
                     torch.cat(patterns) if keep_patterns else None, cells, clean_cells)


def receiver_hooks(net, receiver: tuple[int, int], into: str, patched: torch.Tensor, mask: torch.Tensor, spec: Spec,
                   clean_pattern: list, got_pattern: list) -> dict:
    """Edit hooks on the receiver layer's ``attn.q``, ``attn.k`` and ``attn.v`` (a pass reaches them in that order):
    head r's q, or the k or v it reads, recomputed from ``patched`` ``[B, L, D]`` (copy b: the layer's clean input plus
    sender b's write), every other head clean. The receiver's own pattern is appended to ``got_pattern`` (``[B, L,
    L]``), and its clean one to ``clean_pattern`` once (from copy 0 before the edit)."""
    r_layer, r_head = receiver
    seen: dict = {}

    def on_q(q, name):
        seen["q"], seen["new"] = q, net.qkv(r_layer, patched)  # the norm and projections of x + Δ_b, copy b
        if into == "q":
            q = q.clone()
            q[:, r_head] = seen["new"][0][:, r_head]
        seen["patched q"] = q
        return q

    def on_k(k, name):
        q, group = seen["q"], seen["q"].shape[1] // k.shape[1]
        seen["group"] = group
        if not clean_pattern:
            clean_pattern.append(_pattern(q[:1, r_head], k[:1, r_head // group], mask, spec))
        if into == "q":
            got_pattern.append(_pattern(seen["patched q"][:, r_head], k[:, r_head // group], mask, spec))
            return k
        # k or v: head r reads key/value head r // group; grouped heads stop sharing it, so the others stay clean
        k = repeat_kv(k, group) if group > 1 else k.clone()
        if into == "k":
            k[:, r_head] = seen["new"][1][:, r_head // group]
        got_pattern.append(_pattern(q[:, r_head], k[:, r_head], mask, spec))
        return k

    def on_v(v, name):
        if into == "q":
            return v
        group = seen["group"]
        v = repeat_kv(v, group) if group > 1 else v.clone()
        if into == "v":
            v[:, r_head] = seen["new"][2][:, r_head // group]
        return v

    return {point(r_layer, "attn.q"): on_q, point(r_layer, "attn.k"): on_k, point(r_layer, "attn.v"): on_v}


def _pattern(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, spec) -> torch.Tensor:
    """One head's attention probabilities ``[B, L, L]`` from its q and k ``[B, L, d]``, by the eager backend (the
    pass's own formula and mask)."""
    probs = BACKENDS["eager"](q[:, None], k[:, None], k[:, None], mask, spec).probs
    assert probs is not None  # the eager backend keeps every probability
    return probs[:, 0]
