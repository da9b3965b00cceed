"""Circuit: which earlier heads the sidebar's head reads from. Three answers side by side, each as a small layered
graph (senders in their layer's column, an edge's width its strength; a click on a head opens it on Explore):

* composition from the weights alone (Elhage et al. 2021: Q-, K- and V-composition, against random matrices; an
  edge drawn only above its noise floor, :func:`probes.evidence.edges.composition_floors`), in the convention the
  page's control picks: as computed here (raw) or TransformerLens's default (LayerNorm's centring folded in);
* composition on the sidebar's text (each earlier head's share of this head's scores on the cells it weighs most,
  the QK attribution of "Why this weight?" summed);
* path patching (a sender's output from a corrupted text patched into only this head's q, k or v input; the largest
  effects checked against the same patch from null corruptions, an edge drawn only above that floor)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import probes
from dashboard.core import ui, words
from dashboard.core.grid_charts import effect_grid

from . import charts, data
from .state import CircuitState

TOP = 5  # senders drawn per answer



def _said(line: str) -> str:
    """A glossary line as a sentence: capitalised, with its full stop."""
    return line[:1].upper() + line[1:] + ("" if line.endswith(".") else ".")

def _graph(ctx: ui.Context, edges: pd.DataFrame, title: str, key: str) -> None:
    v, m = ui.view(), ctx.model
    chart = charts.circuit_graph(edges, (v.layer, v.head), m.n_layers, m.n_heads, title)
    ui.chart(chart, on_select=lambda: ui.open_clicked_head(key, m.n_layers, m.n_heads), selection_mode="head",
             key=key)


CONVENTION = {"raw": "as computed here (raw)",
              "transformerlens": "TransformerLens's default (LayerNorm centring folded in)"}
SAID = {"raw": "as computed here (raw): LayerNorm's centring left out",
        "transformerlens": "TransformerLens's default: LayerNorm's centring folded in (fold_ln, "
                           "center_writing_weights)"}


def _convention(ctx: ui.Context) -> tuple[str, str]:
    """The convention of the composition scores from the weights (the grid and the weights' graph), as the page's
    control picks it, and the words that name it for this model (:func:`probes.effects.compose.conventions`: both
    the same on an RMSNorm model; raw alone on a post-norm one, where the control is off)."""
    from probes.effects.compose import CONVENTIONS, conventions

    about = conventions(ctx.model)
    if len(about) == 1 and ui.part(CircuitState).convention != "raw":  # BERT: raw alone, whatever another model chose
        ui.change(CircuitState, convention="raw")
    chosen = ui.bound("radio", "convention", "Convention of the composition scores from the weights", st,
                      of=CircuitState,
                      options=list(CONVENTION), format_func=CONVENTION.get, horizontal=True, disabled=len(about) == 1,
                      help="TransformerLens folds LayerNorm's centring into the weights by default (fold_ln and "
                           "center_writing_weights: W_Q, W_K, W_V and each head's W_O lose their mean over the "
                           "residual dimension), and its composition scores read those weights; the scores here leave "
                           "it out unless you pick TransformerLens's default. RMSNorm models (SmolLM2) give the same "
                           "numbers either way; a post-norm model (BERT, minilm) has the raw numbers alone.")
    return chosen, SAID[chosen] if about == CONVENTIONS else f"{CONVENTION[chosen]}; {about[chosen]}"


GRID = {"weights k": "K-composition (weights)", "weights q": "Q-composition (weights)",
        "weights v": "V-composition (weights)", "text k": "key side on this text", "text q": "query side on this text"}


def _grid(ctx: ui.Context, convention: tuple[str, str]) -> None:
    """Every earlier head as a layers × heads grid of one answer: composition from the weights in ``convention``
    (its random baseline in the title and the legend's range) or on this text (each head's share of the scores)."""
    v, m = ui.view(), ctx.model
    what = ui.bound("radio", "circuit_grid", "Every earlier head, coloured by", st, options=list(GRID),
                    format_func=GRID.get, horizontal=True, of=CircuitState)
    source, kind = what.split()
    if source == "weights":
        frame = data.composition(ctx.inp.model, v.layer, v.head, convention[0])
        frame = frame[frame.kind == kind]
        mean, sd = float(frame.baseline_mean.iloc[0]), float(frame.baseline_sd.iloc[0])
        cells = frame.rename(columns={"sender_layer": "layer", "sender_head": "head"})
        cells = cells.assign(above_random=cells["score"] - mean)  # coloured against the baseline, not from 0
        title = f"{GRID[what]} onto head {v.layer}.{v.head} · random matrices: {mean:.3f} ± {sd:.3f}"
        chart = effect_grid(cells, "above_random", v.layer, m.n_heads, title, signed=True, extra=("score",))
    else:
        frame = data.senders_on_text(ctx.inp, v.layer, v.head)
        cells = frame[frame.kind == kind].rename(columns={"sender_layer": "layer", "sender_head": "head"})
        chart = effect_grid(cells, "share", v.layer, m.n_heads,
                                   f"{GRID[what]}: each earlier head's share of head {v.layer}.{v.head}'s scores",
                                   signed=True)
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("circuit_grid_click", m.n_layers, m.n_heads),
             selection_mode="head", key="circuit_grid_click")
    st.caption("Rows: the layers before the head's; columns: heads. Composition from the weights is coloured by how "
               "far each score is above what random matrices of the same shapes score (the baseline in the title; "
               "white: no more than random; the score itself in the tooltip); on this text, by each head's share of "
               "the scores, which can be negative (a head that lowers them). Both diverge around 0. Click a cell to "
               f"open that head on Explore. Composition from the weights, convention {convention[1]}.")


def _weights(ctx: ui.Context, convention: tuple[str, str]) -> None:
    from probes.effects.compose import notes
    from probes.evidence.edges import COMPOSITION_RULE

    v = ui.view()
    st.subheader("From the weights: composition scores")
    frame = data.composition(ctx.inp.model, v.layer, v.head, convention[0])
    mean, sd = float(frame.baseline_mean.iloc[0]), float(frame.baseline_sd.iloc[0])
    senders = int(frame.senders.max())
    floor, z = (float(x) for x in frame.loc[frame.senders == senders, ["floor", "z_crit"]].iloc[0])
    above = frame[frame.above_floor]
    random = f"random matrices of the same shapes score {mean:.3f} ± {sd:.3f} (mean ± sd of 20 draws)"
    if above.empty:
        st.info(f"No earlier head's composition score is above the noise floor ({random}; the floor for "
                f"{senders} senders is {floor:.4f}), so no edge is drawn: from the weights alone, head "
                f"{v.layer}.{v.head} reads no earlier head more than random matrices would (convention "
                f"{convention[1]}). The table lists every score.")
    else:
        top = above.loc[above.score.sort_values(ascending=False).index[:TOP]]
        edges = top.assign(value=top["score"], label=[f"{a}.{b} → {k}: {s:.3f} (floor {f:.3f})" for a, b, k, s, f in
                                                       zip(top.sender_layer, top.sender_head, top.kind, top.score,
                                                           top.floor, strict=True)])
        _graph(ctx, edges, f"Head {v.layer}.{v.head}: composition from the weights (random: {mean:.3f} ± {sd:.3f}, "
               f"floor {floor:.3f})", "circuit_weights")
        st.caption(f"Elhage et al. (2021): how much of what an earlier head writes this head can read through its "
                   f"query (q), key (k) or value (v), ‖W_OV·W_QK‖ over the product of their sizes, from 0 to 1; an "
                   f"edge's width is that composition score. Only edges above their noise floor are drawn "
                   f"({len(above)} of {int(frame.score.notna().sum())}; at most the {TOP} largest): {random}, and "
                   f"{COMPOSITION_RULE} (here z = {z:.2f}, a floor of {floor:.4f}). Convention {convention[1]}; "
                   + "; ".join(notes(ctx.model, convention[0])) + ". " + ui.safe(_said(words.gloss("floor"))))
    shown = frame.sort_values("score", ascending=False).rename(columns={"z": "above", "floor": "noise floor",
                                                                        "above_floor": "above the floor"})
    ui.table(shown.drop(columns=["z_crit", "senders"]), height=220)
    ui.downloads(f"circuit-weights-L{v.layer}H{v.head}-{convention[0]}", None, frame)


def _on_text(ctx: ui.Context) -> None:
    v = ui.view()
    st.subheader("On this text: what wrote its scores")
    frame = data.senders_on_text(ctx.inp, v.layer, v.head)
    top = frame.loc[frame.contribution.abs().sort_values(ascending=False).index[:TOP]]
    edges = top.assign(value=top["share"], label=[f"{a}.{b} → {k}" for a, b, k in
                                                   zip(top.sender_layer, top.sender_head, top.kind, strict=True)])
    _graph(ctx, edges, f"Head {v.layer}.{v.head}: its scores' senders on this text", "circuit_text")
    cells = int(frame.cells.iloc[0]) if len(frame) else 0
    st.caption(f"The {cells} cells head {v.layer}.{v.head} weighs most on the sidebar's text (the first token left "
               "out as a key: an attention sink would be every head's top cell), each score split into what wrote its "
               "query × what wrote its key (as \"Why this weight?\" on Explore), the parts of each earlier head "
               "summed: on the query side (q) and the key side (k). An edge's width is that head's share of the "
               "cells' summed score; the table lists every sender.")
    ui.table(frame.sort_values("contribution", key=abs, ascending=False), height=220)
    ui.downloads(f"circuit-text-L{v.layer}H{v.head}", None, frame)


CORRUPTED = {"Xiaoming gave the apple to Xiaohong because she was hungry.":
             "Xiaoming gave the apple to Xiaohong because he was hungry."}  # a minimal pair of the story sentence


PARTS = {"q": "query", "k": "key", "v": "value"}


def _patching(ctx: ui.Context) -> None:
    v = ui.view()
    s = ui.part(CircuitState)
    st.subheader("Path patching: which heads reach it through its q, k or v")
    left, right = st.columns([3, 1])
    # the link's corrupted text, or the page's own minimal pair of the story sentence ("" in the link)
    st.session_state["w_patch_text"] = s.patch_text or CORRUPTED.get(ctx.inp.text.strip(), "")
    corrupted = left.text_input("Corrupted text (the same number of tokens as the sidebar's)", key="w_patch_text",
                                on_change=lambda: ui.change(CircuitState, patch_text=st.session_state["w_patch_text"]),
                                help="each earlier head's output on this text replaces its output on the sidebar's, "
                                     "but only in what this head's query, key or value reads: everything else clean")
    into = ui.bound("radio", "patch_into", "Patch into", right, options=["k", "q", "v"], horizontal=True,
                    format_func=PARTS.get, of=CircuitState)
    if not corrupted.strip():
        st.caption("Type a corrupted text (e.g. the sidebar's with one word changed for another of one token) to "
                   "patch each earlier head from it into this head.")
        return
    pressed = st.button("Run path patching", key="circuit_run")
    if pressed:  # asked again: a Cancel of the same run is forgotten
        ui.uncancel("patch")
    if not pressed and not v.has_run("patch"):
        n = v.layer * ctx.model.n_heads
        st.caption(f"{n} earlier heads, one patched copy each (batched): a few seconds on minilm, about a minute on "
                   "smollm2.")
        return
    ui.update(ran=ui.view().with_run("patch").ran)  # a link to this view runs it again where it is opened
    signature = (ctx.inp, corrupted, v.layer, v.head, into)  # what a Cancel stopped: another input runs
    if ui.cancelled("patch", signature, "Path patching"):
        return
    # drawn only while the run is computed (not when it is cached), with its Cancel button
    bar = ui.Progress("patch", "Patching each earlier head from the corrupted text into this head…", signature,
                      lazy=True)

    def step(done: int, total: int, what: str) -> None:
        bar.progress(done / total, text=f"Patching each earlier head into this head's {PARTS[into]}: {done:,} of "
                                        f"{total:,} senders patched"
                                        + (" (the largest, again from each null corruption)" if what == "floors"
                                           else ""))

    try:
        frame = data.path_patch(ctx.inp.model, ctx.inp.text, corrupted, v.layer, v.head, into, progress=step)
    except probes.ProbesError as exc:
        st.info(ui.safe(ui.in_app_words(exc)))
        return
    finally:  # done, or stopped (past the public bound: the page says so)
        bar.empty()
    from probes.evidence.edges import NULLS, patch_rule

    measure = "loss" if "loss" in frame else "pattern_shift"
    unit = ("(the mean next-token loss, nats)" if measure == "loss" else
            "(the share of each query row's weight that moved, 0 to 1)")
    checked = frame[frame.checked]
    above = checked[checked[f"{measure}_above"]]
    above = above.loc[above[measure].abs().sort_values(ascending=False).index]
    if above.empty:
        st.info(f"No earlier head's effect through this head's {PARTS[into]} is above its noise floor: none of the "
                f"{len(checked)} largest changes in {words.said(measure)} is larger than what a change elsewhere in "
                f"the text does through the same path ({NULLS} null corruptions: the sidebar's text with as many "
                "tokens changed at other positions), so no edge is drawn. The table lists every sender.")
    else:
        edges = pd.DataFrame({"sender_layer": above["layer"], "sender_head": above["head"], "kind": into,
                              "value": above[measure],
                              "label": [f"{a}.{b} → {into} (floor {f:.4f})" for a, b, f in
                                        zip(above["layer"], above["head"], above[f"{measure}_floor"], strict=True)]})
        _graph(ctx, edges, f"Head {v.layer}.{v.head}: senders through its {PARTS[into]}, by {words.said(measure)}",
               "circuit_patch")
        st.caption(f"Each earlier head's output on the corrupted text patched into only this head's {PARTS[into]} "
                   f"(everything else on the sidebar's text): an edge's width is the change in {words.said(measure)} "
                   f"{unit}. The {len(checked)} largest were checked against their noise floor, the same patch from "
                   f"{NULLS} corruptions that change as many tokens elsewhere in the text; the {len(above)} above it "
                   f"are drawn: {patch_rule(words.said(measure), NULLS)}.")
    names = {f"{m}_{part}": f"{words.said(m)}: {said}" for m in ("loss", "logit_diff", "pattern_shift",
                                                                  "pattern_change")
             for part, said in (("floor", "noise floor"), ("null_mean", "null mean"), ("null_sd", "null sd"),
                                ("above", "above the floor"))}
    names["checked"] = "checked against its floor"
    # the column an edge's width is, and its floor, first after the sender: on screen without scrolling sideways
    first = [c for c in ("layer", "head", measure, f"{measure}_floor", f"{measure}_above", "checked") if c in frame]
    shown = frame[first + [c for c in frame.columns if c not in first]]
    ui.table(shown.sort_values(measure, key=abs, ascending=False).rename(columns=names), height=220)
    ui.downloads(f"circuit-patch-L{v.layer}H{v.head}-{into}", None, frame)


def render(ctx: ui.Context) -> None:
    v = ui.view()
    st.header(f"Circuit: which heads {ui.safe(ctx.model.name)}'s head {v.layer}.{v.head} reads from")
    if not ctx.ready():
        return
    if ui.without_scratch(ctx.model, "The circuit view (every head's weights and outputs)"):
        return
    if v.layer == 0:
        st.info("A head in layer 0 reads only the embeddings: pick a head in a later layer (the sidebar's Layer "
                "slider) to see which earlier heads it reads from.")
        return
    convention = _convention(ctx)
    _grid(ctx, convention)
    _weights(ctx, convention)
    _on_text(ctx)
    _patching(ctx)
