"""Cost: why the lazy/flash path exists. Hugging Face's eager attention keeps layers × heads × L²
probabilities; our lazy Trace keeps one logsumexp per query row and recomputes the head you look at.
Small sizes are measured live on this machine; large ones come from the saved benchmark."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from probes import cost

from .. import charts, ui

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "long_inputs.json"
LIVE_LENGTHS = (16, 32, 64, 128, 256, 512)
GIB = 2**30


@st.cache_data(max_entries=4, show_spinner=False)
def _saved():
    return cost.load_benchmark(BENCHMARK)


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

    st.subheader(f"Live, on this machine: {ctx.model.name}")
    if not ctx.model.scratch_supported:
        st.info(f"{ctx.model.name} runs in the Hugging Face view only: there is no lazy path to compare.")
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
    st.dataframe(live, hide_index=True)


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
