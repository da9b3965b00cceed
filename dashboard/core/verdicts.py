"""The answer box: what a head does for a question asked of the text, as its evidence says (Explore and Find
heads). A head is shown as *the* answer (green) only when its verdict is "supported": chosen on half of the
question's items and better than every head-free baseline on the other half, with its interval. Otherwise the box
says, not in green, what the head chosen tracks (the nearer candidate, the first-mentioned one, chance) or that
there were too few items. What the head does on the sentence itself is said beside it, never instead of it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import probes
from probes.evidence.claims import box_sentence, items_frame, judge
from probes.evidence.controls import recipes
from probes.evidence.record import percent, span

from . import ui
from .models import Input
from .questions import Asked, has_evidence, question_evidence, stop_evidence
from .state import STORIES


def asked(inp: Input) -> Asked | None:
    """The question the view asks of its text: the words typed or picked (``ask_query``, ``ask_key``,
    ``ask_against``), else the story's own for a text of :data:`~dashboard.core.state.STORIES`, else None."""
    v = ui.view()
    if v.ask_query.strip() and v.ask_key.strip() and v.ask_against.strip():
        return Asked(v.ask_query.strip(), v.ask_key.strip(), v.ask_against.strip())
    story = STORIES.get(inp.text.strip()) if not inp.pair else None
    return Asked(*story) if story else None


HOW_TO_ASK = ("No question is asked of this text, so no head is named as its answer. Ask one: which word a word refers "
              "to, against which other (“she” → “Xiaohong”, not “Xiaoming”), in “Ask a question” here or on Find "
              "heads; the head that answers it is chosen on half of its controls and judged on the other half.")


def evidence(inp: Input, question: Asked, raw: bytes | None = None, bar: ui.Progress | None = None):
    """The question's evidence (kept for every session once computed), with a progress bar while it is computed
    (``bar``: one drawn already, else one here); an error shown on the page, as the app says it, instead of raised
    (None then)."""
    if not has_evidence(inp, question):
        signature = (inp, question, raw)
        if ui.cancelled("evidence", signature, "Judging every head on the question's controls"):
            stop_evidence(inp, question)  # (its computation, going on its own thread, ends at its next item)
            return None
        if bar is None:
            bar = ui.Progress("evidence", "Judging every head on the question's controls…", signature)

    def step(done: int, total: int) -> None:
        if bar is not None and total:
            bar.progress(min(1.0, done / total), text=f"Judging every head: {done} of {total} items run")

    try:
        return question_evidence(inp, question, raw, progress=step)
    except probes.ProbesError as exc:
        (bar.slot if bar is not None else st).info(ui.safe(ui.in_app_words(exc)))
        bar = None  # (the message stands in the bar's place)
        return None
    finally:
        if bar is not None:
            bar.empty()


STORY = "story_head"  # session key: a story's question whose chosen head the view opens on once its evidence is in
AGAIN = "evidence_rerun"  # session key: this run is the one the evidence asked for, not the reader's


def open_on_story_later(inp: Input, question: Asked, fallback: tuple[int, int]) -> None:
    """The frame opened a story's text before its question's evidence was kept: the view moves to the head chosen on
    half of its controls (``fallback``, the sentence's own best head, where none is chosen) once a page that shows the
    answer box has computed it, unless the sidebar's head was changed meanwhile."""
    v = ui.view()
    st.session_state[STORY] = (inp.model, inp.text.strip(), question, (v.layer, v.head), fallback)


def _open_on_story(inp: Input, question: Asked, ev) -> bool:
    """Move the view to the story's chosen head, now that its evidence is in (:func:`open_on_story_later`). True
    if the view changed."""
    waiting = st.session_state.get(STORY)
    if waiting is None or waiting[:3] != (inp.model, inp.text.strip(), question):
        return False
    del st.session_state[STORY]
    v = ui.view()
    chosen = ev.head if ev.head is not None else waiting[4]
    if (v.layer, v.head) != waiting[3] or chosen == (v.layer, v.head):
        return False
    ui.update(layer=chosen[0], head=chosen[1])
    return True


def _again() -> None:
    """Run the page again for the evidence, not for the reader: the run says so (:data:`AGAIN`)."""
    st.session_state[AGAIN] = True
    st.rerun()


def answer(ctx: ui.Context, question: Asked, raw: bytes | None = None):
    """The answer box for ``question``, here: at once where its evidence is kept. Otherwise a progress bar here, and
    what to call once the rest of the page has drawn (so the heavy evidence never holds up the page): it waits for the
    evidence and runs the page again, which draws the box in the bar's place (None where nothing is left to do)."""
    inp, v = ctx.inp, ui.view()
    if has_evidence(inp, question):
        ev = evidence(inp, question, raw)
        if ev is not None and _open_on_story(inp, question, ev):  # (kept by this session or another)
            _again()
        if ev is not None:
            box(ctx, question, ev, shown=(v.layer, v.head))
        return None
    signature = (inp, question, raw)
    if ui.cancelled("evidence", signature, "Judging every head on the question's controls"):
        stop_evidence(inp, question)
        return None
    bar = ui.Progress("evidence", "Judging every head on the question's controls… (the answer shows here when it is "
                      "ready)", signature)

    def later() -> None:
        ev = evidence(inp, question, raw, bar)
        if ev is not None:
            _open_on_story(inp, question, ev)
            _again()  # the page again, the box drawn in its place from the kept evidence

    return later


def _on_text(ev, head: tuple[int, int] | None = None) -> str:
    """What ``head`` (the evidence's) does on the sentence itself, in words."""
    if ev.scored is None or ev.on_key is None or ev.key is None:
        return ""
    return (f" On this sentence it gives “{ui.safe(ev.key)}” {ev.on_key:.2f} of “{ui.safe(ev.query)}”'s attention and "
            f"“{ui.safe(ev.against)}” {ev.on_against:.2f}.")


