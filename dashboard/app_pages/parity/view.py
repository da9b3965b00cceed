"""Parity: does our from-scratch pass compute the attention Hugging Face computes, on this input, on
every layer and head?"""

from __future__ import annotations

import json
import shlex

import numpy as np
import pandas as pd
import streamlit as st

import probes
from dashboard.core import models, parity, ui, words
from probes.scratch import FLOAT64_BACKENDS

from . import charts, data


def render(ctx: ui.Context) -> None:
    st.header("Parity: Hugging Face vs our from-scratch pass")
    if not ctx.model.scratch_supported:
        st.info(f"{ui.safe(ctx.model.name)} runs in the Hugging Face view only, so there is nothing to compare: "
                f"{ui.safe(ctx.model.scratch_problem)}")
        return
    if not ctx.ready():
        return
    r = parity.parity_report(ctx.inp)
    layer, head, _ = r.worst_head()
    versus = words.versus(r.reference, r.candidate) + (f" (kernel: {r.backend})" if r.backend not in ("", "eager")
                                                         else "")
    tol = r.tolerance
    if r.passed and r.attention_max_abs_diff == 0:
        st.success(f"PASS · {versus} · the attention is identical to the last bit on every layer and head")
    elif r.passed:
        st.success(f"PASS · {versus} · max |Δ| attention {words.difference(r.attention_max_abs_diff)} over every layer "
                   "and head "
                   f"(float32 rounding allows {tol['attention']:.1e} at {len(r.tokens)} tokens); worst head "
                   f"{layer}.{head}")
    else:
        st.error(f"FAIL · {versus} · max |Δ| attention {words.difference(r.attention_max_abs_diff)} "
                 f"at head {layer}.{head} (tolerance {tol['attention']:.1e})")
    if r.note:
        st.info(r.note)
    _float64(ctx.inp)
    cols = st.columns(4)
    cols[0].metric("attention max |Δ|", words.difference(r.attention_max_abs_diff),
                   help=f"tolerance {tol['attention']:.1e}: float32 rounding of a row of {len(r.tokens)} keys "
                        "(eps × max(tokens, 128))")
    cols[1].metric("hidden states max |Δ| ÷ scale", words.difference(r.hidden_max_rel_diff),
                   help=f"tolerance {tol['hidden']:.0e} of each layer's scale: max |Δ| divided by the largest |value| "
                        f"of that layer's hidden state when it is over 1 (modern decoders carry values in the "
                        f"thousands, where fp32 itself steps by more than 1e-4); absolute max |Δ| "
                        f"{words.difference(r.hidden_max_abs_diff)}")
    logits = r.logits_max_rel_diff
    unread = logits is None and ctx.model.has_lm_head  # a public app keeps no logits in its traces (trace.run_now)
    cols[2].metric("logits max |Δ| ÷ scale", "not compared" if unread else words.difference(logits),
                   help=("not compared on a public app, which keeps no logits (tokens × vocabulary numbers a text); "
                         "run the app yourself (make app) to compare them" if unread else
                         "n/a: the model has no language-model head")
                   if logits is None else
                   f"tolerance {tol['logits']:.0e} of the logits' scale (their largest |value| when over 1); "
                   f"absolute max |Δ| {words.difference(r.logits_max_abs_diff)}")
    qkv = r.qkv_max_abs_diff
    cols[3].metric("q, k, v max |Δ|", words.difference(qkv))

    diffs = np.array([lp.per_head for lp in r.per_layer])
    chart = charts.parity_heatmap(diffs, tol["attention"])
    ui.chart(chart)
    over = int((diffs > tol["attention"]).sum())
    if diffs.max(initial=0) == 0:
        st.caption("Every head: 0 (identical to the last bit).")
    else:
        layer, head = (int(i) for i in np.unravel_index(int(diffs.argmax()), diffs.shape))
        st.caption(f"Largest max |Δ| {diffs.max():.1e}, at layer {layer}, head {head}; {over} of {diffs.size} heads "
                   f"above the tolerance {tol['attention']:.2g}.")
    frame = pd.DataFrame([{"layer": lp.layer, "head": h, "attention_max_abs_diff": d,
                           "hidden_max_abs_diff": lp.hidden_max_abs_diff, "hidden_max_rel_diff": lp.hidden_max_rel_diff}
                          for lp in r.per_layer for h, d in enumerate(lp.per_head)])
    ui.downloads("parity", chart, frame)
    st.download_button("Report (JSON)", lambda: json.dumps(r.to_dict(), ensure_ascii=False, indent=1), "parity.json",
                       "application/json", on_click="ignore", icon=":material/download:")
    st.caption(f"{len(r.tokens)} tokens, compared over the real tokens (padding left out). The same check from a "
               "terminal:")
    command = ["python", "-m", "probes", "parity", "--model", ctx.inp.model, "--text", ctx.inp.text]
    if ctx.inp.pair:
        command += ["--pair", ctx.inp.pair]
    if ctx.inp.source == "scratch" and ctx.inp.backend != "eager":
        command += ["--backend", ctx.inp.backend]
    if ctx.inp.truncate:
        command.append("--truncate")
    if parity.proof_of(ctx.inp) is not None:
        command += ["--dtype", "float64"]
    st.code(shlex.join(command), language="bash")
    _massive(ctx)


