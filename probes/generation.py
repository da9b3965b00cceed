"""Generation with its proof: :mod:`probes.scratch.generate` writes with a KV cache; this module checks that the
cached steps compute the attention of full forward passes, and runs Hugging Face's own ``generate`` for the
greedy check.

It sits beside parity (it reads passes of both producers), one floor above the producers and the runner; the
public names of generation are all here, so a caller needs no module of ``probes.scratch``.

    from probes import generation as g
    gen = g.generate(model, "Xiaoming gave the apple to Xiaohong because she was", 20)
    print(g.prove(model, gen).to_text())
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import runner
from .attention_math import soft_cap
from .models import Encoding
from .precision import FLOAT64_MAX_BYTES  # a bigger model's float64 copy is not made: the fp32 check alone runs
from .scratch import DecoderNetwork, build, net_logits
from .scratch.generate import (
    GENERATE_BACKENDS,
    KVCache,
    Sampling,
    cache_bytes,
    decoder,
    full_pass,
    generate,
    network64,
    replay,
    windows_of,
)
from .seam import reader
from .trace import GenerationTrace

__all__ = ["FP32_TOLERANCES", "GENERATE_BACKENDS", "GenerationTrace", "KVCache", "Proof", "Sampling", "TOLERANCES",
           "cache_bytes", "decoder", "generate", "hf_generate", "prove", "windows_of"]

# The proof (see `prove`): exactness in float64, where rounding cannot hide a wrong cache; and the fp32 rows
# the user sees against Hugging Face's fp32 pass. Logits are compared in units of the row's largest |logit|
# (when above 1). In fp32 a one-row product and a whole-matrix product sum in different orders; through 30
# layers those 1e-7 differences reach ~2e-5 in a probability (SmolLM2, measured), hence fp32's own bound.
TOLERANCES = {"attention": 1e-10, "logits": 1e-10}  # float64: measured ~1e-14 (SmolLM2)
FP32_TOLERANCES = {"attention": 1e-4, "logits": 1e-4}


@dataclass
class Proof:
    """Cached decoding against one full forward pass over the whole sequence, per step: max |Δ| of the
    step's attention row (all layers and heads) and of its logits; twice:

    * ``exact_*``: the same cached decoding of the same tokens in float64 against a float64 full pass of our
      network, where nothing but a wrong cache can make them differ by more than rounding (~1e-15);
    * ``attention_max_abs_diff`` / ``logits_*``: the fp32 steps (what the app and CLI show) against the
      reference's own fp32 full pass (Hugging Face's, by default)."""

    reference: str  # the fp32 full pass: "hf" or "scratch/eager"
    steps: int
    exact_attention_max_abs_diff: float | None  # None: the model is too big for a float64 copy (see note)
    exact_logits_max_rel_diff: float | None
    attention_max_abs_diff: float
    logits_max_abs_diff: float
    logits_max_rel_diff: float  # max |Δ| ÷ max(1, the step's largest |logit|)
    per_step: list[float]  # fp32 attention max |Δ| of each step
    passed: bool
    note: str = ""
    tolerance: dict = field(default_factory=lambda: dict(float64=TOLERANCES, float32=FP32_TOLERANCES))

    def to_text(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        exact = (f"float64 attention max |Δ| {self.exact_attention_max_abs_diff:.1e}, logits "
                 f"{self.exact_logits_max_rel_diff:.1e} (tolerance {TOLERANCES['attention']:g})"
                 if self.exact_attention_max_abs_diff is not None else self.note)
        return (f"{verdict}: {self.steps} cached steps against one full pass: {exact}; fp32 against "
                f"{self.reference}: attention {self.attention_max_abs_diff:.1e}, logits {self.logits_max_rel_diff:.1e} "
                f"of their scale (tolerance {FP32_TOLERANCES['attention']:g}: rounding)")


def _compare(rows: list[torch.Tensor], logits: torch.Tensor, ref_rows, ref_logits,
             first: int) -> tuple[list[float], float, float]:
    """Per step max |Δ| of the rows (each ``[layers, H, context]``) against the reference's rows at query
    ``first + s`` (``ref_rows(layer, q)`` -> ``[H, context]``), and the logits' max |Δ| and relative max against the
    reference's (``ref_logits(q)`` -> ``[V]``)."""
    per_step, absolute, relative = [], 0.0, 0.0
    for s, row in enumerate(rows):
        q = first + s
        per_step.append(max(float((ref_rows(layer, q).to(row.dtype) - row[layer]).abs().max())
                            for layer in range(row.shape[0])))
        ref = ref_logits(q).to(logits.dtype)
        diff = float((ref - logits[s]).abs().max())
        absolute = max(absolute, diff)
        relative = max(relative, diff / max(1.0, float(ref.abs().max())))
    return per_step, absolute, relative


