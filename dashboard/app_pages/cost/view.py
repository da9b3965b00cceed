"""Cost: why the lazy/flash path exists. Hugging Face's eager attention keeps layers × heads × L²
probabilities; our lazy Trace keeps one logsumexp per query row and recomputes the head you look at.
Small sizes are measured live on this machine; large ones come from the saved benchmark."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard.core import ui
from probes import cost

from . import charts

BENCHMARK = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "long_inputs.json"
DECODING = BENCHMARK.with_name("generate.json")
DECODE_CONTEXTS = (32, 64, 128, 256)
LIVE_LENGTHS = (16, 32, 64, 128, 256, 512)
GIB = 2**30


@st.cache_data(max_entries=4, show_spinner=False)
def _saved():
    return cost.load_benchmark(BENCHMARK)


@st.cache_data(max_entries=4, show_spinner=False)
def _saved_decoding():
    return cost.load_decoding(DECODING)


@st.cache_data(max_entries=8, show_spinner="Generating at each context length…")
def _live_decoding(name: str, contexts: tuple[int, ...], _model=None):
    return cost.measure_decoding(_model, list(contexts), steps=8)


@st.cache_data(max_entries=8, show_spinner="Measuring…")
def _live(name: str, lengths: tuple[int, ...], _model=None):
    return cost.measure(_model, list(lengths))


def render(ctx: ui.Context) -> None:
    st.header("Cost: attention memory and time against input length")
    st.markdown(
        "To show every head, Hugging Face's eager attention returns **layers × heads × L²** probabilities: memory "
        "grows with the square of the input length. Our lazy Trace (scratch `sdpa`/`flash` backends) keeps "
        "**one logsumexp per query row** (layers × heads × L numbers) and recovers any head exactly, as "
        "P = exp(q·kᵀ/√d_k − logsumexp), when you look at it.")

    st.subheader("Saved benchmark: GPT-2-small shapes, up to 8,192 tokens")
    saved = _saved()
    saved = saved.assign(peak_GiB=saved["peak_bytes"] / GIB)
    c = _memory_and_time(saved, "peak_GiB", "Peak memory (GiB)", "cost-saved")
    st.caption(f"From `benchmarks/long_inputs.py` (CPU, results in `{BENCHMARK.relative_to(BENCHMARK.parents[2])}`). "
               "Where a path has no point, it was not run: Hugging Face's attentions alone would not fit in memory. "
               f"Dashed: c·L² with c fitted to Hugging Face's peaks ({c:.3g} GiB per token²).")

    _live_forward(ctx)
    _kv_cache(ctx)


def _live_forward(ctx: ui.Context) -> None:
    st.subheader(f"Live, on this machine: {ui.safe(ctx.model.name)}")
    if not ctx.model.scratch_supported:
        st.info(f"{ui.safe(ctx.model.name)} runs in the Hugging Face view only: there is no lazy path to compare.")
        return
    lengths = [n for n in LIVE_LENGTHS if n <= ctx.model.max_tokens]
    picked = st.multiselect("Input lengths (tokens)", lengths, default=lengths[:4], key="cost_lengths")
    args = (ctx.model.name, tuple(sorted(picked)))
    if st.button("Measure", icon=":material/timer:", disabled=not picked):
        st.session_state["cost_measured"] = args
    if st.session_state.get("cost_measured") != args:
        st.caption("Random tokens; each length timed 3 times after a warm-up (median). Takes a few seconds.")
        return
    live = _live(*args, _model=ctx.model)
    live = live.assign(attention_MiB=live["attention_bytes"] / 2**20)
    _memory_and_time(live, "attention_MiB", "Attention held by the Trace (MiB)", "cost-live")
    ui.table(live.drop(columns="attention_MiB"))


def _kv_cache(ctx: ui.Context) -> None:
    m = ctx.model
    st.header("Generation: what the KV cache costs and saves")
    st.markdown(
        "A decoder writing text keeps each layer's keys and values (the **KV cache**, see the Generate page): "
        "**2 × layers × key/value heads × d_head × tokens × 4 bytes** in fp32. It grows linearly with the "
        "context, and in exchange each new token costs one row of attention instead of rerunning the whole prefix.")
    if not m.is_causal or not m.scratch_supported:
        st.info(f"{ui.safe(m.name)} does not write text with our from-scratch path "
                f"({'an encoder' if not m.is_causal else ui.safe(m.scratch_problem)}): pick smollm2 or a GPT-2 model "
                "to see its KV cache.")
    else:
        top = m.max_tokens
        grid = sorted({min(2**k, top) for k in range(4, 15)} | {top})
        kinds = [(f"{m.n_kv_heads} key/value heads (this model)", True)]
        if m.n_kv_heads < m.n_heads:
            kinds.append((f"{m.n_heads} key/value heads (one per query head)", False))
        # (the ignore: Model is no ModelLike yet, having no backend or home; mypy says when it is)
        formula = pd.DataFrame([dict(tokens=n, path=name,
                                     MiB=cost.kv_cache_bytes(m, n, grouped) / 2**20)
                                for name, grouped in kinds for n in grid])
        contexts = tuple(n for n in DECODE_CONTEXTS if n + 8 <= top)
        measured = None
        if st.button("Measure generation", icon=":material/timer:", key="decode_measure"):
            st.session_state["decode_measured"] = (m.name, contexts)
        if st.session_state.get("decode_measured") == (m.name, contexts):
            measured = _live_decoding(m.name, contexts, _model=m)
            cached = measured[measured["path"] == cost.CACHED]
            formula = pd.concat([formula, pd.DataFrame(dict(tokens=cached["tokens"], path="measured on the cache",
                                                            MiB=cached["cache_bytes"] / 2**20))])
        left, right = st.columns(2)
        chart = charts.cost_chart(formula, "MiB", f"KV cache of {m.name} (fp32)")
        ui.chart(chart, left)
        if measured is not None:
            ui.chart(charts.cost_chart(measured, "seconds_per_token", "Time per new token (s)"), right)
            same = bool((cached["cache_bytes"] == cached["formula_bytes"]).all())
            st.caption(f"Measured on random tokens at {', '.join(map(str, contexts))} tokens (8 cached steps each, "
                       f"median; recompute: median of 3). The bytes on the cache's tensors "
                       f"{'equal' if same else 'DIFFER from'} the formula.")
            ui.table(measured)
        else:
            right.caption("Press **Measure generation** to time a cached step against rerunning the whole prefix "
                          f"on {ui.safe(m.name)}, and to check the formula against the cache's own tensors "
                          "(a few seconds).")
        ui.downloads("kv-cache", chart, formula)
    st.subheader("Saved benchmark: SmolLM2-135M, up to 2,048 tokens of context")
    saved = _saved_decoding()
    ui.chart(charts.cost_chart(saved, "seconds_per_token", "Time per new token (s), CPU"))
    st.caption("From `benchmarks/generate.py` (results in `benchmarks/results/generate.json`): the cached step stays "
               "nearly flat as the context grows, while recomputing the prefix grows with it.")


def _memory_and_time(frame, memory: str, title: str, name: str) -> float:
    """Memory (with the c·L² curve fitted to Hugging Face's points) and time side by side, and their
    downloads; returns c."""
    hf = frame[frame["path"] == cost.HF]
    c = cost.quadratic_fit(hf["tokens"], hf[memory])
    left, right = st.columns(2)
    chart = charts.cost_chart(frame, memory, title, quadratic=c)
    ui.chart(chart, left)
    ui.chart(charts.cost_chart(frame, "seconds", "Time: forward + one head (s)"), right)
    ui.downloads(name, chart, frame)
    return c
