"""Pure functions that turn numbers into altair charts. No Streamlit and no model math here: they
take plain lists and arrays, so they are tested as chart specs without a browser."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd


def attention_frame(tokens: list[str], weights: np.ndarray, causal: bool = False) -> pd.DataFrame:
    """Long table of one head: one row per (query, key) pair, with positions so that repeated
    tokens stay distinct. For a causal model the future (key after query) is left out, so the
    chart shows it blank rather than as a confident zero."""
    n = len(tokens)
    if weights.shape != (n, n):
        raise ValueError(f"weights are {weights.shape}, expected ({n}, {n}) for {n} tokens")
    q, k = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    frame = pd.DataFrame({
        "query_pos": q.ravel(),
        "key_pos": k.ravel(),
        "weight": weights.astype(float).ravel(),
    })
    labels = [f"{i}: {t}" for i, t in enumerate(tokens)]
    frame["query"] = [labels[i] for i in frame["query_pos"]]
    frame["key"] = [labels[i] for i in frame["key_pos"]]
    if causal:
        frame = frame[frame["key_pos"] <= frame["query_pos"]]
    return frame.reset_index(drop=True)


def attention_heatmap(tokens: list[str], weights: np.ndarray, title: str = "", causal: bool = False) -> alt.Chart:
    """Heatmap of one head: rows are query tokens (who looks), columns key tokens (looked at)."""
    frame = attention_frame(tokens, weights, causal)
    order = [f"{i}: {t}" for i, t in enumerate(tokens)]
    step = 22 if len(tokens) <= 40 else max(6, 880 // len(tokens))  # one cell per token, labels readable
    return (
        alt.Chart(frame, title=title)
        .mark_rect()
        .encode(
            x=alt.X("key:N", sort=order, title="key (attended to)", axis=alt.Axis(labelAngle=-60, labelOverlap=False)),
            y=alt.Y("query:N", sort=order, title="query (attending)", axis=alt.Axis(labelOverlap=False)),
            # white is exactly 0: a pale cell means "little", never "nothing" drawn as something
            color=alt.Color("weight:Q", scale=alt.Scale(domain=[0, 1], range=["#ffffff", "#08519c"]), title="weight"),
            tooltip=[alt.Tooltip("query:N"), alt.Tooltip("key:N"), alt.Tooltip("weight:Q", format=".6f")],
        )
        .properties(width=alt.Step(step), height=alt.Step(step))
    )
