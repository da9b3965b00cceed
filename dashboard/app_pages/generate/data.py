"""What Generate asks the library for: the model's continuation with our KV cache (kept, bounded, like a trace),
its proof against one full pass, and the logit lens of each new token."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard.core import budgets
from dashboard.core.models import model_named

GENERATIONS_KEPT = 4


@dataclass(frozen=True)
class Writing:
    """Everything that decides a generation: its cache key."""

    model: str
    prompt: str
    new_tokens: int
    sample: bool
    seed: int
    temperature: float
    top_k: int
    top_p: float

    @property
    def sampling(self):
        from probes.generation import Sampling

        return Sampling(self.sample, self.seed, self.temperature, self.top_k, self.top_p)



@dataclass(frozen=True)
class GenerationProof:
    passed: bool
    exact_attention_max_abs_diff: float | None  # float64 (None: the model is too big for the check)
    attention_max_abs_diff: float  # fp32, against Hugging Face's fp32 pass
    logits_max_rel_diff: float
    hf_same_tokens: bool | None  # greedy: does Hugging Face's generate write the same tokens? (None: sampled)



@st.cache_resource(max_entries=GENERATIONS_KEPT, show_spinner="Writing, one token at a time…")
def generation(w: Writing):
    """The model's continuation of the prompt with the from-scratch KV cache (a GenerationTrace)."""
    from probes import generation as g

    return g.generate(model_named(w.model), w.prompt, w.new_tokens, w.sampling)



@st.cache_data(max_entries=16, show_spinner="Proving the cache against one full forward pass…")
def generation_proof(w: Writing) -> GenerationProof:
    """The cached steps against one full Hugging Face pass over the whole sequence; greedy, also Hugging
    Face's own generate."""
    from probes import generation as g

    model = model_named(w.model)
    gen = generation(w)
    budget = min(budgets.ATTENTION_BUDGET, budgets.PUBLIC_ATTENTION_BUDGET) if budgets.public() else None
    proof = g.prove(model, gen, "hf", float64_limit=budgets.PUBLIC_FLOAT64_BYTES if budgets.public() else None,
                    attention_budget=budget)
    same = None if w.sample else g.hf_generate(model, w.prompt, gen.n_steps) == gen.new_ids
    return GenerationProof(proof.passed, proof.exact_attention_max_abs_diff, proof.attention_max_abs_diff,
                           proof.logits_max_rel_diff, same)



@st.cache_data(max_entries=64, show_spinner=False)
def lens_column(name: str, ids: tuple[int, ...]) -> pd.DataFrame:
    """The logit lens of the token ids ``ids`` (a generated text, as it is) at its last token, layers only."""
    from probes.effects.lens import logit_lens

    return logit_lens(model_named(name), ids=ids, positions=[len(ids) - 1], heads=False).layers
