"""Interventions on heads: zero-ablation, mean-ablation and activation patching, one head or many at a time.

A head's output at a position is z = Σ_j α_ij·v_j, the weighted sum of the values (``[d]``, before the output
projection W_O mixes the heads back into the residual stream). An intervention replaces z of some heads at
every position and lets the rest of the network run on:

* ``zero``: z = 0 (the head writes nothing but the projection's bias);
* ``mean``: z = the head's mean output over the real tokens of a reference set of texts;
* ``patch``: z = the head's output on another input of the same length (activation patching).

Every single-head ablation of a text runs as batched passes: row b of a batch is a copy of the text with
head b ablated (:func:`ablate_each`), which is many times faster than one pass per head
(``benchmarks/ablation.py``). An ablation is an edit hook on each layer's ``attn.z`` (:func:`ablation_hooks`, on
the from-scratch pass :func:`probes.scratch.run_with_hooks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pandas as pd
import torch
import torch.nn.functional as F

from ..attention_math import soft_cap
from ..errors import BadOption, EmptyInput
from ..head_index import check_position
from ..models import Encoding
from ..precision import working_dtype
from ..scratch import Ran, build, point, run_with_hooks
from ..seam import reader
from .measures import ABOUT, HIDDEN_MEASURES, LM_MEASURES, LMStats, compare, lm_network, lm_stats

HOWS = ("zero", "mean", "patch")
AT_POSITION = ("token_change", "logit_diff")  # the measures that read one position only
WORK_BUDGET = 256 * 2**20  # bytes one pass of edited copies may hold (their activations: :func:`copy_bytes`)
MAX_BATCH = 64  # copies per pass at most: on a CPU bigger passes are no faster


def head_means(model, texts: Sequence[str], batch_size: int = 16) -> torch.Tensor:
    """Each head's mean output z over the real tokens of ``texts`` (each cut to the context window):
    ``[layers, H, d]`` in the model's working precision (fp32; float64 for a float64 model), what mean-ablation
    writes."""
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise EmptyInput("the reference set for mean-ablation has no text")
    total: torch.Tensor | None = None
    count = 0
    for start in range(0, len(texts), batch_size):
        enc = model.encode(texts[start:start + batch_size], truncate=True)
        zs = run_with_hooks(model, enc, logits=False, keep=["attn.z"]).each("attn.z")
        real = enc.attention_mask.to(zs[0].device).bool()  # [B, L]
        sums = torch.stack([z.transpose(1, 2)[real].double().sum(0) for z in zs])  # [layers, H, d]
        total = sums if total is None else total + sums
        count += int(real.sum())
    assert total is not None  # texts is not empty: at least one batch was summed
    return (total / count).to(working_dtype(model.dtype))


def ablation_hooks(rows: Sequence[Sequence[tuple[int, int]]], how: str = "zero", means: torch.Tensor | None = None,
                   patch: list[torch.Tensor] | None = None) -> dict:
    """The hooks (:func:`probes.scratch.run_with_hooks`) for a batch whose row b ablates the heads ``rows[b]`` (a row
    may ablate none: the clean copy): an edit of ``attn.z`` in each layer with an ablated head. ``means``:
    :func:`head_means`; ``patch``: the other input's z of every layer (``[1, H, L, d]``)."""
    if how not in HOWS:
        raise BadOption(f"unknown ablation {how!r}: choose one of {', '.join(HOWS)}")
    if how == "mean" and means is None or how == "patch" and patch is None:
        raise ValueError(f"{how}-ablation needs {'means' if how == 'mean' else 'the other input’s z'}")
    by_layer: dict[int, tuple[list[int], list[int]]] = {}
    for b, heads in enumerate(rows):
        for layer, head in heads:
            batch, which = by_layer.setdefault(layer, ([], []))
            batch.append(b)
            which.append(head)

    def edit(layer: int, z: torch.Tensor) -> torch.Tensor:  # z [B, H, L, d], fresh from the attention: written over
        b, h = (torch.tensor(x, device=z.device) for x in by_layer[layer])
        if how == "zero":
            z[b, h] = 0.0
        elif how == "mean":
            assert means is not None  # checked above: mean-ablation has its means
            z[b, h] = means[layer, h].to(z)[:, None, :]  # [k, 1, d]: the same mean at every position
        else:
            assert patch is not None  # checked above: patching has the other input's z
            z[b, h] = patch[layer][0, h].to(z)  # [k, L, d]: the other input's output at each position
        return z

    return {point(layer, "attn.z"): lambda z, name, layer=layer: edit(layer, z) for layer in by_layer}


