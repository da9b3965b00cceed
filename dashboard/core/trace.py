"""The trace of the sidebar's input, kept for the next rerun (a head change reruns no model), and what every page
reads of it: the tokens of the run, one head's probabilities, the words of the text.

* traces: ``st.cache_resource``, bounded in bytes (:func:`trace`): a Trace holds tensors, and ``st.cache_data``
  would pickle and copy all of them on every rerun just to read one head;
* what a page draws of it: ``st.cache_data``, small numpy arrays and frames keyed by plain values, never tensors.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import streamlit as st

import probes
from probes import explain
from probes.tokens import unknown_tokens

from . import budgets
from .models import Input, model_of, served_from

TRACES_KEPT = 6
TRACE_BYTES = 2**31  # the traces kept at once hold at most 2 GiB (a trace of 8,192 tokens on SmolLM2 holds more alone)

PUBLIC_TRACE_BYTES = 2**28  # 256 MiB on a public deployment: three 2,000-character texts on SmolLM2 (no logits there,
# see `run_now`), beside the runtime and both offline models (benchmarks/public_memory.py; docs/deploy.md)


@dataclass(frozen=True)
class RunInfo:
    tokens: list[str]
    causal: bool
    backend: str  # the kernel that ran
    note: str  # why it is not the one asked for
    truncated_from: int | None  # original token count, when the input was cut to the context window
    unknown: int = 0  # real tokens the model's vocabulary could not read ([UNK])



def run_now(inp: Input) -> probes.TraceLike:
    """The trace of this input, made now (not kept). On a public app with the public budget of probabilities, and
    without the logits: no page draws them (the lens and the attributions make their own), only the parity badge
    compared them, and on SmolLM2 they are half a trace (a 2,000-character text: 88 MiB of its 170)."""
    budget = budgets.ATTENTION_BUDGET
    if budgets.public():
        budget = min(budget, budgets.PUBLIC_ATTENTION_BUDGET)
    return probes.run(model_of(inp), inp.text, inp.pair, source=inp.source, truncate=inp.truncate,
                      backend=inp.backend, logits=not budgets.public(), attention_budget=budget)



@st.cache_resource(max_entries=4 * TRACES_KEPT, show_spinner="Running the model…")  # `trace` evicts, by bytes
def _traced(inp: Input, where: str = "") -> probes.TraceLike:
    """``where``: the Ray cluster whose server holds the model ("": this process), so that a trace made here is not
    taken for the server's (or the other way round) when the cluster comes or goes."""
    return run_now(inp)


# the traces kept, least recently used first, with where they were made and their bytes
_held: OrderedDict[Input, tuple[str, int]] = OrderedDict()



_held_lock = threading.Lock()


def trace(inp: Input) -> probes.TraceLike:
    """The trace of this input, kept for the next rerun (a head change reruns no model). At most ``TRACES_KEPT``
    are kept, and at most ``TRACE_BYTES`` of them (``PUBLIC_TRACE_BYTES`` on a public deployment): the least
    recently used go first, and the newest is always kept. Counted in bytes, not entries: one 2,000-character
    text on SmolLM2 holds 80–300 MiB (and 88 MiB more with its logits), a sentence 5 MiB."""
    where = served_from(inp)
    t = _traced(inp, where)
    limit = PUBLIC_TRACE_BYTES if budgets.public() else TRACE_BYTES
    with _held_lock:
        if inp in _held and _held[inp][0] != where:  # made where the model no longer is: dropped
            _traced.clear(inp, _held.pop(inp)[0])
        if inp not in _held:
            _held[inp] = (where, t.nbytes)
        _held.move_to_end(inp)
        while len(_held) > 1 and (len(_held) > TRACES_KEPT or sum(n for _, n in _held.values()) > limit):
            gone, (made, _) = _held.popitem(last=False)
            _traced.clear(gone, made)
    return t



@st.cache_data(max_entries=64, show_spinner=False)
def run_info(inp: Input) -> RunInfo:
    t = trace(inp)
    model = model_of(inp)
    enc = model.encode(inp.text, inp.pair, truncate=inp.truncate)
    unknown = unknown_tokens(model.tokenizer, enc.input_ids[0][enc.attention_mask[0].bool()].tolist())
    return RunInfo(t.token_strings(), t.is_causal, t.backend, t.note, enc.truncated_from[0], unknown)



@st.cache_data(max_entries=64, show_spinner=False)
def text_words(inp: Input) -> list[tuple[str, list[int]]]:
    """The words of the text with the tokens each covers (Find heads' key menu)."""
    return explain.words(trace(inp), inp.text)



@st.cache_data(max_entries=256, show_spinner=False)
def head(inp: Input, layer: int, head: int, rows: tuple[int, int] | None = None) -> np.ndarray:
    """One head's probabilities ``[r, n]`` (``rows``: a window of query rows, start and stop)."""
    picked = slice(*rows) if rows else None
    return trace(inp).attention(layer, head, rows=picked).float().cpu().numpy()
