"""Does it matter? Attention weights say where a head looks, not whether the model needs it. For the sidebar's
model and text: what changes when one head is taken out (every layer × head, one at a time), each head's direct
share of one prediction (decoders), and which heads move when a word of the text is changed (a minimal pair).
A click on the first two grids opens that head on Explore; on the pair's grid it shows that head in both texts."""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial

import pandas as pd
import streamlit as st

import probes
from dashboard.core import ablation, budgets, questions, trace, ui, words
from dashboard.core.charts import MAX_CELLS, labels
from dashboard.core.grid_charts import effect_grid
from dashboard.core.state import STORIES
from dashboard.core.token_charts import attention_heatmap
from probes.effects.measures import ABOUT

from . import data
from .state import EffectsState

HOWS = {"zero": "zero (the head writes nothing)",
        "mean": f"mean (its average output over {ablation.REFERENCE_SIZE} reference sentences)"}
SWAPS = {"she": "he", "he": "she", "her": "him", "him": "her", "她": "他", "他": "她"}  # the default minimal pair
PAIR_SIDE_BY_SIDE = 12  # tokens: the pair's two heatmaps side by side up to this long, one above the other beyond
# a public deployment's longest text on this page (its grids run it once per head: 270 copies on smollm2)
PUBLIC_TOKENS = 64
DEFAULTS = "effects_for"  # the (model, text) the page's own inputs were last filled for


def swapped(text: str) -> tuple[str, str, str] | None:
    """The text with its first swappable word changed (she → he): (new text, old word, new word), or None."""
    for old, new in SWAPS.items():
        if old.isascii():
            found = re.search(rf"\b{old}\b", text, flags=re.IGNORECASE)
            if found:
                word = found.group(0)
                new = new.capitalize() if word[0].isupper() else new
                return text[:found.start()] + new + text[found.end():], word, new
        elif old in text:
            return text.replace(old, new, 1), old, new
    return None


def _fill_defaults(ctx: ui.Context, info: trace.RunInfo, words: list[str]) -> None:
    """The page's own inputs start from the sidebar's text (and start again when it changes): the target token,
    the second text of the pair, its query and key words."""
    key = (ctx.model.name, ctx.inp.text)
    if st.session_state.get(DEFAULTS) == key:
        return
    st.session_state[DEFAULTS] = key
    tokens, text = info.tokens, ctx.inp.text
    swap = swapped(text)
    at = next((i for i, t in enumerate(tokens) if swap and i > 0 and t.strip().lower() == swap[1].lower()), None)
    if at is not None and swap:  # " she" against " he", predicted at the token before "she"
        lead = " " if tokens[at].startswith(" ") else ""
        target, other, position = lead + swap[1], lead + swap[2], at - 1
    else:  # the text's last token that can be typed as a target (one token's raw text), predicted at the one before
        found = data.attribution_default(ctx.inp.model, text) if ctx.model.predicts_tokens else None
        target, other, position = (found[1], "", found[0] - 1) if found else ("", "", max(len(tokens) - 2, 0))
    st.session_state.update(effects_target=target, effects_other=other, effects_at=position,
                            effects_b=swap[0] if swap else text)
    story = STORIES.get(text.strip())
    lower = [w.lower() for w in words]
    query = story[0] if story else (swap[1] if swap else words[0])
    st.session_state["effects_qword"] = words[lower.index(query.lower())] if query.lower() in lower else words[0]
    # the key word: where Find heads and the callout point (the story's referent, else never the sink's word)
    alone = replace(ctx.inp, pair=None)
    spans = trace.text_words(alone)
    pieces = next((p for w, p in spans if w == st.session_state["effects_qword"]), spans[0][1])
    keyword, _ = questions.question(alone, pieces[-1] if info.causal else pieces[0])
    st.session_state["effects_kword"] = spans[keyword][0] if keyword is not None else words[0]


def _token(tokens: list[str], i: int) -> str:
    return f"“{ui.safe(tokens[i].strip() or tokens[i])}” (token {i})"


