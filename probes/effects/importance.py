"""Head importance over a data set (Michel, Levy & Neubig 2019, "Are sixteen heads really better than one?").

Each head's output z_h is multiplied by a gate ξ_h (1 in the model as trained). The importance of a head is how
much the loss moves when its gate moves, over the items:

    I_h = mean over items of |∂L/∂ξ_h|   at ξ = 1,   then L2-normalised within each layer.

The loss L: for a decoder with a language-model head, the mean next-token loss of the item. An encoder
without one (minilm) has no loss; its L is r·H, the last hidden states projected on a random direction r
(one per token, drawn from the item's own seed), and I_h = √(mean over K directions of (∂(r·H)/∂ξ_h)²):
an estimate of ‖∂H/∂ξ_h‖, how far the representation moves, to first order, as the head is turned down.

Beside the gradient, the exact effect of zero-ablating each head (the mean change of the same loss, or 1 − cos
of the hidden states for an encoder; :mod:`.ablation`). Both come as one tidy table like the probes':
probe = "importance", label = "gradient: …" or "ablation: …", layer, head, score, baseline (the mean over all
heads), n (items).

Chunks of items give sums (:func:`importance_sums`) that add up exactly; :func:`finish` turns them into the table.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..datasets.catalog import read_items, texts as texts_of
from ..jobs import check_format, checkpoint, checkpointed, digest, report_bad, with_model, write_table
from ..precision import working_dtype
from ..runner import note_cuts
from ..scratch import layer_of, run_with_hooks
from ..seam import reader
from .ablation import ablate_each

PROJECTIONS = 8  # random directions per item for an encoder


def labels(model) -> tuple[str, str]:
    """The table's two labels for this model: gradient and ablation, each naming what it measures."""
    if model.predicts_tokens:
        return "gradient: loss", "ablation: loss"
    return "gradient: hidden", "ablation: hidden_change"


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") % 2**63


def gate_gradients(model, texts: Sequence[str], projections: int = PROJECTIONS) -> torch.Tensor:
    """|∂L/∂ξ| of each text, ``[len(texts), layers, H]`` float64 (see the module's docstring for L)."""
    lm = model.predicts_tokens
    copies = 1 if lm else projections
    enc = model.encode([t for t in texts for _ in range(copies)], truncate=True)
    gates = torch.ones(enc.input_ids.shape[0], model.n_layers, model.n_heads, device=model.device,
                       dtype=working_dtype(model.dtype), requires_grad=True)
    # each layer's head outputs times their gates: an edit hook on every layer's attn.z
    got = run_with_hooks(model, enc, {"attn.z": lambda z, name: z * gates[:, layer_of(name), :, None, None]},
                         logits=lm, grad=True)
    assert got.final is not None  # no stop_after: the pass reaches its final point
    mask = enc.attention_mask.to(got.final.device).bool()
    if lm:
        ids = enc.input_ids.to(got.final.device)
        targets = ids[:, 1:].masked_fill(~mask[:, 1:], -100)  # padding predicts nothing
        assert got.logits is not None  # lm: the model predicts tokens (a language-model head), logits asked for
        losses = torch.nn.functional.cross_entropy(got.logits[:, :-1].transpose(1, 2), targets, reduction="none",
                                                   ignore_index=-100)
        counts = mask[:, 1:].sum(-1).clamp_min(1)
        (losses.sum(-1) / counts).sum().backward()  # each item's mean loss; its gates see only its own
        assert gates.grad is not None  # backward() reached the gates: every layer's z is multiplied by them
        return gates.grad.double().abs()
    r = torch.zeros(got.final.shape, dtype=got.final.dtype)
    for i, text in enumerate(texts):  # each item's directions from its own seed: the same whatever it is batched with
        n = int(mask[i * copies].sum())
        gen = torch.Generator().manual_seed(_seed(text))
        r[i * copies:(i + 1) * copies, :n] = torch.randn(copies, n, got.final.shape[-1], generator=gen)
    r = r.to(got.final.device)
    (got.final * r).sum().backward()
    assert gates.grad is not None  # backward() reached the gates: every layer's z is multiplied by them
    grads = gates.grad.double().view(len(texts), copies, model.n_layers, model.n_heads)
    return grads.pow(2).mean(1).sqrt()