@dataclass
class Clean:
    """One text's clean pass: what every edited copy is compared with."""

    enc: Encoding
    n: int  # real tokens
    out: Ran  # without logits (the next-token measures read them from the last hidden state, measures.lm_stats),
    # keeping each layer's input (resid_pre): where a batch of edited copies resumes
    lm: bool  # the next-token measures apply and were asked for


def clean_pass(model, text: str, truncate: bool = False, logits: bool = True, upto: int | None = None) -> Clean:
    """The clean pass of ``text``; ``logits``: the next-token measures will be asked for (when the model has a
    language-model head). ``upto``: only the first ``upto`` tokens, when the text has more (what a causal model
    computes at a position never reads a later token, so a measure at one position needs nothing after it)."""
    enc = model.encode(text, truncate=truncate)  # an empty text is refused here (EmptyInput)
    if upto is not None and 0 < upto < int(enc.attention_mask.sum()):
        cut = lambda t: None if t is None else t[:, :upto]  # noqa: E731 (one text: no padding)
        enc = replace(enc, input_ids=cut(enc.input_ids), attention_mask=cut(enc.attention_mask),
                      token_type_ids=cut(enc.token_type_ids), tokens=[row[:upto] for row in enc.tokens])
    return Clean(enc, int(enc.attention_mask.sum()), run_with_hooks(model, enc, logits=False, keep=["resid_pre"]),
                 logits and model.predicts_tokens)


def check_measures(model, measures: Sequence[str] | None,
                   targets: tuple[int, int] | None = None) -> tuple[str, ...] | None:
    """The measures asked for, each once and each one that applies to ``model`` (None: every one that applies)."""
    if measures is None:
        return None
    asked = tuple(dict.fromkeys(measures))
    usable = (LM_MEASURES if model.predicts_tokens else ()) + HIDDEN_MEASURES
    if not asked:
        raise BadOption(f"no measure asked for: choose one or more of {', '.join(usable)}")
    for name in asked:
        if name not in ABOUT:
            raise BadOption(f"unknown measure {name!r}: choose one of {', '.join(usable)}")
        if name not in usable:
            raise BadOption(f"{name} needs a language-model head, which {model.name} has not: choose one of "
                            f"{', '.join(usable)}")
    if "logit_diff" in asked and targets is None:
        raise BadOption("logit_diff needs two target tokens: the change of logit(target) − logit(other target)")
    return asked


def replacements(model, how: str, clean: Clean, other: str | None = None,
                 reference: Sequence[str] | None = None, truncate: bool = False) -> dict:
    """What ``how`` writes into an ablated head: ``{"means": …}`` or ``{"patch": …}`` (none for zero);
    ``truncate``: the other text cut to the context window, as the clean one was."""
    if how == "mean":
        if not reference:
            raise BadOption("mean-ablation needs a reference set of texts to average each head's output over")
        return {"means": head_means(model, reference)}
    if how == "patch":
        if not other:
            raise BadOption("patching needs the other text (--other): the heads' outputs are taken from it")
        enc = model.encode(other, truncate=truncate)
        if enc.input_ids.shape[1] != clean.enc.input_ids.shape[1]:
            raise BadOption(f"patching needs two texts of the same length in tokens: this one has "
                            f"{clean.enc.input_ids.shape[1]}, the other {enc.input_ids.shape[1]} on {model.name} "
                            "(change words for words of one token each)")
        return {"patch": run_with_hooks(model, enc, logits=False, keep=["attn.z"]).each("attn.z")}
    if how != "zero":
        raise BadOption(f"unknown ablation {how!r}: choose one of zero, mean, patch")
    return {}


