"""Parity: does our from-scratch forward pass compute what Hugging Face computes?

Two Traces of the same encoding are compared over real tokens only (padding rows and columns are
left out): max |Δ| of the attention probabilities per layer and head, of the hidden states per
layer, and of the logits. A lazy Trace (scratch ``sdpa``/``flash``) is compared through the
probabilities it recovers from its logsumexp. The tolerances live here and nowhere else.

**Two verdicts.** In float64 (``check(..., dtype="float64")``: Hugging Face's model cast, and ours) the two
passes are the same function when they agree to ≤ 1e-10: no CPU's summation order moves a float64 result
by more than ~1e-14, so this verdict holds on every machine. In fp32 (what the app shows) they differ by
rounding, which depends on the CPU's vector kernels and thread count; each fp32 figure is judged against
an error model, ``eps`` × the longest sum the figure went through, in units of the figure's own scale.

**Scaled figures.** Hidden states and logits are held to their tolerance *in units of their scale*: max |Δ|
divided by the largest |value| of the reference (that layer's hidden state; the logits) when it exceeds 1
(so for values within ±1 it is the plain max |Δ|). Modern decoders carry "massive activations" in their
residual stream (SmolLM2 reaches 27,000, where one fp32 step is 0.002) and logits in the tens: no kernel
that sums in another order can match them to an absolute 1e-4, while a wrong layer is off by far more than
1e-4 of the scale. The raw max |Δ| is reported beside each; the verdict reads only the scaled figure.
Probabilities lie in [0, 1]: their scale is 1. :func:`massive_activations` reads those values off one Trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

from . import runner
from .errors import BadOption, UnsupportedModel
from .precision import FLOAT64_MAX_BYTES, upcast
from .scratch import resolve_backend
from .seam import reader
from .trace import Trace

if TYPE_CHECKING:
    from .models import LocalModel
    from .seam import TraceLike

EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7: one fp32 rounding, relative

# fp32: two correct passes differ only where they sum in another order (another kernel, vector width or thread
# count). Measured on minilm and SmolLM2, 42-261 tokens, ATEN_CPU_CAPABILITY default/avx2/avx512, 1-2 threads:
# attention ≤ 7.7e-6 (≤ 0.3 of its bound), hidden ≤ 2.8e-6 and logits ≤ 3.0e-6 of their scale (≤ 0.03).
TOLERANCES = {
    # a probability (scale 1) is exp(s − lse), and lse sums the row's L keys: eps × L, never under eps × 128
    # (1.5e-5, what the d_k ≤ 128 products of one score can round to): `attention_tolerance(L)`
    "attention": EPS32 * 128,
    # of the layer's scale: a layer's output sums up to ~840 products (D, d_mlp) per number: eps × 840 ≈ 1e-4
    "hidden": 1e-4,
    # of the logits' scale: a logit is one D-long dot product of the last hidden state, as above
    "logits": 1e-4,
}
# float64: the same function computes the same numbers up to float64 rounding (measured ≤ 1.2e-14 on SmolLM2's
# 30 layers, ≤ 2.5e-13 of the logits' scale); 1e-10 leaves 10⁴ of room and is still 10³ below fp32's 1.2e-7,
# so a single fp32 step anywhere (a cast down, a table in fp32) fails it.
FLOAT64_TOLERANCES = {"attention": 1e-10, "hidden": 1e-10, "logits": 1e-9}
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def attention_tolerance(length: int) -> float:
    """fp32 attention tolerance for rows of ``length`` keys: eps × max(length, 128) (see ``TOLERANCES``)."""
    return EPS32 * max(length, 128)


def tolerances(dtype: torch.dtype, length: int) -> dict[str, float]:
    """The tolerances for two passes computed in ``dtype`` over ``length`` tokens."""
    if dtype == torch.float64:
        return dict(FLOAT64_TOLERANCES)
    return dict(TOLERANCES, attention=attention_tolerance(length))


def dtype_of(name: str | torch.dtype) -> torch.dtype:
    """``"float32"`` or ``"float64"`` (or the torch dtype) -> the torch dtype; anything else is refused."""
    if isinstance(name, torch.dtype) and name in DTYPES.values():
        return name
    if name not in DTYPES:
        raise BadOption(f"unknown dtype {name!r}: choose float32 (what the app shows) or float64 (the proof)")
    return DTYPES[name]


@dataclass
class LayerParity:
    layer: int
    attention_max_abs_diff: float
    per_head: list[float]
    hidden_max_abs_diff: float
    hidden_max_rel_diff: float  # max |Δ| / max(1, max |reference|) of this layer's hidden state


@dataclass
class ParityReport:
    model: str
    reference: str
    candidate: str
    backend: str  # the kernel that ran on the candidate side
    note: str  # e.g. why the backend asked for did not run
    tokens: list[str]
    passed: bool  # every scaled figure within its tolerance
    dtype: str  # "float32" (rounding judged by the error model) or "float64" (the proof)
    tolerance: dict[str, float]
    attention_max_abs_diff: float  # probabilities: their scale is 1
    hidden_max_abs_diff: float
    hidden_max_rel_diff: float  # ÷ max(1, max |reference|) of each layer (the verdict reads this)
    logits_max_abs_diff: float | None
    logits_max_rel_diff: float | None  # ÷ max(1, max |reference logit|) (the verdict reads this)
    qkv_max_abs_diff: float | None  # reported, not judged: q, k and v differ where the attention does
    per_layer: list[LayerParity]

    @property
    def proven(self) -> bool:
        """A float64 pass: the two computations are the same function, on any machine."""
        return self.passed and self.dtype == "float64"

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def worst_head(self) -> tuple[int, int, float]:
        """(layer, head, max |Δ|) of the head that differs most."""
        return max(((lp.layer, h, d) for lp in self.per_layer for h, d in enumerate(lp.per_head)),
                   key=lambda t: t[2])

    def to_text(self) -> str:
        tol = self.tolerance
        verdict = "PASS" if self.passed else "FAIL"
        layer, head, worst = self.worst_head()
        logits = ("n/a (no LM head)" if self.logits_max_abs_diff is None else
                  f"{self.logits_max_abs_diff:.2e}, {self.logits_max_rel_diff:.2e} of their scale  "
                  f"(tolerance {tol['logits']:.0e} of the scale)")
        what = ("float64: proven the same function" if self.proven else "float64" if self.dtype == "float64"
                else "float32: within rounding" if self.passed else "float32")
        lines = [
            f"{verdict}  {self.reference} vs {self.candidate} on {self.model}, {len(self.tokens)} tokens, {what}"
            + (f" (kernel: {self.backend})" if self.backend not in ("", "eager") else ""),
            *([f"  note: {self.note}"] if self.note else []),
            f"  attention max |Δ| {self.attention_max_abs_diff:.2e}  (tolerance {tol['attention']:.1e}; "
            f"worst head {layer}.{head})",
            f"  hidden    max |Δ| {self.hidden_max_abs_diff:.2e}, {self.hidden_max_rel_diff:.2e} of the layer's "
            f"scale  (tolerance {tol['hidden']:.0e} of the scale)",
            f"  logits    max |Δ| {logits}",
            "  layer  attention   hidden  (of the scale)",
        ]
        for lp in self.per_layer:
            lines.append(f"  {lp.layer:5d}  {lp.attention_max_abs_diff:.2e}  {lp.hidden_max_abs_diff:.2e}  "
                         f"({lp.hidden_max_rel_diff:.2e})")
        return "\n".join(lines)


def _max(x: torch.Tensor) -> float:
    return float(x.max()) if x.numel() else 0.0


def _scaled_diff(reference: torch.Tensor, candidate: torch.Tensor, real: torch.Tensor) -> tuple[float, float]:
    """max |Δ| over the real tokens, and the same divided by the reference's scale, max(1, max |reference|)."""
    diff = _max((reference - candidate).abs()[real])
    return diff, diff / max(1.0, _max(reference.abs()[real]))