def box(ctx: ui.Context, question: Asked, ev, shown: tuple[int, int] | None = None) -> None:
    """The answer box for ``question``: green only for a supported head; then, when the sidebar's head (``shown``)
    is another, what that head does on the same items; and "How sure is this?" with the figures behind it."""
    name = ui.safe(ctx.model.name)
    who = f"Who is “{ui.safe(question.query)}”?"
    if ev.head is None or ev.verdict == "too few":
        why = "; ".join(ui.safe(n) for n in ev.notes[:1])
        st.info(f"{who} Too few {ev.unit} to judge a head: {ev.n} held out, and a verdict needs 30."
                + (f" {why}." if why else "") + " Judge it on your own questions (Find heads: upload a .jsonl of "
                "text, pronoun, candidates, answer).", icon=":material/help:")
        _details(ev, question)
        return
    layer, head = ev.head
    of = f"half of the {ev.split.n} {ev.unit}" if ev.split is not None else f"all {ev.n} {ev.unit}"
    on_text = _on_text(ev)
    if ev.supported:
        sentence = ui.safe(box_sentence(ev, f"Head {layer}.{head} of {ctx.model.name}, chosen on {of},"))
        st.success(f"{who} {sentence}{on_text}", icon=":material/search:")
    else:
        sentence = ui.safe(box_sentence(ev, f"Head {layer}.{head}, the best on {of},"))
        st.warning(f"{who} No head of {name} is shown to answer it. {sentence}{on_text}", icon=":material/help:")
    if shown is not None and shown != ev.head and ev.scored is not None and ev.scored.n:
        other = judge(ev.scored, shown, ev.split.seed if ev.split else 0, ev.claim, ev.unit)
        left, right = st.columns([5, 1], vertical_alignment="center")
        left.caption(ui.safe(box_sentence(other, f"The sidebar's head, {shown[0]}.{shown[1]}, judged on every item "
                                                 "(it was not chosen on them),")))
        if right.button(f"Open head {layer}.{head}", key="verdict_open", type="tertiary", icon=":material/arrow_back:",
                        help="the head chosen on half of the items, whose verdict the box gives"):
            ui.update(layer=layer, head=head)
            st.rerun()
    _details(ev, question)


def _details(ev, question: Asked) -> None:
    with st.expander("How sure is this?", icon=":material/fact_check:"):
        if ev.split is not None:
            st.markdown(f"**Chosen on one half, judged on the other.** The head is the one that picked the answer most "
                        f"often on {len(ev.split.chosen_on)} of the {ev.split.n} {ev.unit} (drawn with seed "
                        f"{ev.split.seed}); the figures are on the other {len(ev.split.judged_on)}, which it was not "
                        "chosen on. The sentence itself is in neither half.")
        st.markdown(f"**Verdict:** {ui.safe(ev.said)}." + (
            f" Its mean margin (the answer's weight minus the other candidate's) on those items: {ev.margin:+.3f} "
            f"(95 % interval {ev.margin_low:+.3f} to {ev.margin_high:+.3f})." if ev.margin == ev.margin else ""))
        if ev.baselines:
            rows = [{"what would explain it without the head": b.name, "right on the same items": percent(b.score),
                     "the head agrees with it": "" if b.agreement is None else percent(b.agreement)}
                    for b in ev.baselines]
            rows.insert(0, {"what would explain it without the head": f"the head ({ev.head[0]}.{ev.head[1]})",
                            "right on the same items": f"{percent(ev.score)} ({span(ev.low, ev.high)})",
                            "the head agrees with it": ""})
            ui.table(pd.DataFrame(rows))
            st.caption("“Supported” needs the lower end of the head's 95 % interval (Wilson's) above every line "
                       "below it. The most recent candidate is the one nearest before the word; a head that mostly "
                       "agrees with it follows position, not meaning.")
        made = recipes(ev.made)
        if made:
            st.markdown("**How the items were made:** " + "; ".join(f"{ui.safe(k)}: {v}" for k, v in made.items())
                        + ". Controls change the sentence so that no head-free rule is right more often than "
                        "chance: the verb flipped, the two candidates swapped, templates whose verb decides the "
                        "answer (half with it first, half second), other names of one gender, WinoBias.")
        for note in ev.notes:
            st.caption(ui.safe(note))
        if ev.text_best is not None and ev.text_best != ev.head:
            st.caption(f"On this sentence alone the largest margin is head {ev.text_best[0]}.{ev.text_best[1]}'s: "
                       "one sentence, which any head that follows the nearer name can get right; it is not evidence.")
        frame = items_frame(ev)
        if len(frame):
            st.download_button(f"The {len(frame)} items with the head's picks (CSV)",
                               lambda: frame.to_csv(index=False).encode(), "question-items.csv", "text/csv",
                               on_click="ignore", icon=":material/download:", key=f"items_{id(ev)}")


def ask(container=st) -> None:
    """Three boxes for a question about the text: the word asked about, what it refers to, and the other candidate
    (the view's ``ask_*``, part of the link)."""
    cols = container.columns(3)
    ui.bound("text_input", "ask_query", "Word asked about", cols[0], placeholder="she", max_chars=100,
             help="the word whose attention is read: a pronoun (he, she, it) gets controls built for it")
    ui.bound("text_input", "ask_key", "It refers to", cols[1], placeholder="Xiaohong", max_chars=100)
    ui.bound("text_input", "ask_against", "Not to", cols[2], placeholder="Xiaoming", max_chars=100,
             help="the other candidate a reader could pick")
