"""Generate: the model writes after a prompt, one token at a time, with our from-scratch KV cache; a step
slider walks through the tokens, showing where the sidebar's layer and head looked at each step, the
cache as it grows, and the proof that the cached steps compute the attention of one full pass."""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

import probes
from dashboard.core import budgets, ui, words
from dashboard.core.charts import HIGHLIGHT, MAX_CELLS
from dashboard.core.lens_charts import lens_grid
from dashboard.core.token_charts import query_bars
from probes.effects.lens import stage

from . import charts, data
from .state import GenerateState

MAX_NEW = 64  # tokens per generation in the app (the CLI takes more)
LIMITS = {"new_tokens": (1, MAX_NEW), "temperature": (0.05, 5.0), "top_k": (0, 1000), "top_p": (0.01, 1.0),
          "seed": (0, 2**31 - 1)}


def _clamp_settings() -> None:
    """A link may carry any number: keep each setting inside what its widget takes."""
    v = ui.part(GenerateState)
    fixed = {name: min(max(getattr(v, name), lo), hi) for name, (lo, hi) in LIMITS.items()}
    moved = [f"{words.said(name)} {getattr(v, name):,} (this page takes {lo:,} to {hi:,}: set to {fixed[name]:,})"
             for name, (lo, hi) in LIMITS.items() if getattr(v, name) != fixed[name]]
    if moved:
        st.warning("The link asks for " + "; ".join(moved) + ".")
        ui.change(GenerateState, **fixed)


def _settings() -> data.Writing:
    _clamp_settings()
    left, right = st.columns([3, 2])
    ui.bound("text_area", "prompt", "Prompt", left, height=80,
             help="the start of a text: the model writes what follows", of=GenerateState)
    ui.bound("number_input", "new_tokens", "New tokens", right, of=GenerateState, min_value=1, max_value=MAX_NEW,
             step=1)
    sample = ui.bound("toggle", "sample", "Sample (seeded) instead of greedy", right,
                      help="greedy takes the most likely token each step; sampling draws one from the softmax, "
                           "with a seed so the same settings write the same text", of=GenerateState)
    if sample:
        cols = st.columns(4)
        ui.bound("number_input", "seed", "Seed", cols[0], of=GenerateState, min_value=0, max_value=LIMITS["seed"][1],
                 step=1)
        ui.bound("number_input", "temperature", "Temperature", cols[1], min_value=0.05, max_value=5.0, step=0.1,
                 help="logits ÷ temperature before the softmax: below 1 sharper, above 1 flatter", of=GenerateState)
        ui.bound("number_input", "top_k", "Top-k", cols[2], min_value=0, max_value=1000, step=1,
                 help="draw among the k most likely tokens only (0: all)", of=GenerateState)
        ui.bound("number_input", "top_p", "Top-p", cols[3], min_value=0.01, max_value=1.0, step=0.05,
                 help="draw within the smallest set of tokens whose probability reaches p (1: all)", of=GenerateState)
    v = ui.view()
    s = ui.part(GenerateState)
    return data.Writing(v.model, s.prompt, int(s.new_tokens), s.sample, int(s.seed), float(s.temperature),
                        int(s.top_k), float(s.top_p))


def _text_html(tokens: list[str], prompt_length: int, query: int) -> str:
    """The text so far: the prompt, the tokens written before this step, the fed token (orange) and the
    token this step wrote (outlined); what comes later is not shown. Every token is escaped."""
    spans = []
    for i, text in enumerate(tokens[: query + 2]):
        style = "" if i < prompt_length else "color:#08519c;"
        if i == query:
            style = f"background:{HIGHLIGHT};color:white;border-radius:3px;"
        elif i == query + 1:
            style = "outline:2px solid #08519c;border-radius:3px;font-weight:600;"
        spans.append(f'<span style="{style}white-space:pre-wrap">{html.escape(text)}</span>')
    return ('<div style="font-size:1.15rem;line-height:1.9;font-family:ui-monospace,monospace">'
            + "".join(spans) + "</div>")