def _ablation(ctx: ui.Context, info: trace.RunInfo) -> None:
    m, v = ctx.model, ui.view()
    s = ui.part(EffectsState)
    st.subheader("Take one head out: what changes?")
    lm = m.predicts_tokens
    measures = (["loss", "top_changed"] if lm else []) + ["token_change", "hidden_change", "embedding_change"]
    if s.effects_measure not in measures:  # the change at the query token picked beside it
        ui.change(EffectsState, effects_measure="token_change")
    cols = st.columns([2, 2, 2])
    measure = ui.bound("selectbox", "effects_measure", "Measure", cols[0], options=measures, format_func=words.said,
                       help="; ".join(f"{words.said(name)}: {ABOUT[name]}" for name in measures), of=EffectsState)
    how = ui.bound("radio", "effects_how", "Ablation", cols[1], of=EffectsState, options=list(HOWS), horizontal=True,
                   help="; ".join(HOWS.values()) + ". Every head is removed alone, one copy of the text each")
    query = ui.query_picker(info, cols[2])
    if how == "mean":
        try:
            ablation.reference_texts()
        except (probes.ProbesError, OSError) as exc:
            st.warning("Mean-ablation needs its reference sentences (the first "
                       f"{ablation.REFERENCE_SIZE} of {ablation.REFERENCE}), which could not be read here "
                       f"({ui.safe(ui.in_app_words(exc))}): showing zero-ablation instead.")
            how = "zero"
    signature = (ctx.inp, how, query, measure)  # what a Cancel stopped: another input runs
    if ui.cancelled("ablation", signature, "Taking each head out in turn"):
        return
    # drawn only while the grid is computed (not when it is cached), with its Cancel button
    bar = ui.Progress("ablation", "Removing every head in turn and measuring what changed…", signature, lazy=True)

    def step(done: int, total: int) -> None:
        bar.progress(done / total, text=f"Removing every head in turn and measuring what changed: head {done} of "
                                        f"{total}")

    try:
        frame = ablation.ablation(ctx.inp.model, ctx.inp.text, how, query, measure, progress=step)
    finally:  # done, or stopped (past the public bound: the page says so)
        bar.empty()
    st.caption(f"{words.opening(measure)}: {ABOUT[measure]}"
               + (f", at {_token(info.tokens, query)}, the query token" if measure == "token_change" else "")
               + ". White is no change.")
    done = {"zero": "zeroed", "mean": "mean-ablated"}[how]
    chart = effect_grid(frame, measure, m.n_layers, m.n_heads, selected=(v.layer, v.head),
                               title=f"{words.opening(measure)} when one head is {done} (click a cell to "
                                     "open it on Explore)")
    problem = st.session_state.pop("heads_problem", None)
    if problem:
        st.warning(ui.safe(problem))
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("effects_grid", m.n_layers, m.n_heads),
             selection_mode="head", key="effects_grid")
    st.markdown(_biggest(frame, measure) + " The outlined cell is the sidebar's head.")
    ui.downloads(f"ablation-{measure}", chart, frame)


def _biggest(frame: pd.DataFrame, measure: str) -> str:
    """One line naming the head whose removal changes the measure most (and, below 0, lowers it most)."""
    best, low = frame.loc[frame[measure].idxmax()], frame.loc[frame[measure].idxmin()]
    name = lambda row: f"head {int(row['layer'])}.{int(row['head'])}"  # noqa: E731
    if measure == "loss":
        line = f"Taking out {name(best)} raises the loss the most: {best[measure]:+.3f} nats."
        if low[measure] < 0:
            line += (f" Taking out {name(low)} lowers it the most ({low[measure]:+.3f} nats, blue): on this text the "
                     "model predicts better without it.")
        return line
    return f"The largest {words.said(measure)}: {best[measure]:.4g}, when {name(best)} is taken out."


def shown(token: str) -> str:
    """A token as the page shows it: its spaces made visible (␣), escaped (a token the user typed)."""
    return ui.safe(token.replace(" ", "␣"))