@reader
def compare(reference: Trace, candidate: Trace, tolerance: dict[str, float] | None = None,
            progress: Callable[[int, int], None] | None = None) -> ParityReport:
    """Compare two Traces of the same input, layer by layer and head by head. The tolerances follow the
    traces' precision (:func:`tolerances`); ``tolerance`` overrides some of them. ``progress(done, total)``: called
    after each layer."""
    dtype = reference.hidden_states[0].dtype
    if candidate.hidden_states[0].dtype != dtype:
        raise ValueError(f"the two traces were computed in different precisions ({dtype} and "
                         f"{candidate.hidden_states[0].dtype})")
    if not torch.equal(reference.input_ids, candidate.input_ids):
        raise ValueError("the two traces were run on different inputs")
    if reference.n_layers != candidate.n_layers or reference.n_heads != candidate.n_heads:
        raise ValueError(
            f"the traces have different shapes: {reference.n_layers}×{reference.n_heads} vs "
            f"{candidate.n_layers}×{candidate.n_heads} layers × heads"
        )
    real = reference.attention_mask  # [B, L]
    tol = dict(tolerances(dtype, int(real.sum(-1).max())), **(tolerance or {}))
    pairs = (real[:, :, None] & real[:, None, :])[:, None]  # [B, 1, L, L]: real query and real key

    per_layer = []
    for layer in range(reference.n_layers):  # a lazy trace recovers each layer from its logsumexp
        diff = (upcast(reference.layer_attention(layer)) - upcast(candidate.layer_attention(layer))).abs()
        diff = diff.masked_fill(~pairs, 0.0)
        per_head = diff.amax(dim=(0, 2, 3)).tolist()
        hidden = _scaled_diff(reference.hidden_states[layer + 1], candidate.hidden_states[layer + 1], real)
        per_layer.append(LayerParity(layer, max(per_head), per_head, *hidden))
        if progress is not None:
            progress(layer + 1, reference.n_layers)

    hidden_all = [_scaled_diff(a, b, real)
                  for a, b in zip(reference.hidden_states, candidate.hidden_states, strict=True)]
    hidden_abs, hidden_rel = max(h[0] for h in hidden_all), max(h[1] for h in hidden_all)
    logits = logits_rel = None
    if reference.logits is not None and candidate.logits is not None:
        logits, logits_rel = _scaled_diff(reference.logits, candidate.logits, real)
    qkv = None
    if reference.q is not None or reference.qkv_of is not None:
        qkv = max(
            _max((a - b).abs().transpose(1, 2)[real])
            for layer in range(reference.n_layers)
            for a, b in zip(reference.layer_qkv(layer), candidate.layer_qkv(layer), strict=True)
        )
    attention = max(lp.attention_max_abs_diff for lp in per_layer)
    passed = attention <= tol["attention"] and hidden_rel <= tol["hidden"] and (
        logits_rel is None or logits_rel <= tol["logits"])
    if (reference.logits is None) != (candidate.logits is None):
        passed = False  # one path has an LM head and the other does not: not the same model
    return ParityReport(
        model=reference.model,
        reference=reference.source,
        candidate=candidate.source,
        backend=candidate.backend,
        note=candidate.note,
        tokens=reference.token_strings(0),
        passed=bool(passed),
        dtype=str(dtype).removeprefix("torch."),
        tolerance=tol,
        attention_max_abs_diff=attention,
        hidden_max_abs_diff=hidden_abs,
        hidden_max_rel_diff=hidden_rel,
        logits_max_abs_diff=logits,
        logits_max_rel_diff=logits_rel,
        qkv_max_abs_diff=qkv,
        per_layer=per_layer,
    )


