"""Q/K/V step by step: for one layer, head and query token, each step of softmax(q·Kᵀ/√d_k)·V with its
numbers, from the Trace (so it works for any supported model, either source)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from dashboard.core import ui, words
from dashboard.core.charts import labels
from probes import explain

from . import charts, data

SHOWN_KEYS = 12  # k and v vectors drawn as rows (the table has every key)
TOP_KEYS = 3  # keys whose first numbers are written out
FIRST = 6  # numbers of a vector written out
SHOWN_TERMS = 4  # products of q·k written out
# the formula scrolls in its own box where the page is narrower than it (never the page itself)
FORMULA_BOX = ("<style>.st-key-qkv_formula .katex-display { position: relative; overflow-x: auto; overflow-y: hidden; }"
               "</style>")
AGREE = 1e-4  # float32 rounding: a lazy trace recovers weights as exp(score − logsumexp), ~1e-5 off


def formula(d: int) -> None:
    """The attention formula, d_k on a line of its own (the two side by side are wider than a phone)."""
    st.html(FORMULA_BOX)
    with st.container(key="qkv_formula"):
        st.latex(r"\begin{gathered}\text{output}_i = \sum_j \operatorname{softmax}_j\!\left(\frac{q_i \cdot k_j}"
                 rf"{{\sqrt{{d_k}}}}\right) v_j \\ d_k = {d}\end{{gathered}}")


def render(ctx: ui.Context) -> None:
    v = ui.view()
    st.header(f"Q/K/V step by step: layer {v.layer}, head {v.head}")
    if not ctx.ready():
        return
    info = ctx.run
    query = ui.query_picker(info)
    s = data.steps(ctx.inp, v.layer, v.head, query)
    keys = labels(s.tokens)
    names = [charts.short(k) for k in keys]  # in the charts: a long token shortened with "…"
    d = len(s.q)
    formula(d)

    st.subheader("1 · The query vector q and the key vectors k")
    st.markdown(f"q is **{ui.safe(keys[query])}**'s vector for this head ({d} numbers); every token has a key "
                "vector k. Each is one slice of a linear map of the layer's input." + _sharing(s, ctx.model.n_heads))
    if s.q_unrotated is not None:
        _rotation(s, names[query])
    shown = _nearest(s, query)
    vectors = {f"q  {names[query]}": s.q, **{f"k  {names[j]}": s.k[j] for j in shown}}
    ui.chart(charts.vectors_heatmap(vectors, f"q and {len(shown)} of the {len(keys)} k vectors"))
    top = [j for j in np.argsort(-s.weights)[:TOP_KEYS] if s.allowed[j]]
    numbers = pd.DataFrame([{"vector": f"q  {keys[query]}", **_first(s.q)}]
                           + [{"vector": f"k  {keys[j]}", **_first(s.k[j])} for j in top])
    st.caption(f"The first {FIRST} of the {d} numbers of q and of the {len(top)} most attended keys' k (all of them "
               "in the colour strips above; hover for a value):")
    st.dataframe(numbers, hide_index=True)

    st.subheader("2 · Raw scores q · k, 3 · ÷ √d_k, 4 · softmax")
    st.markdown(
        f"Each score is the dot product of q with one k. Dividing by √d_k = {np.sqrt(d):.3f} "
        f"(the scale here is {s.scale:.6g}) keeps the scores from growing with the width. Softmax turns them "
        "into weights that sum to 1" + _masked(s)
        + (f". This layer soft-caps its scores (Gemma 2): the scaled score s becomes {s.softcap:g}·tanh(s ÷ "
           f"{s.softcap:g}) before the softmax, and the column × scale shows it capped" if s.softcap else ""))
    table = pd.DataFrame({"key": keys, "q·k": s.scores, "× scale": s.scaled, "allowed": s.allowed,
                          "softmax weight": s.weights, "model's weight": s.trace_weights})
    bars = {"q·k": np.where(s.allowed, s.scores, np.nan), "q·k × scale": np.where(s.allowed, s.scaled, np.nan),
            "softmax weight": np.where(s.allowed, s.weights, np.nan)}
    steps = charts.step_bars(s.tokens, bars, query)
    for chart in steps:
        ui.chart(chart)
    ui.table(table, formats={c: "%.6f" for c in ("q·k", "× scale", "softmax weight", "model's weight")})
    ui.downloads(f"qkv-L{v.layer}H{v.head}-q{query}", charts.steps_file(steps, len(keys)), table)
    check = "reproduce" if s.max_abs_diff <= AGREE else "do NOT reproduce"
    st.caption(f"These weights (float64) {check} the model's own attention row for {ui.safe(keys[query])} (float32): "
               f"max |Δ| {words.difference(s.max_abs_diff)}.")

    _worked(s, keys, d)

    st.subheader("5 · The weighted sum of v")
    heaviest = np.argsort(-s.weights)[:3]
    st.markdown("The head's output for this token is the value vectors v, mixed by the weights: "
                + ", ".join(f"{s.weights[j]:.3f} × v({ui.safe(keys[j])})" for j in heaviest) + " + …")
    rows = {f"{s.weights[j]:.3f} × v  {names[j]}": s.weights[j] * s.v[j] for j in _heaviest(s)}
    rows["= output"] = s.output
    ui.chart(charts.vectors_heatmap(rows, "weighted value vectors (heaviest) and their sum"))


def _first(vector: np.ndarray) -> dict[str, str]:
    """A vector's first numbers as table cells, then "…"."""
    cells = {f"[{i}]": f"{x:+.3f}" for i, x in enumerate(vector[:FIRST])}
    cells["…"] = f"({len(vector) - FIRST} more)" if len(vector) > FIRST else ""
    return cells


