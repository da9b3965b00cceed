"""Find heads: from one query token to one key word, the weight in every layer and head, as one grid: the head
a question is about is the cell that stands out (click it to open that head on Explore). With the default
sentence it opens on "she" → "Xiaohong". The grid can also show what the weight leaves out: the value-weighted
norm (how much the key actually writes into the query's output) and the ablation effect (how much the query
token's representation changes when the head is taken out)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import probes

from .. import charts, data, ui
from ..state import STORIES


def render(ctx: ui.Context) -> None:
    st.header("Find heads: where one token looks, in every layer and head")
    if not ctx.ready():
        return
    words = data.text_words(ctx.inp)
    if not words:
        st.info("The text has no words to look at.")
        return
    cols = st.columns(2)
    query = ui.query_picker(ctx.info, cols[0])
    story = STORIES.get(ctx.inp.text.strip())
    default = next((i for i, (w, _) in enumerate(words) if story and w.lower() == story[1].lower()), 0)
    key = cols[1].selectbox("Key word", range(len(words)), index=default, key="find_key",
                            format_func=lambda i: f"{i}: {words[i][0]}",
                            help="the word attended to; its pieces' weights are summed")
    word, keys = words[key]
    weights, uniform = data.query_weights(ctx.inp, query, tuple(keys))
    layers, heads = weights.shape
    token = ctx.info.tokens[query]
    label = f"“{token.strip()}” → “{word}”"
    frame = pd.DataFrame([dict(label=label, layer=layer, head=head, score=float(weights[layer, head]),
                               baseline=uniform, n=1) for layer in range(layers) for head in range(heads)])
    v = ui.view()
    problem = st.session_state.pop("heads_problem", None)
    if problem:
        st.warning(ui.safe(problem))
    offered = list(MEASURES) if ctx.model.family is not None else ["weight"]
    measure = st.radio("Colour by", offered, horizontal=True, key="find_measure", format_func=MEASURES.get,
                       help="weight: the query's attention on the key word. Value-weighted norm ‖Σ α·f(x)‖: that "
                            "weight times what the key's value writes into the residual stream (Kobayashi et al. "
                            "2020), so a head that looks at a word whose value is near zero stays pale. Ablation "
                            "effect: 1 − cosine of the query token's last hidden state when the head is zeroed (not "
                            "about the key word: does the model use this head at this token at all?)."
                            + ("" if ctx.model.family is not None else " Norms and ablation need a model the "
                               "from-scratch path covers."))
    if measure != "weight":
        _other_measure(ctx, measure, query, keys, label, frame, v)
        return
    chart = charts.head_grid(frame, label, layers, heads, selected=(v.layer, v.head))
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("find_grid", ctx.model.n_layers, ctx.model.n_heads),
             selection_mode="head", key="find_grid")
    best = np.unravel_index(int(weights.argmax()), weights.shape)
    if ctx.info.causal and min(keys) > query:
        st.caption(f"“{ui.safe(word)}” comes after the query in a decoder: no head can look at it (every weight is 0).")
    else:
        st.caption(f"Head {best[0]}.{best[1]} puts the most of “{ui.safe(token.strip())}”'s attention on "
                   f"“{ui.safe(word)}”: {weights.max():.2f}, against {uniform:.2f} under uniform attention (the "
                   "grid's 0). The outlined cell is the sidebar's head; click any cell to open it on Explore.")
    ui.downloads("find-heads", chart, frame[["layer", "head", "score", "baseline"]].rename(
        columns={"score": "weight", "baseline": "uniform"}))


MEASURES = {"weight": "attention weight", "norm": "value-weighted norm", "ablation": "ablation effect"}


def _other_measure(ctx: ui.Context, measure: str, query: int, keys: list[int], label: str, frame, v) -> None:
    """The grid coloured by the value-weighted norm on the key word, or by the ablation effect at the query token,
    with the weight beside it in the tooltip."""
    m = ctx.model
    try:
        if measure == "norm":
            values = data.query_norms(ctx.inp, query, tuple(keys))
            grid = frame[["layer", "head"]].assign(norm=values.ravel(), weight=frame["score"])
            column, title = "norm", f"{label}: value-weighted norm (click a cell to open it on Explore)"
        else:
            effects = data.ablation(ctx.inp.model, ctx.inp.text, "zero", query)
            grid = effects[["layer", "head", "token_change"]].merge(
                frame[["layer", "head", "score"]].rename(columns={"score": "weight"}), on=["layer", "head"])
            column = "token_change"
            title = f"{label}: change of the query token when the head is zeroed (click: Explore)"
    except probes.ProbesError as exc:
        st.error(ui.safe(ui.in_app_words(exc)))
        return
    chart = charts.effect_grid(grid, column, m.n_layers, m.n_heads, title=title, selected=(v.layer, v.head),
                               extra=("weight",))
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("find_grid", m.n_layers, m.n_heads),
             selection_mode="head", key="find_grid")
    best = grid.loc[grid[column].idxmax()]
    heaviest = grid.loc[grid["weight"].idxmax()]
    what = "the largest norm" if measure == "norm" else "the largest change when taken out"
    line = (f"Head {int(best['layer'])}.{int(best['head'])} has {what} ({best[column]:.3g}); the largest weight is "
            f"head {int(heaviest['layer'])}.{int(heaviest['head'])}'s ({heaviest['weight']:.2f}).")
    if (best["layer"], best["head"]) != (heaviest["layer"], heaviest["head"]):
        line += " The weight alone points elsewhere: see both on Explore."
    st.caption(line + " The outlined cell is the sidebar's head.")
    ui.downloads(f"find-heads-{measure}", chart, grid)