def in_dtype(model: LocalModel, dtype: str | torch.dtype = "float32", backend: str = "eager",
             float64_limit: int | None = None) -> LocalModel:
    """``model`` ready for a parity check in ``dtype``: itself for float32; for float64 a float64 copy (refused,
    with the reason, for a backend that cannot compute in float64 or a copy over ``float64_limit`` bytes)."""
    dtype = dtype_of(dtype)
    if dtype == model.dtype:
        return model
    resolve_backend(backend, model.device, dtype)  # flash cannot run in float64: said before the copy is made
    if dtype == torch.float64 and model.family and (why := model.family.float64_refused(model.config)):
        raise UnsupportedModel(f"{model.name!r} cannot be proven in float64 ({why}): check it in float32")
    limit = FLOAT64_MAX_BYTES if float64_limit is None else float64_limit
    if dtype == torch.float64 and (size := model.weight_bytes(dtype)) > limit:
        raise BadOption(f"a float64 copy of {model.name} would take {size / 2**30:.1f} GiB, over the "
                        f"{limit / 2**30:.1f} GiB allowed here: check it in float32, or on a machine with more memory")
    return model.cast(dtype)


@reader
def check(model: LocalModel, text: str, pair: str | None = None, truncate: bool = False, backend: str = "eager",
          dtype: str | torch.dtype = "float32", float64_limit: int | None = None,
          progress: Callable[[int, int], None] | None = None) -> ParityReport:
    """Encode ``text``, run both paths, compare: the one-call parity check. ``dtype="float64"`` runs both on a
    float64 copy of the model: the proof that the two are the same function (≤ 1e-10), on any machine.
    ``progress(done, total)``: called after the copy, after each of the two passes and after each layer compared
    (``total`` = 3 + layers), where a caller may stop the work."""
    if model.scratch_problem:  # refuse an unsupported model before spending a forward pass on it
        raise UnsupportedModel(model.scratch_problem)
    total = 3 + model.n_layers

    def step(done: int) -> None:
        if progress is not None:
            progress(done, total)

    model = in_dtype(model, dtype, backend, float64_limit)
    step(1)
    enc = model.encode(text, pair, truncate=truncate)
    reference = runner.forward(model, enc, "hf")
    step(2)
    candidate = runner.forward(model, enc, "scratch", backend)
    step(3)
    return compare(reference, candidate, progress=None if progress is None else lambda done, _n: step(3 + done))