def _attribution(ctx: ui.Context, info: trace.RunInfo) -> None:
    m, v = ctx.model, ui.view()
    st.subheader("Direct logit attribution: each head's share of one prediction")
    st.caption("The logit of the next token splits exactly into one share per head (what the head writes straight "
               "into the residual stream, read by the unembedding through the final norm) plus the rest "
               "(embeddings, MLPs, biases). A head's share leaves out what it does through later layers: the "
               "ablation grid above measures that.")
    n = len(info.tokens)
    if st.session_state.get("effects_at", 0) >= n:
        st.session_state["effects_at"] = n - 1
    cols = st.columns(3)
    target = cols[0].text_input("Target token", key="effects_target",
                                help="one token of the model's vocabulary; a leading space matters (\" she\", shown "
                                     "␣she, is the word after a space; \"she\" without one is another token)")
    other = cols[1].text_input("Minus this token (optional)", key="effects_other",
                               help="attribute the difference logit(target) − logit(this token)")
    names = labels(info.tokens)
    position = cols[2].selectbox("Predicted at", range(n), key="effects_at", format_func=names.__getitem__,
                                 help="the token whose logits predict the next token")
    if not target.strip():
        st.info("Type a target token to split its logit into each head's share.")
        return
    got = data.attribution(ctx.inp.model, ctx.inp.text, target, other or None, position)
    said = f"logit({shown(target)})" + (f" − logit({shown(other)})" if other else "")
    plain = f"logit({target.replace(' ', '␣')})" + (f" − logit({other.replace(' ', '␣')})" if other else "")
    frame = pd.DataFrame([dict(layer=layer, head=head, share=float(got.heads[layer, head]))
                          for layer in range(m.n_layers) for head in range(m.n_heads)])
    chart = effect_grid(frame, "share", m.n_layers, m.n_heads, selected=(v.layer, v.head), signed=True,
                               title=f"each head's direct share of {plain} at token {position} (click: Explore)")
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("effects_logit_grid", m.n_layers, m.n_heads),
             selection_mode="head", key="effects_logit_grid")
    best = frame.loc[frame["share"].abs().idxmax()]
    rather, ids = (f" rather than {shown(other)}", f"{got.target} and {got.other}") if other else ("", got.target)
    st.markdown(f"At {_token(info.tokens, position)}: heads {got.heads.sum():+.3f} + rest {got.rest:+.3f} = "
                f"{got.total:+.3f}, the model's {said} ({got.logit:+.3f}). Head "
                f"{int(best['layer'])}.{int(best['head'])} has the largest share: {best['share']:+.3f}. Red pushes "
                f"towards {shown(target)}{rather}, blue away (␣ is a space; token ids {ids}).")
    ui.downloads("logit-attribution", chart, frame)


def _pick_head(key: str, layers: int, heads: int) -> None:
    """A click on the pair's grid: that head becomes the sidebar's (shown below in both texts), on this page."""
    picked = st.session_state[key].selection.get("head") or []
    if picked and int(picked[0]["layer"]) < layers and int(picked[0]["head"]) < heads:
        ui.update(layer=int(picked[0]["layer"]), head=int(picked[0]["head"]))