def _worked(s, keys: list[str], d: int) -> None:
    """One key worked through by hand: q·k as a sum of products, × scale, and its softmax share."""
    allowed = [j for j in np.argsort(-s.weights) if s.allowed[j]]
    key = st.selectbox("Work one key through by hand", allowed, key="qkv_key", format_func=lambda j: keys[j],
                       help="the most attended key first; any key the query may see")
    w = explain.work_key(s, int(key))
    terms = " + ".join(f"({s.q[i]:+.3f})·({s.k[key][i]:+.3f})" for i in range(min(SHOWN_TERMS, d)))
    more = f" + … ({d - SHOWN_TERMS} more products)" if d > SHOWN_TERMS else ""
    q_name, k_name = ui.safe(keys[s.query]), ui.safe(keys[key])
    st.markdown(
        f"**Worked through: {q_name} → {k_name}**\n\n"
        f"1. q·k = Σᵢ qᵢ·kᵢ = {terms}{more} = **{w.dot:.4f}**\n"
        f"2. × scale: {w.dot:.4f} × {s.scale:.6g} (= ÷ √{d} = ÷ {np.sqrt(d):.3f})"
        + (f", soft-capped: {s.softcap:g}·tanh({w.dot * s.scale:.4f} ÷ {s.softcap:g})" if s.softcap else "")
        + f" = **{w.scaled:.4f}**\n"
        f"3. softmax share: e^({w.scaled:.4f} − max) ÷ Σⱼ e^(scaledⱼ − max) = {w.numerator:.4f} ÷ "
        f"{w.denominator:.4f} = **{w.weight:.4f}** (subtracting the row's largest scaled score from every one "
        f"changes nothing but keeps e^x from overflowing)\n\n"
        f"The model's own weight for {k_name} is {s.trace_weights[key]:.4f}.")


def _nearest(s, query: int) -> list[int]:
    """The keys worth drawing: the most-attended ones, and the query itself, in text order."""
    picked = set(np.argsort(-s.weights)[: SHOWN_KEYS - 1].tolist()) | {query}
    return sorted(picked)


def _heaviest(s) -> list[int]:
    return sorted(np.argsort(-s.weights)[: min(SHOWN_KEYS, int(s.allowed.sum()))].tolist())


def _sharing(s, n_heads: int) -> str:
    """Grouped-query attention: which key/value head this query head reads, and who else reads it."""
    if len(s.kv_group) == 1:
        return ""
    others = ", ".join(str(h) for h in s.kv_group if h != s.head)
    return (f" This model uses grouped-query attention ({n_heads} query heads read {n_heads // len(s.kv_group)} "
            f"key/value heads): head {s.head} reads key/value head {s.kv_head}, which heads {others} read too, so "
            "the k and v below are theirs as well.")


def _pairs(s) -> str:
    """How q's numbers are read as turning pairs: all of them, or (a partial rotary) the first ones."""
    turned = 2 * len(s.angles)
    if turned == len(s.q):
        return f"The {len(s.q)} numbers are read as {len(s.angles)} pairs"
    return (f"The first {turned} of the {len(s.q)} numbers are read as {len(s.angles)} pairs (the other "
            f"{len(s.q) - turned} are never turned: a partial rotary)")


def _rotation(s, token: str) -> None:
    """Rotary models: q before and after it is turned by its position."""
    st.markdown(
        f"**Rotary positions.** This model has no table of position vectors: it turns q and k by their position "
        f"instead. {_pairs(s)}, and at position p pair i turns by the "
        f"angle p·ω_i; here the fastest pair turns {np.degrees(s.angles[0]) % 360:.0f}° (mod 360°), the slowest "
        f"{np.degrees(s.angles[-1]) % 360:.2g}°. A turn keeps the vector's length (|q| = "
        f"{np.linalg.norm(s.q_unrotated):.3f} before, {np.linalg.norm(s.q):.3f} after) and changes only its "
        "direction. Because every k is turned by its own position too, q·k depends on how far apart the two "
        "tokens are. The k vectors below are already turned.")
    ui.chart(charts.vectors_heatmap({f"q  {token}, before": s.q_unrotated, f"q  {token}, turned": s.q},
                                        "q before and after the rotary turn"))


def _masked(s) -> str:
    keys = np.arange(len(s.allowed))
    far = np.abs(keys - s.query) >= s.window if s.window is not None else np.zeros(len(keys), dtype=bool)
    if s.causal:  # a decoder: every later key is the future; its window reaches back only
        future, outside = int((~s.allowed & (keys > s.query)).sum()), int((~s.allowed & far & (keys < s.query)).sum())
    else:  # an encoder sees both ways: only its window masks (up to w − 1 positions on either side)
        future, outside = 0, int((~s.allowed & far).sum())
    parts = []
    if future:
        parts.append(f"the {future} future tokens are masked out (weight 0)")
    if outside:
        side = "back" if s.causal else "away on either side"
        parts.append(f"the {outside} tokens more than {s.window - 1} positions {side} are outside this layer's "
                     f"sliding window of {s.window} (weight 0)")
    return "; " + "; ".join(parts) + "." if parts else "."