# Sun et al. 2024, "Massive activations in large language models": a hidden-state number is massive when its size is
# over 100 and over 1,000 times the median size of its layer's hidden state (every real token and dimension)
MASSIVE_SIZE = 100.0
MASSIVE_RATIO = 1000.0
MASSIVE_COLUMNS = ["layer", "dimension", "value", "token", "position", "times_median"]


@reader
def massive_activations(trace: TraceLike, item: int = 0, top: int | None = None, size: float = MASSIVE_SIZE,
                        ratio: float = MASSIVE_RATIO):
    """The massive activations of one item of ``trace`` (Sun et al. 2024): every number of a layer's hidden state,
    over the real tokens, whose |value| is over ``size`` (100) and over ``ratio`` (1,000) × the median |value| of
    that layer's hidden state. ``layer`` ℓ is the residual stream after block ℓ (``hidden_states[ℓ + 1]``; the last
    layer's is after the model's final norm, as Hugging Face gives it); the embeddings are not read. One row per
    number: ``layer, dimension, value`` (signed), ``token`` (its text), ``position`` (among the real tokens) and
    ``times_median`` (|value| ÷ the layer's median |value|), by layer, the largest |value| first; ``top`` keeps
    only the ``top`` largest. An ordinary model has none: the frame is empty. Why parity scales its figures."""
    import pandas as pd

    real = trace.attention_mask[item].bool()
    tokens = trace.real_tokens(item)
    rows = []
    for layer, hidden in enumerate(trace.hidden_states[1:]):
        h = hidden[item][real].double()  # [n, D]
        mag = h.abs()
        median = float(mag.median()) if mag.numel() else 0.0  # (of an even count: the lower middle value)
        for pos, dim in ((mag > size) & (mag > ratio * median)).nonzero().tolist():
            value = float(h[pos, dim])
            rows.append(dict(layer=layer, dimension=dim, value=value, token=tokens[pos].text, position=pos,
                             times_median=abs(value) / median if median else float("inf")))
    frame = pd.DataFrame(rows, columns=MASSIVE_COLUMNS)
    frame = frame.assign(size=frame["value"].abs())
    if top is not None:
        frame = frame.nlargest(top, "size", keep="first")
    frame = frame.sort_values(["layer", "size", "dimension", "position"], ascending=[True, False, True, True])
    return frame.drop(columns="size").reset_index(drop=True)