def render(ctx: ui.Context) -> None:
    v = ui.view()
    m = ctx.model
    st.header("Generate: a decoder writes, token by token, with a KV cache")
    if not m.is_causal:
        if getattr(m.config, "is_encoder_decoder", False):
            what = ("an encoder-decoder: the workbench shows its encoder's attention, and generation here runs "
                    "decoder-only models")
        else:
            what = (f"an encoder ({m.family.title if m.family else 'not a decoder'}): it reads a whole text at once "
                    "and never writes one, so there is nothing to generate here")
        st.info(f"{ui.safe(m.name)} is {what}. Pick smollm2 (offline) or a GPT-2 model in the sidebar's Model menu.")
        return
    st.markdown(
        "A decoder writes by predicting one token, appending it, and predicting again. The keys and values of "
        "the tokens already there never change, so each layer keeps them in a **KV cache**: the prompt runs once "
        "(the prefill), then each step sends only the newest token through the network. Its query is compared "
        "with every cached key, softmax gives the weights, and the weighted sum of the cached values is the "
        "head's output: one row of attention per step instead of the whole square.")
    w = _settings()
    cap = budgets.max_chars()
    if cap and len(w.prompt) > cap:
        st.error(f"The prompt is {len(w.prompt):,} characters; this deployment takes up to {cap:,}. Shorten it.")
        return
    try:
        gen = data.generation(w)
    except probes.ProbesError as exc:
        st.error(ui.safe(ui.in_app_words(exc)))
        return
    n = gen.n_steps
    if ui.part(GenerateState).step >= n:
        ui.change(GenerateState, step=n - 1)
    step = 0
    if n > 1:
        step = ui.bound("slider", "step", "Step", st, min_value=0, max_value=n - 1,
                        help="step s feeds one token (orange) and writes the next (outlined)", of=GenerateState)
    tokens = [t.text for t in gen.tokens]
    q = gen.query_position(step)
    wrote = tokens[q + 1]
    st.html(_text_html(tokens, gen.prompt_length, q))
    st.caption(f"Step {step} of {n - 1}: {'the prefill (the whole prompt) ended on' if step == 0 else 'fed'} "
               f"{ui.safe(repr(tokens[q]))} and the model wrote {ui.safe(repr(wrote))} · {w.sampling.describe()}"
               + (" · stopped at the end-of-text token" if gen.stopped == "eos" else ""))
    proof_box = st.empty()  # the cache's proof is drawn here, but computed last: its float64 rerun and Hugging
    # Face's own generate are most of a first open, and the rest of the page needs neither

    st.subheader(f"Layer {v.layer}, head {v.head}: the fed token's attention over its context")
    row = gen.row(step, v.layer, v.head).numpy()
    context = tokens[: q + 1]
    shown = max(0, len(context) - MAX_CELLS)
    bars = query_bars(context[shown:], row[shown:], len(context) - 1 - shown)
    ui.chart(bars)
    top = gen.top_keys(step, v.layer, v.head, 3)
    window = gen.windows[v.layer]
    st.caption(("the last " + f"{MAX_CELLS} of {len(context)} context tokens · " if shown else "")
               + "most attended: " + ", ".join(f"{p}: {ui.safe(repr(t))} {w_:.2f}" for p, t, w_ in top)
               + (f" · this layer sees only the last {window} tokens (a sliding window)" if window else ""))

    _lens(w.model, gen, step)

    st.subheader("Every step of this head")
    band = gen.rows_matrix(v.layer, v.head).numpy()
    first = max(0, band.shape[1] - MAX_CELLS)
    queries = [tokens[gen.query_position(s)] for s in range(n)]
    chart = charts.generation_band(queries, tokens[first: band.shape[1]], band[:, first:], step, first)
    ui.chart(chart)
    st.caption("One row per step (the fed token's attention), one column per token of the text; the orange "
               "outline is the step above. Together the rows are the lower band of the attention matrix that a "
               "full pass over the text would compute.")
    ui.downloads(f"generate-L{v.layer}H{v.head}", chart, gen.frame(v.layer, v.head))

    st.subheader("The KV cache")
    growth = pd.DataFrame({"step": list(range(n)) * 2, "tokens cached": [gen.prompt_length + s for s in range(n)] * 2,
                           "bytes": gen.cache_bytes + gen.cache_bytes_mha,
                           "cache": [f"{m.n_kv_heads} key/value heads (this model)"] * n
                           + [f"{m.n_heads} key/value heads (one per query head)"] * n})
    left, right = st.columns([1, 2])
    left.metric("Cache at this step", words.size(gen.cache_bytes[step]),
                help="2 × layers × key/value heads × d_head × tokens × 4 bytes (fp32)")
    if m.n_kv_heads < m.n_heads:
        left.metric("Without grouped-query attention", words.size(gen.cache_bytes_mha[step]),
                    help=f"{m.n_heads} query heads share {m.n_kv_heads} key/value heads: the cache is "
                         f"{m.n_heads // m.n_kv_heads}× smaller than with one key/value head per query head")
    left.metric("Time of this step", f"{gen.step_seconds[step] * 1e3:.0f} ms",
                help="step 0 is the prefill of the whole prompt; the others run one token")
    ui.chart(charts.cache_growth(growth, step), right)
    with proof_box:
        _proof(w)


def _lens(name: str, gen, step: int) -> None:
    """The logit lens of the text so far at the fed token: the top token each layer would write there."""
    q = gen.query_position(step)
    st.subheader("What each layer would write here (logit lens)")
    try:
        column = data.lens_column(name, tuple(int(i) for i in gen.input_ids[: q + 1]))
    except probes.ProbesError as exc:
        st.warning(f"The logit lens could not run: {ui.safe(ui.in_app_words(exc))}")
        return
    rows = [stage(r) for r in range(int(column["row"].max()) + 1)]
    ui.chart(lens_grid(column, "stage", rows, title="Top token after each layer"))
    st.caption("The residual stream at the fed token after each layer, read through the final norm and the "
               "unembedding (the Logit lens page shows every token): the cell's colour is the probability, from 0 "
               "(white) to 1 (blue); hover for the top 5. The last row is the model's own prediction at this step.")


def _proof(w: data.Writing) -> None:
    try:
        proof = data.generation_proof(w)
    except probes.ProbesError as exc:
        st.warning(f"The proof could not run: {ui.safe(exc)}")
        return
    same = "" if proof.hf_same_tokens is None else (
        " · Hugging Face's generate writes the same tokens" if proof.hf_same_tokens
        else " · Hugging Face's generate writes DIFFERENT tokens")
    exact = ("float64 check skipped on this deployment, " if proof.exact_attention_max_abs_diff is None
             else f"float64 max |Δ| {words.difference(proof.exact_attention_max_abs_diff, 0)}, ")
    label = (f"Cache proof {'PASS' if proof.passed else 'FAIL'} · every step's attention row equals one full pass: "
             f"{exact}fp32 {words.difference(proof.attention_max_abs_diff)}{same}")
    good = proof.passed and proof.hf_same_tokens is not False
    ui.badge(label, icon=":material/check_circle:" if good else ":material/error:", color="green" if good else "red",
             help="The same steps rerun in float64 against a float64 full pass of our network (only a wrong cache "
                  "could differ by more than ~1e-14), and the fp32 steps shown here against Hugging Face's fp32 full "
                  "pass (one row and a whole matrix round differently: up to ~1e-5). Greedy: Hugging Face's own "
                  "generate must write the same tokens.")