@reader
def prove(model, gen: GenerationTrace, reference: str = "hf", float64_limit: int | None = None,
          attention_budget: int | None = None) -> Proof:
    """Check a generation's cached steps against full forward passes over the sequence the steps fed in
    (the prompt and every generated token but the last): in float64, our network's cached decoding against
    its own full pass; in fp32, the steps against ``reference``'s full pass (Hugging Face's, or ``"scratch"``).
    ``attention_budget`` (bytes): the reference pass keeps every head's probabilities only within it, else one
    logsumexp per row, and the rows the steps are compared with are recomputed from its own q and k
    (:func:`probes.runner.forward`; a 2,000-character prompt on SmolLM2 holds 220 MiB of probabilities of which the
    proof reads one row a step)."""
    decoder(model)
    fed = gen.input_ids[: gen.prompt_length + gen.n_steps - 1][None].to(model.device)
    first = gen.prompt_length - 1
    size = model.weight_bytes(torch.float64)
    limit = FLOAT64_MAX_BYTES if float64_limit is None else float64_limit
    exact: list[float] = []  # float64 attention max |Δ| of each step: set with exact_logits, read only with it
    exact_logits: float | None = None
    note = ""
    if size <= limit:
        with torch.inference_mode():
            net = network64(model)
            rows64, logits64 = replay(net, model, fed, gen.prompt_length)
            probs64, full_logits64 = full_pass(net, fed)
            del net
        exact, _, exact_logits = _compare(rows64, logits64, lambda layer, q: probs64[layer][:, q, : q + 1],
                                          lambda q: full_logits64[q], first)
    else:
        note = (f"float64 check skipped (a float64 copy of {model.name} would take {size / 2**30:.1f} GiB; "
                f"the limit here is {limit / 2**30:.1f})")
    enc = Encoding(fed.cpu(), torch.ones_like(fed.cpu()), None, [gen.tokens[: fed.shape[1]]], [""], [None], [None])
    full = runner.forward(model, enc, reference, "eager", logits=False, attention_budget=attention_budget)
    ref_logits = _reference_logits(model, full, reference, first, gen.n_steps).float()
    per_step, absolute, relative = _compare(
        gen.rows, gen.logits, lambda layer, q: full.attention(layer, None, rows=[q])[:, 0, : q + 1].float().cpu(),
        lambda q: ref_logits[q - first], first)
    exact_ok = exact_logits is None or (max(exact) <= TOLERANCES["attention"] and exact_logits <= TOLERANCES["logits"])
    passed = exact_ok and max(per_step) <= FP32_TOLERANCES["attention"] and relative <= FP32_TOLERANCES["logits"]
    return Proof(full.source, gen.n_steps, None if exact_logits is None else max(exact), exact_logits,
                 max(per_step), absolute, relative, per_step, passed, note)


def _reference_logits(model, full, reference: str, first: int, steps: int) -> torch.Tensor:
    """The reference pass's logits at the ``steps`` positions from ``first`` on, the ones the steps are compared
    with (``[steps, V]``), made by its own head from its last hidden state (after the final norm): Hugging Face's
    output embeddings, or the from-scratch ``lm_head``. The same numbers as its whole pass's logits at those rows,
    without a vocabulary for every position of the prompt (a 2,000-character prompt on SmolLM2: 88 MiB). A final
    soft-cap (Gemma 2's ``final_logit_softcapping``) is applied as each model's own forward applies it."""
    last = full.hidden_states[-1][0, first:first + steps]
    with torch.inference_mode():
        if reference == "hf":
            cap = getattr(model.config, "final_logit_softcapping", None)
            return soft_cap(model.hf.get_output_embeddings()(last), cap).cpu()
        net = build(model)
        assert isinstance(net, DecoderNetwork) and net.lm_head is not None  # prove() asked decoder(model) first
        return net_logits(net, last).cpu()


@reader
def check_decoder(model) -> None:
    """:func:`~probes.scratch.generate.decoder`'s refusal (an encoder, no language-model head, a family the
    from-scratch path does not cover), asked where the model is: its network stays there."""
    decoder(model)


@reader
def hf_generate(model, prompt: str, max_new_tokens: int) -> list[int]:
    """Hugging Face's own greedy ``generate`` on the same prompt: the new token ids (for the greedy proof)."""
    enc = model.encode(prompt).to(model.device)
    eos = model.tokenizer.eos_token_id
    with torch.inference_mode():
        out = model.hf.generate(enc.input_ids, attention_mask=enc.attention_mask, max_new_tokens=max_new_tokens,
                                do_sample=False, num_beams=1, pad_token_id=eos if eos is not None else 0)
    return out[0, enc.input_ids.shape[1]:].tolist()
