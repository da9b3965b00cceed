"""Logit lens (decoders): what the model would predict if it stopped after each layer. Every layer's residual
stream, at every token of the sidebar's text, goes through the model's own final norm and unembedding; a table
shows the top token of each (layer, position) coloured by its probability. A second view shows what each head of
the sidebar's layer writes towards the vocabulary: its direct effect on the logits."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from dashboard.core import trace, ui
from dashboard.core.lens_charts import lens_grid, visible

from . import data
from .state import LensState

COLUMNS = 16  # positions shown at a time: a cell holds a token as text (LENS_CELL wide)
VIEWS = {"layers": "Layers: the residual stream", "heads": "Heads: direct effect"}


def _window(n: int) -> tuple[int, int]:
    """The positions shown, [lo, hi): all of a short text; a slider over a long one, from the link's first position
    (the last positions where it names none, or one past this text's)."""
    if n <= COLUMNS:
        return 0, n
    asked = ui.part(LensState).lens_from
    st.session_state["w_lens_from"] = asked if 0 <= asked <= n - COLUMNS else n - COLUMNS
    lo = st.slider("First position shown", 0, n - COLUMNS, key="w_lens_from",
                   on_change=lambda: ui.change(LensState, lens_from=st.session_state["w_lens_from"]),
                   help=f"the table shows {COLUMNS} positions at a time")
    return lo, lo + COLUMNS


def _layers(ctx: ui.Context, lo: int, hi: int) -> None:
    lens = data.lens(ctx.inp.model, ctx.inp.text, ctx.inp.truncate, (lo, hi))
    chart = lens_grid(lens.layers, "stage", lens.stages, title=f"Top token after each layer ({ctx.model.name})")
    ui.chart(chart)
    st.caption("One row per layer (the residual stream entering it; the last row after the last layer), one column "
               "per token of the text: each cell is the token the model would predict next if it stopped there, "
               "coloured by its probability from 0 (white) to 1 (blue). Hover a cell for its top 5. The last row is "
               "the model's own prediction: its logits, exactly. ␣ is a space; ‹e5 a5› the bytes (hex) of a character "
               "the token holds only part of (a byte-level vocabulary splits 她 into such pieces).")
    last = lens.layers[(lens.layers.row == lens.n_layers) & (lens.layers["rank"] == 1)]
    said = "the last token" if hi == len(ctx.run.tokens) else f"token {hi - 1}, the last shown,"
    st.markdown(f"At {said} the model's prediction “{ui.safe(visible(last.piece.iloc[-1]))}” "
                f"({last.probability.iloc[-1]:.2f}) is on top {_settled(lens)}.")
    ui.downloads(f"logit-lens-{lo}-{hi - 1}", chart, lens.layers)


def _settled(lens) -> str:
    """From which row on the last token's top token is the final one ("after layer 12"), in words."""
    at = lens.layers[(lens.layers.position == lens.positions[-1]) & (lens.layers["rank"] == 1)].sort_values("row")
    final = at.token_id.iloc[-1]
    first = len(at) - 1
    while first > 0 and at.token_id.iloc[first - 1] == final:
        first -= 1
    if first == len(at) - 1:
        return "only after the last layer"
    return "from the embeddings on" if first == 0 else f"from {at.stage.iloc[first]} on"


def _heads(ctx: ui.Context, lo: int, hi: int) -> None:
    layer = ui.view().layer
    heads = data.lens(ctx.inp.model, ctx.inp.text, ctx.inp.truncate, (lo, hi), layer).heads
    reach = float(heads[heads["rank"] == 1].logit.max())
    frame = heads.assign(head=lambda f: [f"{layer}.{h}" for h in f["head"]])
    rows = [f"{layer}.{h}" for h in range(ctx.model.n_heads)]
    chart = lens_grid(frame, "head", rows, value="logit", reach=reach,
                             title=f"What each head of layer {layer} writes towards the vocabulary")
    ui.chart(chart)
    st.caption(f"The heads of layer {layer} (the sidebar's Layer slider picks another). A head writes its output into "
               "the residual stream; read through the final norm, with the norm's scale frozen at its value after "
               "the last layer (as the direct logit attribution on \"Does it matter?\" does), and the unembedding, "
               "that output adds to every token's logit. Each cell is the token a head pushes up the most: a logit "
               f"contribution, not a probability (no softmax), coloured from 0 (white) to {reach:.2f}, the largest "
               "in this layer's table. What a head does through later layers is not in it. Hover for the top 5. ␣ is a "
               "space; ‹e5 a5› the bytes (hex) of a character the token holds only part of.")
    ui.downloads(f"logit-lens-heads-L{layer}-{lo}-{hi - 1}", chart, heads)


def render(ctx: ui.Context) -> None:
    st.header("Logit lens: what each layer would predict")
    if not ctx.ready():
        return
    m = ctx.model
    if ui.without_scratch(m, "The logit lens", pick="smollm2 (offline) or a GPT-2 model"):
        return
    assert m.family is not None  # (without_scratch said so otherwise)
    if not m.predicts_tokens:
        what = "an encoder" if not m.is_causal else "a decoder checkpoint without one"
        st.info(f"{ui.safe(m.name)} has no language-model head ({what}, {ui.safe(m.family.title)}): the logit lens "
                "reads a decoder's residual stream through its final norm and unembedding, so it needs a decoder. "
                "Pick smollm2 (offline) or a GPT-2 model in the sidebar's Model menu.")
        return
    info = ctx.run
    if ctx.inp.pair:
        info = trace.run_info(replace(ctx.inp, pair=None))
    st.markdown("A decoder predicts the next token from its last hidden state: the residual stream after the last "
                "layer, through the final norm and the unembedding. The **logit lens** reads the stream the same way "
                "after every layer, to see when the prediction forms.")
    st.session_state["w_lens_view"] = ui.part(LensState).lens_view  # as the link or the last visit left it
    # a segmented control can be clicked off (None): the view keeps a view
    how = st.segmented_control("Show", list(VIEWS), format_func=lambda view: VIEWS[view], key="w_lens_view",
                               on_change=lambda: ui.change(LensState,
                                                           lens_view=st.session_state["w_lens_view"] or "layers"),
                               help="layers: the residual stream after each layer; heads: what each head of the "
                                    "sidebar's layer adds to the logits directly")
    if info.truncated_from:
        st.caption(f"The first {len(info.tokens):,} of {info.truncated_from:,} tokens (cut to the context window).")
    lo, hi = _window(len(info.tokens))
    (_heads if how == "heads" else _layers)(ctx, lo, hi)