def copy_bytes(model, length: int) -> int:
    """Bytes one edited copy adds to a pass over ``length`` tokens, in the model's dtype: its residual stream and the
    activations of one layer at a time (about a dozen vectors of the model's width: norm, q, k, v, z, head outputs;
    three of the MLP's), and its attention scores, probabilities and mask (``heads × length²`` each). No logits: the
    next-token measures make them a few positions at a time (:func:`probes.effects.measures.lm_stats`)."""
    config, size = model.config, torch.empty((), dtype=model.dtype).element_size()
    width = config.hidden_size
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * width
    return size * length * (12 * width + 3 * inner) + size * 3 * model.n_heads * length * length


def _copies(model, clean: Clean) -> int:
    return max(1, min(MAX_BATCH, WORK_BUDGET // copy_bytes(model, clean.enc.input_ids.shape[1])))


def run_rows(model, clean: Clean, rows: list[list[tuple[int, int]]], how: str = "zero", position: int | None = None,
             targets: tuple[int, int] | None = None, batch: int | None = None, share: bool = True,
             measures: Sequence[str] | None = None, progress: Callable[[int, int], None] | None = None,
             finals: list[torch.Tensor] | None = None, **writes) -> dict[str, torch.Tensor]:
    """Measures of each row's ablation (``rows[b]``: the heads ablated together in copy b), in batches of
    ``batch`` copies (default: as many as :data:`WORK_BUDGET` holds, :func:`copy_bytes`). Nothing before a row's
    first ablated layer changes, so a batch starts from the clean pass's input of its first edited layer: rows of one
    layer run together, and only the layers from it on are computed again (``share=False``: every copy runs every
    layer).
    ``measures``: only these (default: every one that applies; the copies' next-token statistics are read only
    when one needs them and the clean pass asked for them). ``progress(done, total)``: called after each row is
    measured. ``finals`` (a list): each batch's last hidden states ``[k, n, D]`` are appended to it (what every
    measure reads, :class:`EachAblated`)."""
    assert clean.out.final is not None  # clean_pass runs to the end: its final state is always kept
    size = batch or _copies(model, clean)
    lm = clean.lm and (measures is None or any(name in LM_MEASURES for name in measures))
    ids = clean.enc.input_ids[0].to(clean.out.final.device)
    unembedding = lm_network(model)[1] if lm else None  # lm: clean.lm, so model.predicts_tokens
    softcap = getattr(build(model), "logit_softcap", None)  # Gemma 2: the logits are soft-capped
    stats = lambda hidden: lm_stats(ids, clean.n, position, targets, hidden=hidden,  # noqa: E731
                                    unembedding=unembedding, softcap=softcap) if lm else None
    clean_lm = stats(clean.out.final)
    parts: dict[str, list[torch.Tensor]] = {}
    first_layer = [min((layer for layer, _ in heads), default=model.n_layers) for heads in rows]
    chunks, start = [], 0
    while start < len(rows):  # consecutive rows that start at the same layer, at most `size` of them
        end = start + 1
        while end < len(rows) and end - start < size and first_layer[end] == first_layer[start]:
            end += 1
        chunks.append((start, end))
        start = end
    for start, end in chunks:
        chunk = rows[start:end]
        first = min(first_layer[start:end])
        enc = clean.enc
        k = len(chunk)  # the copies share the text's memory (expand)
        copies = replace(enc, input_ids=enc.input_ids.expand(k, -1), attention_mask=enc.attention_mask.expand(k, -1),
                         token_type_ids=None if enc.token_type_ids is None else enc.token_type_ids.expand(k, -1))
        resume = None
        if share and 0 < first < model.n_layers:
            resume = (first, clean.out[point(first, "resid_pre")].expand(len(chunk), -1, -1))
        got = run_with_hooks(model, copies, ablation_hooks(chunk, how, **writes), logits=False, resume=resume)
        assert got.final is not None  # no stop_after: the pass reaches its final point
        if finals is not None:
            finals.append(got.final[:, :clean.n])
        measured = compare(clean.out.final[0], got.final, clean.n, clean_lm, stats(got.final), position, measures)
        for key, value in measured.items():
            parts.setdefault(key, []).append(value.cpu())
        if progress is not None:
            for done in range(start + 1, end + 1):
                progress(done, len(rows))
    return {key: torch.cat(value) for key, value in parts.items()}


@reader
def ablate(model, text: str, heads: list[tuple[int, int]], how: str = "zero", other: str | None = None,
           reference: Sequence[str] | None = None, position: int | None = None,
           targets: tuple[int, int] | None = None, truncate: bool = False) -> dict[str, float]:
    """Ablate ``heads`` together on ``text``; each measure's change (:mod:`probes.effects.measures`).
    ``truncate``: cut the text (and ``other``) to the context window instead of refusing a longer one."""
    clean = clean_pass(model, text, truncate=truncate)
    check_position(position, clean.n)
    got = run_rows(model, clean, [list(heads)], how, position, targets, **replacements(model, how, clean, other,
                                                                                         reference, truncate))
    return {key: float(value[0]) for key, value in got.items()}


@reader
def ablate_each(model, text: str, how: str = "zero", other: str | None = None,
                reference: Sequence[str] | None = None, position: int | None = None,
                targets: tuple[int, int] | None = None, batched: bool = True, truncate: bool = False,
                measures: Sequence[str] | None = None,
                progress: Callable[[int, int], None] | None = None, batch: int | None = None) -> pd.DataFrame:
    """Every single-head ablation of ``text``: one row per (layer, head) with each measure's change. Batched:
    row b of each pass ablates head b, from the layer it is in, at most ``batch`` copies a pass (None: as many as
    :data:`WORK_BUDGET` holds; fewer make ``progress`` come more often, which an app that stops at a step wants);
    else one whole pass per head (the same numbers up to float rounding: the naive way, for the benchmark).
    ``truncate``: cut the text to the context window.

    ``measures``: compute only these columns (default: every measure that applies), the same numbers as in the
    full table up to float rounding. Only loss, top_changed and logit_diff need the copies' logits (a vocabulary's
    worth per token); on a causal model, token_change and logit_diff at ``position`` read nothing after it, so
    the copies stop there. ``progress(done, total)`` is called after each head (``done`` = 1 … ``total``)."""
    measures = check_measures(model, measures, targets)
    logits = measures is None or any(name in LM_MEASURES for name in measures)
    at_one = measures is not None and set(measures) <= set(AT_POSITION) and position is not None
    # (not when patching: the other text's outputs would have to be cut the same way)
    upto = position + 1 if at_one and position is not None and model.is_causal and how != "patch" else None
    clean = clean_pass(model, text, truncate=truncate, logits=logits, upto=upto)
    check_position(position, clean.n)
    writes = replacements(model, how, clean, other, reference, truncate)
    heads = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
    if batch is not None and batch < 1:
        raise BadOption(f"batch must be at least 1 copy a pass, not {batch}")
    got = run_rows(model, clean, [[h] for h in heads], how, position, targets, batch=batch if batched else 1,
                   share=batched, measures=measures, progress=progress, **writes)
    frame = pd.DataFrame(heads, columns=["layer", "head"])
    for key, value in got.items():
        frame[key] = value.numpy()
    return frame


KEEP_BUDGET = 256 * 2**20  # bytes of last hidden states :func:`ablate_each_kept` keeps at most (every head's copy)


def kept_bytes(model, n: int) -> int:
    """Bytes :func:`ablate_each_kept` keeps for a text of ``n`` tokens: every head's copy's last hidden states."""
    size = torch.empty((), dtype=model.dtype).element_size()
    return model.n_layers * model.n_heads * n * model.config.hidden_size * size


@dataclass
class EachAblated:
    """Every single-head ablation of one text, kept: each copy's last hidden state (``finals`` ``[heads, n, D]``, in
    the order of ``heads``) and the clean pass. Every measure at every position derives from them
    (:meth:`frame`) without running the copies again: a page that changes its measure or its query token reads them
    again. The next-token measures make each copy's logits from its last hidden state (as the run would have)."""

    model: object
    clean: Clean
    heads: list[tuple[int, int]]
    finals: torch.Tensor

    def frame(self, measures: Sequence[str] | None = None, position: int | None = None) -> pd.DataFrame:
        """:func:`ablate_each`'s table (layer, head, one column per measure; None: every one that applies) at
        ``position`` (the token ``token_change`` reads; default the last)."""
        model = self.model
        measures = check_measures(model, measures)
        check_position(position, self.clean.n)
        lm = self.clean.lm and (measures is None or any(name in LM_MEASURES for name in measures))
        final = self.clean.out.final
        assert final is not None  # clean_pass runs to the end
        ids = self.clean.enc.input_ids[0].to(final.device)
        clean_lm = copies_lm = None
        if lm:
            unembedding = lm_network(model)[1]
            softcap = getattr(build(model), "logit_softcap", None)
            clean_lm = lm_stats(ids, self.clean.n, position, None, hidden=final, unembedding=unembedding,
                                softcap=softcap)
            copies_lm = _copies_stats(ids, self.finals, unembedding, softcap)
        parts: dict[str, list[torch.Tensor]] = {}
        for start in range(0, len(self.heads), MAX_BATCH):
            rows = self.finals[start:start + MAX_BATCH]
            some = None if copies_lm is None else LMStats(copies_lm.losses[start:start + MAX_BATCH],
                                                          copies_lm.top[start:start + MAX_BATCH], None)
            got = compare(final[0], rows, self.clean.n, clean_lm, some, position, measures)
            for key, value in got.items():
                parts.setdefault(key, []).append(value.cpu())
        frame = pd.DataFrame(self.heads, columns=["layer", "head"])
        for key, pieces in parts.items():
            frame[key] = torch.cat(pieces).numpy()
        return frame


LOGIT_ROWS = 256  # positions of the kept copies whose logits are made at once (a vocabulary each, and two more in
# float64 for the loss): the unembedding is read once per this many positions, not once per copy


def _copies_stats(ids: torch.Tensor, finals: torch.Tensor, unembedding: torch.Tensor,
                  softcap: float | None) -> LMStats:
    """:func:`~probes.effects.measures.lm_stats`'s losses and top predictions of every kept copy ``[B, n, D]``, their
    positions taken :data:`LOGIT_ROWS` at a time across copies (the same numbers: each position's logits are its
    own)."""
    b, n, d = finals.shape
    flat = finals.reshape(b * n, d)
    nexts = torch.cat([ids[1:n], ids[:1]]).repeat(b)  # what each position predicts (a copy's last: nothing)
    losses = torch.empty(b * n, dtype=torch.float64, device=finals.device)
    top = torch.empty(b * n, dtype=torch.long, device=finals.device)
    with torch.inference_mode():
        for start in range(0, b * n, LOGIT_ROWS):
            end = min(start + LOGIT_ROWS, b * n)
            logits = soft_cap(F.linear(flat[start:end], unembedding), softcap)
            top[start:end] = logits.argmax(-1)
            losses[start:end] = F.cross_entropy(logits.double(), nexts[start:end], reduction="none")
    return LMStats(losses.reshape(b, n)[:, :n - 1], top.reshape(b, n), None)


def ablate_each_kept(model, text: str, how: str = "zero", reference: Sequence[str] | None = None,
                     progress: Callable[[int, int], None] | None = None, batch: int | None = None,
                     truncate: bool = False) -> EachAblated:
    """Every single-head ablation of ``text`` (``how``: zero or mean; see :func:`ablate_each`), kept as each copy's
    last hidden state (:class:`EachAblated`): one run gives every measure at every position, the same numbers as
    :func:`ablate_each` (up to float rounding: the copies are the same passes). Refused past
    :data:`KEEP_BUDGET` bytes of kept states (:func:`kept_bytes`): use :func:`ablate_each` with the measure wanted.
    Here only (not a reader: what it keeps is the model's own tensors), so a model held elsewhere asks
    :func:`ablate_each`."""
    if how not in ("zero", "mean"):
        raise BadOption(f"unknown ablation {how!r} to keep: choose zero or mean")
    clean = clean_pass(model, text, truncate=truncate, logits=True)
    if kept_bytes(model, clean.n) > KEEP_BUDGET:
        raise BadOption(f"keeping every head's copy of {clean.n:,} tokens would take "
                        f"{kept_bytes(model, clean.n) / 2**20:,.0f} MiB (at most {KEEP_BUDGET // 2**20} MiB): ask "
                        "ablate_each for the measure wanted")
    if batch is not None and batch < 1:
        raise BadOption(f"batch must be at least 1 copy a pass, not {batch}")
    writes = replacements(model, how, clean, None, reference, truncate)
    heads = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
    finals: list[torch.Tensor] = []
    run_rows(model, clean, [[h] for h in heads], how, batch=batch, measures=["hidden_change"], progress=progress,
             finals=finals, **writes)
    return EachAblated(model, clean, heads, torch.cat(finals))
