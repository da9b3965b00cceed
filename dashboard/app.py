"""The attention workbench (first page): pick a model, type a sentence, see a head's attention, and
whether our from-scratch forward pass agrees with Hugging Face.

Run with ``make app`` (or ``streamlit run dashboard/app.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `streamlit run` from a plain checkout

import probes  # noqa: E402
from dashboard.charts import attention_heatmap  # noqa: E402
from probes import parity  # noqa: E402

DEFAULT_TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry."
PUBLIC = os.environ.get("PROBES_PUBLIC", "").lower() in ("1", "true", "yes")
CUSTOM = "another hub id or local directory…"


@st.cache_resource(max_entries=2, show_spinner="Loading the model…")
def load_model(name: str) -> probes.Model:
    return probes.load(name, allow_local_paths=not PUBLIC, device="auto")


@st.cache_data(max_entries=32, show_spinner="Running the model…")
def attention_of(name: str, text: str, pair: str | None, source: str, backend: str, layer: int, head: int):
    """Tokens, one head's probabilities (real tokens only), whether the model is causal, the
    attention kernel that ran and why it is not the one asked for (if it is not)."""
    model = load_model(name)
    trace = probes.run(model, text, pair, source=source, backend=backend)
    return trace.token_strings(), trace.attention(layer, head).cpu().numpy(), trace.is_causal, trace.backend, trace.note


@st.cache_data(max_entries=32, show_spinner="Comparing Hugging Face with the from-scratch pass…")
def parity_of(name: str, text: str, pair: str | None, backend: str) -> dict:
    return parity.check(load_model(name), text, pair, backend=backend).to_dict()


def sidebar() -> tuple[str, str, str | None]:
    st.sidebar.title("Attention workbench")
    choices = [probes.OFFLINE_DEFAULT, *probes.KNOWN_HUB_MODELS, CUSTOM]
    picked = st.sidebar.selectbox(
        "Model", choices, help=f"'{probes.OFFLINE_DEFAULT}' is all-MiniLM-L6-v2, shipped with the app (no network)")
    name = picked
    if picked == CUSTOM:
        hint = "a hub id" if PUBLIC else "a hub id or a local model directory"
        name = st.sidebar.text_input("Model name", placeholder=hint).strip() or probes.OFFLINE_DEFAULT
    text = st.sidebar.text_area("Text", DEFAULT_TEXT, height=100)
    pair = st.sidebar.text_input("Second sentence (BERT pairs, optional)").strip() or None
    return name, text, pair


def main() -> None:
    st.set_page_config(page_title="Attention workbench", layout="wide")
    name, text, pair = sidebar()
    try:
        model = load_model(name)
    except probes.ProbesError as exc:
        st.error(str(exc))
        return
    layer = st.sidebar.slider("Layer", 0, model.n_layers - 1, 0)
    head = st.sidebar.slider("Head", 0, model.n_heads - 1, 0)
    sources = ["hf", "scratch"] if model.scratch_supported else ["hf"]
    source = st.sidebar.radio("Source", sources, format_func={"hf": "Hugging Face", "scratch": "From scratch"}.get,
                              horizontal=True)
    backend = "eager"
    if source == "scratch":
        backend = st.sidebar.radio(
            "Attention backend", ["eager", "sdpa", "flash"], horizontal=True,
            help="eager keeps every probability; sdpa and flash keep one logsumexp per row and recover the "
                 "head you look at from it (flash needs CUDA, else sdpa runs)")
    st.header(f"{name}: layer {layer}, head {head}")
    try:
        tokens, weights, causal, ran, note = attention_of(name, text, pair, source, backend, layer, head)
    except probes.ProbesError as exc:
        st.error(str(exc))
        return
    where = "Hugging Face (eager, fp32)" if source == "hf" else f"our from-scratch forward pass, {ran} attention"
    st.caption(f"{len(tokens)} tokens · {model.n_layers} layers × {model.n_heads} heads · source: {where}")
    if note:
        st.info(note)
    if model.scratch_supported:
        report = parity_of(name, text, pair, backend)
        worst = report["attention_max_abs_diff"]
        versus = f"Hugging Face vs scratch ({report['backend']})"
        if report["passed"]:
            st.success(f"Parity: PASS · {versus} · max |Δ| attention {worst:.1e} over every layer and head")
        else:
            st.error(f"Parity: FAIL · {versus} · max |Δ| attention {worst:.1e}")
    else:
        st.info("This architecture runs in the Hugging Face view only: the from-scratch path covers GPT-2 and BERT.")
    st.altair_chart(attention_heatmap(tokens, weights, f"Layer {layer}, head {head}", causal=causal), width="content")


main()
