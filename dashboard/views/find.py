"""Find heads: from one query token to one key word, the weight in every layer and head, as one grid: the head
a question is about is the cell that stands out (click it to open that head on Explore). With the default
sentence it opens on "she" → "Xiaohong"."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

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