@reader
def importance_sums(model, texts: Sequence[str], batch_size: int = 8, projections: int = PROJECTIONS,
                    ablation: bool = True, progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Sums over ``texts`` (label, layer, head, total, n): chunks of a data set add up to the whole exactly."""
    grad_label, ablation_label = labels(model)
    measure = ablation_label.split(": ")[1]
    grad_total = torch.zeros(model.n_layers, model.n_heads, dtype=torch.float64)
    ablation_total = torch.zeros_like(grad_total)
    n = 0
    for start in range(0, len(texts), batch_size):
        batch = [t for t in texts[start:start + batch_size] if t.strip()]
        if batch:
            grad_total += gate_gradients(model, batch, projections).sum(0).cpu()
            if ablation:
                for text in batch:
                    frame = ablate_each(model, text, truncate=True)
                    ablation_total += torch.tensor(frame[measure].to_numpy(), dtype=torch.float64).view_as(
                        ablation_total)
            n += len(batch)
        if progress is not None:
            progress(len(texts[start:start + batch_size]))
    layer, head = np.meshgrid(range(model.n_layers), range(model.n_heads), indexing="ij")
    rows = [pd.DataFrame({"label": grad_label, "layer": layer.ravel(), "head": head.ravel(),
                          "total": grad_total.numpy().ravel(), "n": n})]
    if ablation:
        rows.append(pd.DataFrame({"label": ablation_label, "layer": layer.ravel(), "head": head.ravel(),
                                  "total": ablation_total.numpy().ravel(), "n": n}))
    return pd.concat(rows, ignore_index=True)


def finish(sums: Sequence[pd.DataFrame] | pd.DataFrame) -> pd.DataFrame:
    """The importance table from one or more chunks' sums: mean over items; the gradient L2-normalised per layer."""
    raw = pd.concat(list(sums), ignore_index=True) if not isinstance(sums, pd.DataFrame) else sums
    raw = raw.groupby(["label", "layer", "head"], as_index=False, sort=False)[["total", "n"]].sum()
    raw["score"] = raw["total"] / raw["n"].clip(lower=1)
    grad = raw["label"].str.startswith("gradient")
    norms = raw[grad].groupby("layer")["score"].transform(lambda s: np.sqrt((s ** 2).sum()))
    raw.loc[grad, "score"] = raw.loc[grad, "score"] / norms.where(norms > 0, 1.0)
    raw["baseline"] = raw.groupby("label")["score"].transform("mean")
    raw["probe"] = "importance"
    return raw[["probe", "label", "layer", "head", "score", "baseline", "n"]].sort_values(
        ["label", "layer", "head"], ignore_index=True)


@reader
def importance(model, texts: Sequence[str], batch_size: int = 8, projections: int = PROJECTIONS,
               ablation: bool = True, progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """The importance table of every head over ``texts`` (each cut to the context window)."""
    return finish(importance_sums(model, texts, batch_size, projections, ablation, progress))


def code_version() -> str:
    """A digest of the code importance is computed by (this package, the from-scratch networks): a checkpoint
    written by other code is not reused."""
    root = Path(__file__).resolve().parent.parent
    files = sorted((root / "effects").glob("*.py")) + sorted((root / "scratch").glob("*.py"))
    return hashlib.sha256(b"".join(f.name.encode() + f.read_bytes() for f in files)).hexdigest()[:16]


def profile_importance(model, data: str, limit: int | None, out, batch_size: int = 8, checkpoint_every: int = 32,
                       projections: int = PROJECTIONS, ablation: bool = True, progress_factory=None,
                       notify: Callable[[str], None] | None = None, strict: bool = False) -> pd.DataFrame:
    """``python -m probes importance``: the table over ``data``'s sentences (the first ``limit``), checkpointed
    every ``checkpoint_every`` items under ``OUT.partial/`` like ``profile`` (a rerun resumes from the chunks
    computed from the same sentences, model, tokenizer, options and code), written atomically with the model's
    name."""
    out = Path(out)
    check_format(out)
    items = read_items(data)
    report_bad("importance", data, list(getattr(items, "bad", [])), len(items), out, strict, notify)
    texts = [t for t in texts_of(items) if t.strip()][:limit]
    note_cuts("importance", model, data, texts, notify)
    print_ = {"data": digest(texts), "model": model.fingerprint(), "tokenizer": model.tokenizer_fingerprint(),
              "code": code_version(), "options": digest(["importance", checkpoint_every, projections, ablation])}
    folder = checkpoint(out.with_name(out.name + ".partial"), "importance", print_, notify)
    bar = progress_factory(len(texts), "importance") if progress_factory else None

    def sums(chunk, step):  # on a served model too: its server's progress comes back through the seam
        return importance_sums(model, chunk, batch_size, projections, ablation, step)

    parts = checkpointed(folder, texts, checkpoint_every, sums, bar)
    frame = with_model(finish(parts), model)
    write_table(frame, out)
    shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
    return frame