def _pair(ctx: ui.Context, words: list[str]) -> None:
    m, text = ctx.model, ctx.inp.text
    st.subheader("Minimal pair: change a word, see which heads move")
    st.caption("The sidebar's text against a second one that differs in a word or two: every head's attention from "
               "the query word to the key word in each text (summed over the key word's pieces, averaged over the "
               "query word's), and the difference.")
    text_b = st.text_input("Second text", key="effects_b", help="the sidebar's text with a word or two changed")
    cols = st.columns(2)
    query = cols[0].selectbox("Query word", words, key="effects_qword",
                              help="a word of the sidebar's text; its counterpart in the second text is found by "
                                   "aligning the two word by word")
    key = cols[1].selectbox("Key word", words, key="effects_kword")
    if not text_b.strip():
        st.info("Type a second text: the sidebar's with a word or two changed (e.g. she → he).")
        return
    if text_b.strip() == text.strip():
        st.info("The second text is the same as the sidebar's: change a word or two in it (e.g. she → he).")
        return
    try:
        pair = data.minimal_pair(ctx.inp.model, text, text_b, query, key)
    except probes.ProbesError as exc:
        st.error(ui.safe(ui.in_app_words(exc)))
        return
    changes = "; ".join(f"“{ui.safe(a)}” → “{ui.safe(b)}”" for a, b in pair.changed)
    st.caption(f"Changed: {changes}.")
    v = ui.view()
    chart = effect_grid(pair.weights, "diff", m.n_layers, m.n_heads, selected=(v.layer, v.head),
                               signed=True, extra=("a", "b"),
                               title=f"“{query}” → “{key}”: second text − first (click a cell to compare the head)")
    ui.chart(chart, on_select=lambda: _pick_head("effects_pair_grid", m.n_layers, m.n_heads),
             selection_mode="head", key="effects_pair_grid")
    best = pair.weights.loc[pair.weights["diff"].abs().idxmax()]
    st.markdown(f"Head {int(best['layer'])}.{int(best['head'])} moves most: {best['a']:.3f} → {best['b']:.3f} "
                f"({best['diff']:+.3f}). Red: the second text puts more on the key word; blue: less.")
    ui.downloads("minimal-pair", chart, pair.weights)
    shown = data.pair_head(ctx.inp.model, text, text_b, query, key, v.layer, v.head)
    st.caption(f"Head {v.layer}.{v.head} (the outlined cell; the sidebar's head) in both texts; the query word's "
               "row is outlined." + (f" The first {MAX_CELLS} tokens." if max(len(shown.tokens_a),
                                                                                      len(shown.tokens_b))
                                     > MAX_CELLS else ""))
    side_by_side = max(len(shown.tokens_a), len(shown.tokens_b)) <= PAIR_SIDE_BY_SIDE  # else one above the other
    left, right = st.columns(2) if side_by_side else (st.container(), st.container())
    for col, tokens, weights, row, name in ((left, shown.tokens_a, shown.weights_a, shown.query_a, "First text"),
                                            (right, shown.tokens_b, shown.weights_b, shown.query_b, "Second text")):
        hi = min(len(tokens), MAX_CELLS)
        ui.chart(attention_heatmap(tokens[:hi], weights[:hi, :hi], f"{name}: layer {v.layer}, head {v.head}",
                                          causal=ctx.run.causal, query=row if row < hi else None), col)


def render(ctx: ui.Context) -> None:
    st.header("Does it matter? What each head changes")
    if not ctx.ready():
        return
    m = ctx.model
    if ui.without_scratch(m, "Each of these measures"):
        return
    info = ctx.run
    if ctx.inp.pair:
        st.info("This page reads the sidebar's text alone: the second sentence is left out.")
        info = trace.run_info(replace(ctx.inp, pair=None))
    if info.truncated_from:
        st.info(f"The text is {info.truncated_from:,} tokens, more than {ui.safe(m.name)} reads: this page needs the "
                "whole text, so shorten it.")
        return
    if len(info.tokens) < 2:
        st.info("The text is one token: type a sentence.")
        return
    if budgets.public() and len(info.tokens) > PUBLIC_TOKENS:  # every head out in turn: one copy of the text each
        st.info(f"The text is {len(info.tokens):,} tokens: on this public deployment this page takes up to "
                f"{PUBLIC_TOKENS} (it runs the text again for every one of {ui.safe(m.name)}'s "
                f"{m.n_layers * m.n_heads} heads). Shorten the text, or run the app on your own machine (make app) "
                "for longer ones.")
        return
    words = list(dict.fromkeys(w for w, _ in trace.text_words(replace(ctx.inp, pair=None))))
    if not words:
        st.info("The text has no words to look at.")
        return
    _fill_defaults(ctx, info, words)
    sections = [_ablation, _attribution] if m.predicts_tokens else [_ablation]
    for section in [*(partial(s, ctx, info) for s in sections), partial(_pair, ctx, words)]:
        try:
            section()
        except probes.ProbesError as exc:
            st.error(ui.safe(ui.in_app_words(exc)))
