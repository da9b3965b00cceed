"""Start here: what holds on the offline models. The list is drawn at once; then each finding's evidence is computed
in turn (:mod:`.data`: once per model, for every session) and its item filled in: the verdict the library gives (green
only when supported), its evidence line, and a button that opens the page that shows it; a finding that does not hold
says why and what to try next."""

from __future__ import annotations

import streamlit as st

import probes
from dashboard.core import ui
from dashboard.core.pages import PAGES
from dashboard.core.state import Link
from probes.evidence.findings import FINDINGS, Finding, Judged

from . import data

INTRO = ("What holds on the two offline models, minilm (a BERT encoder) and smollm2 (a Llama decoder). Each finding's "
         "head is chosen on half of its items and judged on the other half, against what would explain it without "
         "the head; it is marked as holding only when the lower end of its 95 % interval clears every such baseline. "
         "Click a finding to open the page that shows it.")


def render(ctx: ui.Context) -> None:
    st.header("Start here")
    st.markdown(INTRO)
    slots, shown = {}, set()
    for finding in FINDINGS.values():
        with st.container(border=True):
            st.markdown(f"**{ui.safe(finding.title)}** · {ui.safe(finding.model)}")
            about = finding.about[:1].upper() + finding.about[1:]
            st.caption(ui.safe(about) + ("" if about.endswith("?") else "."))
            verdict, button = st.empty(), st.empty()
        slots[finding.key] = verdict, button
        known = data.ready(finding)
        if known is not None:
            show(finding, known, verdict, button)
            shown.add(finding.key)
        else:
            verdict.caption("Checked after the page has drawn…")
            if not finding.head_in_link:  # the link needs no judged head: it works before the verdict is in
                open_button(finding, button)
    for finding in FINDINGS.values():
        verdict, button = slots[finding.key]
        if known_now := data.ready(finding):  # known at the first draw, or from a work an item above has run
            if finding.key not in shown:
                show(finding, known_now, verdict, button if finding.head_in_link else None)
            continue
        bar = verdict.progress(0.0, text=f"Checking on {finding.model}…")

        def step(done: int, total: int, bar=bar, finding=finding) -> None:
            if total:
                bar.progress(min(1.0, done / total), text=f"Checking on {finding.model}: {done} of {total} run")

        try:
            found = data.judged(finding, progress=step)
        except probes.ProbesError as exc:
            verdict.info(ui.safe(ui.in_app_words(exc)))
            continue
        show(finding, found, verdict, button if finding.head_in_link else None)  # (else drawn already)


def show(finding: Finding, found: Judged, verdict, button) -> None:
    """A finding's verdict (green only when the library says supported), its evidence line and its button."""
    if found.supported:
        verdict.success(f"Holds. {ui.safe(found.said)}", icon=":material/check_circle:")
    else:
        verdict.warning(f"Not shown to hold. {ui.safe(found.said)} {ui.safe(finding.otherwise)}",
                        icon=":material/help:")
    if button is not None:
        open_button(finding, button)


def open_button(finding: Finding, container) -> None:
    title = PAGES[finding.page].title
    container.button(f"Open it on {title}", key=f"start_{finding.key}", icon=":material/arrow_forward:",
                     type="tertiary", on_click=open_finding, args=(finding.key,),
                     help=f"{finding.model}, on {title}, with the text, layer and head of this finding")


def open_finding(key: str) -> None:
    """Open the view a finding's link describes (its model, page, text, layer and head), as a shared link would."""
    finding = FINDINGS[key]
    params = finding.link_to(data.ready(finding))
    link, _ = Link.read(params, probes.OFFLINE_DEFAULT)
    ui.open_link(link)
    st.session_state["w_model_pick"] = link.view.model  # the Model menu shows the link's model
    st.session_state["goto"] = link.view.page
    st.session_state["story_off"] = any(k in params for k in ("layer", "head", "query"))
    st.session_state.pop("story_for", None)  # the text's question (if any) is looked at anew
    ui.opened_with(link.view.page, params)
