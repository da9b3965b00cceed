"""Parity of the sidebar's input: Hugging Face's trace against our from-scratch pass (the sidebar's badge and the
Parity page), and the float64 proofs run this session (the Parity page runs them, the badge reads them)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import streamlit as st

from probes import parity

from . import budgets
from .models import Input, model_of
from .trace import run_now, trace


@st.cache_data(max_entries=32, show_spinner="Comparing Hugging Face with the from-scratch pass…")
def parity_report(inp: Input) -> parity.ParityReport:
    """Parity of this input: the reference is always Hugging Face; the candidate our scratch pass
    with the chosen backend (eager when the page shows Hugging Face). Both are the traces the pages
    use (``trace``, cached), so the one the page already made is not run again; on a public app the
    candidate is kept only when the page shows it (else it would take a place among the traces kept there)."""
    candidate = replace(inp, source="scratch", backend=parity_backend(inp))
    keep = inp.source == "scratch" or not budgets.public()
    return parity.compare(trace(replace(inp, source="hf", backend="eager")),
                   trace(candidate) if keep else run_now(candidate),
                   progress=budgets.watched(advice="shorten the text"))



@dataclass(frozen=True)
class Proof:
    """A float64 parity check of one input: our pass and Hugging Face's, both on a float64 copy of the model."""

    passed: bool
    backend: str  # the kernel that ran on our side
    attention_max_abs_diff: float
    hidden_max_rel_diff: float
    logits_max_rel_diff: float | None
    tolerance: dict


PROOFS = "float64_proofs"  # session key: the inputs proven in float64 this session (the badge reads it)


def parity_backend(inp: Input) -> str:
    """The backend parity checks on our side: the chosen one when the page shows our pass, else eager."""
    return inp.backend if inp.source == "scratch" else "eager"



def prove_parity(inp: Input, progress=None) -> Proof:
    """Run the float64 check of this input (a float64 copy of the model, built and dropped: 1 GiB for SmolLM2;
    a public deployment refuses a copy over ``budgets.PUBLIC_FLOAT64_BYTES``) and keep its figures in the session.
    ``progress(done, total)``: after each step of the check (:func:`probes.parity.check`)."""
    r = parity.check(model_of(inp), inp.text, inp.pair,
                truncate=inp.truncate, backend=parity_backend(inp),
                dtype="float64", float64_limit=budgets.PUBLIC_FLOAT64_BYTES if budgets.public() else None,
                progress=budgets.watched(progress, advice="shorten the text"))
    proof = Proof(r.passed, r.backend, r.attention_max_abs_diff, r.hidden_max_rel_diff, r.logits_max_rel_diff,
                  r.tolerance)
    st.session_state.setdefault(PROOFS, {})[_checked(inp)] = proof
    return proof



def proof_of(inp: Input) -> Proof | None:
    """This input's float64 check, if it was run this session."""
    return st.session_state.get(PROOFS, {}).get(_checked(inp))



def _checked(inp: Input) -> Input:
    """What a parity check of ``inp`` runs on our side (the key of its proof)."""
    return replace(inp, source="scratch", backend=parity_backend(inp))