def _massive(ctx: ui.Context) -> None:
    """The massive activations of this input's hidden states (Sun et al. 2024), read off the Trace."""
    st.subheader("Massive activations")
    frame = data.massive_activations(ctx.inp)
    rule = ("single numbers of the residual stream whose size is over 100 and over 1,000 × the median size of their "
            "layer's hidden state (Sun et al. 2024)")
    if frame.empty:
        st.info(f"No massive activations in {ui.safe(ctx.model.name)} on this text: no hidden-state number is over 100 "
                "and over 1,000 × its layer's median size. Larger decoders have them (SmolLM2 does, on the first "
                "token).")
        return
    layers = sorted(frame["layer"].unique())
    st.caption(f"{len(frame)} massive activations, in layers {layers[0]}–{layers[-1]}: {rule}. Layer ℓ is the residual "
               "stream after block ℓ (the last is after the final norm). They usually sit on the first token, where "
               "many heads park their weight (the attention sink), and they are why the hidden-state figures above "
               "are judged in units of their scale.")
    ui.table(frame, formats={"value": "%.1f", "times_median": "%.0f"})
    if ctx.run.causal:  # the sink named above: what a decoder's cache without it costs
        ui.page_link("kv", "What happens without the sink: What if it attended less?")


def _float64(inp: models.Input) -> None:
    """The proof: both passes again on a float64 copy of the model, where rounding is ~1e-16 and two
    implementations of the same function agree to ≤ 1e-10 on any machine."""
    backend = parity.parity_backend(inp)
    proof = parity.proof_of(inp)
    if proof is None:
        if backend not in FLOAT64_BACKENDS:
            st.caption(f"The {backend} kernel computes in fp32, fp16 and bf16 only, so it cannot be proven in "
                       "float64: pick the eager or sdpa backend in the sidebar to prove our pass.")
            return
        left, right = st.columns([1, 3], vertical_alignment="center")
        right.caption("float32 figures move with the CPU's vector kernels. In float64 two passes of the same "
                      "function agree to within 1e-10 on every machine: that is the proof.")
        if not left.button("Prove in float64", icon=":material/verified:"):
            return  # and after a Cancel (its rerun): the button again, nothing kept
        bar = ui.Progress("proof", "Running both passes on a float64 copy of the model…", inp)

        def step(done: int, total: int) -> None:
            said = ("copied in float64" if done == 1 else "Hugging Face's pass" if done == 2 else "our pass"
                    if done == 3 else f"layer {done - 4} compared")
            bar.progress(done / total, text=f"Proving in float64: {said} ({done} of {total} steps)")

        try:
            parity.prove_parity(inp, progress=step)
        except probes.ProbesError as exc:
            st.warning(f"The float64 proof could not run: {ui.safe(ui.in_app_words(exc))}")
            return
        finally:
            bar.empty()
        st.rerun()  # the page again, proven: the badge above it and the command below it say so
    logits = ("" if proof.logits_max_rel_diff is None
              else f", logits {words.difference(proof.logits_max_rel_diff, 0)} of their scale")
    figures = (f"attention max |Δ| {words.difference(proof.attention_max_abs_diff, 0)}, hidden states "
               f"{words.difference(proof.hidden_max_rel_diff, 0)} of their scale{logits} "
               f"(tolerance {proof.tolerance['attention']:.0e})")
    if proof.passed:
        st.success(f"Proven in float64 · our pass ({backend}) and Hugging Face's compute the same function: {figures}",
                   icon=":material/verified:")
    else:
        st.error(f"float64 FAIL · our pass ({backend}) and Hugging Face's differ by more than rounding: {figures}")
