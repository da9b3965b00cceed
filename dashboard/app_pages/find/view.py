"""Find heads: from one query token to one key word, the weight in every layer and head, as one grid: the head
a question is about is the cell that stands out (click it to open that head on Explore). With the default
sentence it opens on "she" → "Xiaohong". The grid can also show what the weight leaves out: the value-weighted
norm (how much the key actually writes into the query's output) and the ablation effect (how much the query
token's representation changes when the head is taken out)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import probes
from dashboard.core import ablation, questions, trace, ui, verdicts
from dashboard.core.grid_charts import effect_grid, head_grid
from probes import explain

from . import data
from .state import FindState


def render(ctx: ui.Context) -> None:
    st.header("Find heads: where one token looks, in every layer and head")
    if not ctx.ready():
        return
    words = trace.text_words(ctx.inp)
    if not words:
        st.info("The text has no words to look at.")
        return
    cols = st.columns(3)
    query = ui.query_picker(ctx.run, cols[0])
    # the question asked of the text (typed on Explore, picked here before, or the story's), never the sink
    key_default, other_default = questions.question(ctx.inp, query, verdicts.asked(ctx.inp))
    key = cols[1].selectbox("Key word", range(len(words)), index=key_default or 0, key="find_key",
                            format_func=lambda i: f"{i}: {words[i][0]}",
                            help="the word attended to; its pieces' weights are summed")
    against = cols[2].selectbox("Against (optional)", [-1, *range(len(words))], key="find_against",
                                index=0 if other_default is None else other_default + 1,
                                format_func=lambda i: "no other word" if i < 0 else f"{i}: {words[i][0]}",
                                help="the other candidate (for a pronoun, the other name it could refer to): heads are "
                                     "then ranked by the key word's weight minus this word's, so a head that looks at "
                                     "both does not win")
    word, pieces = words[key]
    other_pieces = words[against][1] if against >= 0 and against != key else []
    holder = next((words[i][0] for i, p in ((key, pieces), (against, other_pieces))
                   if explain.SINK in p and len(p) > 1), None)  # the word whose first piece is the first token
    st.session_state["find_sink"] = ui.part(FindState).count_sink  # as the link or the last visit left it
    sink = holder is not None and st.checkbox(
        f"Count “{ui.safe(holder)}”'s first piece", key="find_sink",
        on_change=lambda: ui.change(FindState, count_sink=st.session_state["find_sink"]),
        help="it is the text's first token, where heads park the attention they do not need (the attention sink): "
             "left out, a head neither answers nor looks at the other word by parking its attention there")
    keys, others = explain.counted(pieces, sink=sink), tuple(explain.counted(other_pieces, sink=sink))
    found = data.margins(ctx.inp, query, tuple(keys), others)
    weights, uniform = found.on_key, found.uniform
    layers, heads = weights.shape
    token = ctx.run.tokens[query]
    label = f"“{token.strip()}” → “{word}”"
    frame = pd.DataFrame([dict(label=label, layer=layer, head=head, score=float(weights[layer, head]),
                               baseline=uniform, n=1, sink=float(found.on_sink[layer, head]))
                          for layer in range(layers) for head in range(heads)])
    if others and found.on_other is not None:
        frame = frame.assign(against=found.on_other.ravel(), margin=found.score.ravel())
    v = ui.view()
    s = ui.part(FindState)
    problem = st.session_state.pop("heads_problem", None)
    if problem:
        st.warning(ui.safe(problem))
    offered = list(MEASURES) if ctx.model.family is not None else ["weight"]
    st.session_state["find_measure"] = s.find_measure if s.find_measure in offered else "weight"
    measure = st.radio("Colour by", offered, horizontal=True, key="find_measure", format_func=MEASURES.get,
                       on_change=lambda: ui.change(FindState, find_measure=st.session_state["find_measure"]),
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
    if others:
        other_word = words[against][0]
        chart = effect_grid(frame.rename(columns={"score": "weight"}), "margin", layers, heads, signed=True,
                                   selected=(v.layer, v.head), extra=("weight", "against", "sink"),
                                   title=f"“{token.strip()}”: weight on “{word}” minus on “{other_word}” (click a "
                                         "cell to open it on Explore)")
    else:
        chart = head_grid(frame, label, layers, heads, selected=(v.layer, v.head))
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("find_grid", ctx.model.n_layers, ctx.model.n_heads),
             selection_mode="head", key="find_grid")
    st.caption(_ranked(ctx, found, token, word, words[against][0] if others else None, pieces, query,
                       holder if holder is not None and not sink else None)
               + " The outlined cell is the sidebar's head; click any cell to open it on Explore.")
    if ctx.run.causal:  # the sink named above: what a decoder's cache without it costs
        ui.page_link("kv", "What happens without the sink: What if it attended less?")
    shown = frame[["layer", "head", "score", "baseline", "sink", *(["against", "margin"] if others else [])]]
    ui.downloads("find-heads", chart, shown.rename(columns={"score": "weight", "baseline": "uniform"}))
    _judged(ctx, query, words, key, against)


def _judged(ctx: ui.Context, query: int, words: list, key: int, against: int) -> None:
    """The question the grid asks (the query token's word → the key word, against the other word), judged: the head
    chosen on half of its controls, or of the questions uploaded, and its verdict on the other half. The view's
    question follows it, so Explore's box (and the link) ask the same."""
    st.subheader("Which head answers it, on sentences it was not chosen on?")
    asking = next((w for w, pieces in words if query in pieces), None)
    if asking is None:
        st.caption("The query token is not part of a word of the text (a special token): pick a word's token to ask "
                   "about it.")
        return
    if against < 0 or against == key:
        st.caption("A grid of one sentence names no head: any head that follows the nearer word can top it. To judge "
                   "one, pick the other candidate (Against): the head that tells the two apart is then chosen on "
                   "half of the question's controls and judged on the other half.")
        return
    question = questions.Asked(asking, words[key][0], words[against][0])
    if verdicts.asked(ctx.inp) != question:  # Explore's box and the link ask what is picked here
        ui.update(ask_query=question.query, ask_key=question.key, ask_against=question.against)
    upload = st.file_uploader("Judge it on your own questions instead (.jsonl, optional)", type=["jsonl"],
                              key="find_questions", max_upload_size=questions.MAX_QUESTION_BYTES // 1_000_000,
                              help='one JSON object a line: {"text": …, "pronoun": …, "candidates": [two or more '
                                   'words of the text], "answer": one of them}; the head is chosen on half of them '
                                   "and judged on the other half")
    raw = None
    if upload is not None:
        import hashlib

        raw = upload.getvalue()
        try:
            items = questions.question_upload(upload.name, raw)
        except probes.ProbesError as exc:
            st.error(ui.safe(ui.in_app_words(exc)))
            return
        if items.bad:
            shown = "\n".join(f"- {ui.safe(b)}" for b in items.bad[:10])
            more = f"\n- and {len(items.bad) - 10:,} more" if len(items.bad) > 10 else ""
            st.warning(f"{len(items.bad):,} line(s) of {ui.safe(upload.name)} cannot be used and are left out:\n"
                       f"{shown}{more}")
        if not items:
            return
        question = questions.Asked(question.query, question.key, question.against,
                              (upload.name, hashlib.sha256(raw).hexdigest()))
    later = verdicts.answer(ctx, question, raw)  # at the page's end already: the grid is drawn above
    if later is not None:
        later()


def _ranked(ctx: ui.Context, found, token: str, word: str, other: str | None, pieces: list[int], query: int,
            sink_left_out: str | None) -> str:
    """What the grid answers, in words: the head with the largest margin over the other word (or that none
    prefers the key word, and the closest), or with the most weight on the key word; and its share on the sink."""
    token, word, name = ui.safe(token.strip()), ui.safe(word), ui.safe(ctx.model.name)
    if ctx.run.causal and min(pieces) > query:
        return f"“{word}” comes after the query in a decoder: no head can look at it (every weight is 0)."
    layer, head = found.best()
    on_key, on_sink = found.on_key[layer, head], found.on_sink[layer, head]
    sink = (f" It gives {on_sink:.2f} to the first token (“{ui.safe(ctx.run.tokens[0].strip())}”, the attention "
            "sink)" + (f", left out of “{ui.safe(sink_left_out)}”'s weight" if sink_left_out else "") + ".")
    alone = "On this sentence alone (one sentence: a description, not evidence), "
    if other is None:
        return (f"{alone}head {layer}.{head} puts the most of “{token}”'s attention on “{word}”: {on_key:.2f}, against "
                f"{found.uniform:.2f} under uniform attention (the grid's 0).{sink}")
    other, on_other = ui.safe(other), found.on_other[layer, head]
    if found.score[layer, head] <= 0:
        return (f"{alone}no head of {name} prefers “{word}” over “{other}” for “{token}”; the closest is "
                f"{layer}.{head}: {on_key:.2f} on “{word}”, {on_other:.2f} on “{other}”.{sink}")
    return (f"{alone}head {layer}.{head} gives “{word}” the largest margin over “{other}” for “{token}”: "
            f"{on_key:.2f} against {on_other:.2f} (red: more on “{word}”, blue: more on “{other}”).{sink} Which head "
            "answers the question is judged below, on sentences no head was chosen on.")


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
            effects = ablation.ablation(ctx.inp.model, ctx.inp.text, "zero", query, "token_change")
            grid = effects[["layer", "head", "token_change"]].merge(
                frame[["layer", "head", "score"]].rename(columns={"score": "weight"}), on=["layer", "head"])
            column = "token_change"
            title = f"{label}: change of the query token when the head is zeroed (click: Explore)"
    except probes.ProbesError as exc:
        st.error(ui.safe(ui.in_app_words(exc)))
        return
    chart = effect_grid(grid, column, m.n_layers, m.n_heads, title=title, selected=(v.layer, v.head),
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
