"""Parity: does our from-scratch forward pass compute what Hugging Face computes?

Two Traces of the same encoding are compared over real tokens only (padding rows and columns are
left out): max |Δ| of the attention probabilities per layer and head, of the hidden states per
layer, and of the logits. A lazy Trace (scratch ``sdpa``/``flash``) is compared through the
probabilities it recovers from its logsumexp. The tolerances (fp32) live here and nowhere else.

Hidden states are held to their tolerance *in units of the layer's scale*: max |Δ| divided by the
largest |value| of that layer's reference hidden state when it exceeds 1 (so for states within ±1 it
is the plain max |Δ|). Modern decoders carry a few "massive activations" in their residual stream
(SmolLM2 reaches 27,000, where one fp32 step is 0.002): no kernel that sums in another order than
Hugging Face's can match them to an absolute 1e-4, while a wrong layer is off by far more than 1e-4
of the scale. ``hidden_max_abs_diff`` is reported beside it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch

from .trace import Trace

TOLERANCES = {"attention": 1e-5, "hidden": 1e-4, "logits": 1e-4}


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
    passed: bool
    tolerance: dict[str, float]
    attention_max_abs_diff: float
    hidden_max_abs_diff: float
    hidden_max_rel_diff: float
    logits_max_abs_diff: float | None
    qkv_max_abs_diff: float | None
    per_layer: list[LayerParity]

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
        logits = "n/a (no LM head)" if self.logits_max_abs_diff is None else f"{self.logits_max_abs_diff:.2e}"
        lines = [
            f"{verdict}  {self.reference} vs {self.candidate} on {self.model}, {len(self.tokens)} tokens"
            + (f" (kernel: {self.backend})" if self.backend not in ("", "eager") else ""),
            *([f"  note: {self.note}"] if self.note else []),
            f"  attention max |Δ| {self.attention_max_abs_diff:.2e}  (tolerance {tol['attention']:.0e}; "
            f"worst head {layer}.{head})",
            f"  hidden    max |Δ| {self.hidden_max_abs_diff:.2e}, {self.hidden_max_rel_diff:.2e} of the layer's "
            f"scale  (tolerance {tol['hidden']:.0e} of the scale)",
            f"  logits    max |Δ| {logits}  (tolerance {tol['logits']:.0e})",
            "  layer  attention   hidden  (of the scale)",
        ]
        for lp in self.per_layer:
            lines.append(f"  {lp.layer:5d}  {lp.attention_max_abs_diff:.2e}  {lp.hidden_max_abs_diff:.2e}  "
                         f"({lp.hidden_max_rel_diff:.2e})")
        return "\n".join(lines)


def _max(x: torch.Tensor) -> float:
    return float(x.max()) if x.numel() else 0.0


def _hidden_diff(reference: torch.Tensor, candidate: torch.Tensor, real: torch.Tensor) -> tuple[float, float]:
    """max |Δ| over the real tokens, and the same divided by the layer's scale, max(1, max |reference|)."""
    diff = _max((reference - candidate).abs()[real])
    return diff, diff / max(1.0, _max(reference.abs()[real]))


def compare(reference: Trace, candidate: Trace, tolerance: dict[str, float] | None = None) -> ParityReport:
    """Compare two Traces of the same input, layer by layer and head by head."""
    tol = dict(TOLERANCES, **(tolerance or {}))
    if not torch.equal(reference.input_ids, candidate.input_ids):
        raise ValueError("the two traces were run on different inputs")
    if reference.n_layers != candidate.n_layers or reference.n_heads != candidate.n_heads:
        raise ValueError(
            f"the traces have different shapes: {reference.n_layers}×{reference.n_heads} vs "
            f"{candidate.n_layers}×{candidate.n_heads} layers × heads"
        )
    real = reference.attention_mask  # [B, L]
    pairs = (real[:, :, None] & real[:, None, :])[:, None]  # [B, 1, L, L]: real query and real key

    per_layer = []
    for layer in range(reference.n_layers):  # a lazy trace recovers each layer from its logsumexp
        diff = (reference.layer_attention(layer).float() - candidate.layer_attention(layer).float()).abs()
        diff = diff.masked_fill(~pairs, 0.0)
        per_head = diff.amax(dim=(0, 2, 3)).tolist()
        hidden = _hidden_diff(reference.hidden_states[layer + 1], candidate.hidden_states[layer + 1], real)
        per_layer.append(LayerParity(layer, max(per_head), per_head, *hidden))

    hidden_all = [_hidden_diff(a, b, real) for a, b in zip(reference.hidden_states, candidate.hidden_states)]
    hidden_abs, hidden_rel = max(h[0] for h in hidden_all), max(h[1] for h in hidden_all)
    logits = None
    if reference.logits is not None and candidate.logits is not None:
        logits = _max((reference.logits - candidate.logits).abs()[real])
    qkv = None
    if reference.q is not None or reference.qkv_of is not None:
        qkv = max(
            _max((a - b).abs().transpose(1, 2)[real])
            for layer in range(reference.n_layers)
            for a, b in zip(reference.layer_qkv(layer), candidate.layer_qkv(layer))
        )
    attention = max(lp.attention_max_abs_diff for lp in per_layer)
    passed = attention <= tol["attention"] and hidden_rel <= tol["hidden"] and (
        logits is None or logits <= tol["logits"])
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
        tolerance=tol,
        attention_max_abs_diff=attention,
        hidden_max_abs_diff=hidden_abs,
        hidden_max_rel_diff=hidden_rel,
        logits_max_abs_diff=logits,
        qkv_max_abs_diff=qkv,
        per_layer=per_layer,
    )


def check(model, text: str, pair: str | None = None, truncate: bool = False, backend: str = "eager") -> ParityReport:
    """Encode ``text``, run both paths, compare: the one-call parity check."""
    from . import runner, scratch

    scratch.build(model)  # refuse an unsupported model before spending a forward pass on it
    enc = model.encode(text, pair, truncate=truncate)
    return compare(runner.forward(model, enc, "hf"), runner.forward(model, enc, "scratch", backend))
