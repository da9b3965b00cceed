"""The pieces every page shares: the view state in ``st.session_state`` (the link's core, and each page's own part
of it; widgets bound to their fields), the context a page is handed, the query-token picker, the parity badge and
chart downloads."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

import probes
from probes.models import OFFLINE_DEFAULT, USE_OFFLINE_DEFAULT

from . import fonts, words
from .charts import MAX_WIDTH, MIN_WIDTH, Spec, labels, legend_below
from .models import Input
from .pages import PAGES
from .parity import parity_report, proof_of
from .parts import LinkPart
from .state import Link, ViewState
from .trace import RunInfo

VIEW = "view"  # session key: the link's core (a ViewState)
PARTS = "view_parts"  # session key: each page's part of the link, by its class
Part = TypeVar("Part", bound=LinkPart)
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def safe(text: object) -> str:
    """A string that came from a user (a link, a text box, an upload, a model name, a token, an error
    naming any of those), made safe to put into Streamlit's markdown (errors, captions, headings…):
    every markdown character is backslash-escaped, so it shows as typed, never as a link, an image or
    formatting. Bare addresses (``https://…``, ``www.…``, ``a@b``), which Streamlit turns into links even
    when escaped, get an invisible word joiner (U+2060) that breaks the autolink."""
    text = str(text).replace("://", ":\u2060//").replace("www.", "www\u2060.").replace("@", "\u2060@")
    return _MARKDOWN.sub(r"\\\1", text)


def view() -> ViewState:
    """The link's core: what the sidebar holds and what pages share."""
    return st.session_state[VIEW]


def update(**changes) -> None:
    """Change fields of the link's core."""
    st.session_state[VIEW] = replace(view(), **changes)


def part(kind: type[Part]) -> Part:
    """A page's own part of the link (its class, from the page's ``state.py``)."""
    return st.session_state[PARTS][kind]


def change(kind: type[LinkPart], **changes) -> None:
    """Change fields of a page's own part of the link."""
    st.session_state[PARTS] = {**st.session_state[PARTS], kind: replace(part(kind), **changes)}


def open_link(link: Link) -> None:
    """This session's view is now ``link``'s (the core and every page's part)."""
    st.session_state[VIEW] = link.view
    st.session_state[PARTS] = dict(link.parts)


def link() -> Link:
    """This session's whole view, as a link writes it."""
    return Link(view(), st.session_state[PARTS])


def write_link() -> None:
    """Write this session's whole view (the core and every page's part) into the page's URL: the app's frame does
    after each run, and a fragment that reruns alone does after its own."""
    st.query_params.from_dict(link().to_query())


def bound(widget: str, field: str, label: str, container=st, *, of: type[LinkPart] | None = None, **kwargs):
    """A widget whose value is ``field`` of the view (of the link's core, or of the page's own part ``of``): it
    starts from the view (a link, or another page having changed it) and writes back to it when the user changes
    it."""
    key = f"w_{field}"
    st.session_state[key] = getattr(view() if of is None else part(of), field)

    def changed() -> None:
        if of is None:
            update(**{field: st.session_state[key]})
        else:
            change(of, **{field: st.session_state[key]})

    return getattr(container, widget)(label, key=key, on_change=changed, **kwargs)


@dataclass
class Context:
    """What a page needs: the input (cache key), the loaded model, and the tokens of the run, or why
    there are none (empty text, too long…)."""

    inp: Input
    model: probes.ModelLike
    info: RunInfo | None
    error: str | None

    def ready(self) -> bool:
        """True when the input ran; else shows why (with what to do) and the page stops there."""
        if self.error:
            st.error(safe(self.error))
            return False
        return True

    @property
    def run(self) -> RunInfo:
        """The run's tokens, for a page that :meth:`ready` let through (``info``, never None there)."""
        if self.info is None:
            raise RuntimeError(f"the input did not run ({self.error}): ask ready() first")
        return self.info


def without_scratch(model, what: str, pick: str = "minilm or smollm2") -> bool:
    """True, with a note on the page, when ``model``'s architecture is not one the from-scratch pass covers, which
    ``what`` (a page or a panel, as the start of a sentence: "The logit lens") runs on; ``pick``: what to pick
    instead in the sidebar's Model menu."""
    if model.family is not None:
        return False
    st.info(f"{what} runs our from-scratch pass, which does not cover {safe(model.name)} "
            f"({safe(model.scratch_problem)}). Pick {pick} in the sidebar's Model menu.")
    return True


def open_clicked_head(key: str, layers: int, heads: int) -> None:
    """A layers × heads grid's click (the chart's ``head`` selection, under ``key``): open that head on Explore
    (a head the model does not have is a warning on the page instead)."""
    picked = st.session_state[key].selection.get("head") or []
    if not picked:
        return
    layer, head = int(picked[0]["layer"]), int(picked[0]["head"])
    if layer < layers and head < heads:
        update(layer=layer, head=head)
        st.session_state["goto"] = "explore"
    else:
        st.session_state["heads_problem"] = f"head {layer}.{head} is not in {view().model}"


def page_link(key: str, label: str, container=st, **kwargs):
    """A link to page ``key`` of :data:`~dashboard.core.pages.PAGES` (the same view: it keeps model, text, layer and
    head), its label wrapping to the column. The app registers its pages as callables, and Streamlit links to such a
    page by its url path, which a page of the same path stands for here."""
    page = PAGES[key]
    title, icon = page.title, page.icon
    container.html(WRAPPING)  # a long label wraps on a phone, not cut with "…"
    return container.page_link(st.Page(_nowhere, title=title, icon=icon, url_path=key), label=label, **kwargs)


def _nowhere() -> None:
    """What a link's stand-in page would run (never: the app's own page of that path runs)."""


def clicked(key: str, name: str) -> dict | None:
    """The point a click selected in the chart under ``key`` (its selection ``name``: a dict of the selection's
    fields), or None. Read from the session, so a page can act on a click before it draws anything."""
    state = st.session_state.get(key)
    if not state:
        return None
    points = state["selection"].get(name) or []
    return dict(points[0]) if points else None


def in_app_words(exc: Exception) -> str:
    """An error as this app says it: what to do names the sidebar's controls, not the library's arguments or
    the CLI's flags (``truncate=True`` / ``--truncate`` is the "Cut to the context window" box here)."""
    if isinstance(exc, probes.InputTooLong) and not exc.custom_advice:
        return (f"The text is {exc.n_tokens:,} tokens but {exc.model} reads at most {exc.max_tokens:,}: shorten it, "
                f"or tick \"Cut to the context window\" in the sidebar to keep the first {exc.max_tokens:,}.")
    return str(exc).replace(USE_OFFLINE_DEFAULT, f"pick the offline default, {OFFLINE_DEFAULT}, in the sidebar's Model "
                                                 "menu")


FOR_EVIDENCE = "run_for_evidence"  # session key: this run is the one the answer box's evidence asked for (the frame's)
QUERY_MOVED = "query_moved"  # session key: the note on a query moved into the text, its query and the text's length


def query_picker(info: RunInfo, container=st) -> int:
    """The query token (shared by Explore and Q/K/V)."""
    n = len(info.tokens)
    moved = st.session_state.pop(QUERY_MOVED, None)
    if view().query >= n:  # a link's number, or a shorter text than the last one: said, not silently moved
        note = (f"Query token {view().query:,} does not exist in this text (tokens 0–{n - 1}): showing {n - 1}, the "
                "last.")
        container.caption(note)
        update(query=n - 1)
        st.session_state[QUERY_MOVED] = note, n - 1, n
    elif moved is not None and st.session_state.get(FOR_EVIDENCE) and moved[1:] == (view().query, n):
        container.caption(moved[0])  # said again on the run the evidence asked for: the reader has not acted yet
        st.session_state[QUERY_MOVED] = moved
    names = labels(info.tokens)
    return bound("selectbox", "query", "Query token", container, options=list(range(n)),
                 format_func=names.__getitem__,
                 help="the token whose attention you follow, as index: token (type to search)")


def parity_badge(inp: Input, container=st) -> None:
    """Small pass/fail badge of Hugging Face vs our scratch pass on this input."""
    try:
        report = parity_report(inp)
    except probes.ProbesError:
        return
    worst = report.attention_max_abs_diff
    proof = proof_of(inp)  # the float64 check, when it was run on this input
    if proof is None:
        label = f"max |Δ| {words.difference(worst)}"
    else:  # short enough for the sidebar: the figures are on the Parity page
        label = "proven in float64" if proof.passed else "float64 FAIL"
    verdict = "PASS" if report.passed else "FAIL"  # the verdict reads the scaled figures, never a raw one
    good = report.passed and (proof is None or proof.passed)
    icon = ":material/verified:" if good and proof else ":material/check_circle:" if good else ":material/error:"
    badge(f"Parity {verdict} · {label}", container, icon=icon, color="green" if good else "red")


# Streamlit keeps a badge and a page link on one line and cuts them with "…" where the column is narrower (a phone):
# their words wrap instead
WRAPPING = ("<style>.stMarkdownBadge, [data-testid=stPageLink-NavLink] span { white-space: normal !important; }"
            "</style>")


def badge(label: str, container=st, **kwargs) -> None:
    """``st.badge`` whose words wrap to the column instead of being cut (:data:`WRAPPING`: a style alone, which
    Streamlit keeps out of the page's elements, so ``container`` may be a placeholder)."""
    container.html(WRAPPING)
    container.badge(label, **kwargs)


def chart(chart: alt.TopLevelMixin | Spec, container=st, **kwargs):
    """``st.altair_chart`` without altair's JSON-schema validation of the spec, which is most of a rerun's time
    (the chart functions are validated by their tests, in ``tests/dashboard``); a :class:`charts.Spec` (a
    Vega-Lite dictionary already) goes to ``st.vega_lite_chart`` as it is. A chart whose width is "container"
    takes the column's width, its axes, legend and title inside it (never wider than the column), and at most its
    ``usermeta`` :data:`charts.MAX_WIDTH` pixels (a short heatmap's cells stay about square); its height is its own
    (Streamlit's default "fit" would squeeze axes and title into the plot's height). Any other chart is drawn at its
    own size. A stretched chart with a :data:`charts.MIN_WIDTH` is at least that wide, in a box that scrolls sideways
    where the column is narrower (a phone: :func:`_scrolling`). Every chart's legend is under its plot
    (:data:`charts.LEGEND`)."""
    stretch = getattr(chart, "width", alt.Undefined) == "container"
    fit: Literal["fit-x", "pad"] = "fit-x" if stretch else "pad"
    width = (_max_width(chart) or "stretch") if stretch else "content"
    if stretch and (least := _meta_width(chart, MIN_WIDTH)):
        container = _scrolling(container, least)
    if isinstance(chart, Spec):
        spec = chart.streamed()
        return container.vega_lite_chart(None, {**spec, "config": legend_below(spec.get("config")),
                                                "autosize": {"type": fit, "contains": "padding"}},
                                         width=width, **kwargs)
    unchecked = chart.properties(autosize=alt.AutoSizeParams(type=fit, contains="padding"),
                                 config=legend_below(_config(chart)))
    object.__setattr__(unchecked, "to_dict",
                       lambda *a, **kw: type(unchecked).to_dict(unchecked, *a, **{**kw, "validate": False}))
    return container.altair_chart(unchecked, width=width, **kwargs)


def _max_width(chart: alt.TopLevelMixin | Spec) -> int | None:
    return _meta_width(chart, MAX_WIDTH)


def _meta_width(chart: alt.TopLevelMixin | Spec, name: str) -> int | None:
    meta = getattr(chart, "usermeta", alt.Undefined)
    return int(meta[name]) if isinstance(meta, dict) and name in meta else None


def _config(chart: alt.TopLevelMixin) -> dict[str, Any] | None:
    config = getattr(chart, "config", alt.Undefined)
    return config.to_dict(validate=False) if hasattr(config, "to_dict") else None


WIDE = "wide_chart"  # the key of a box that scrolls a chart sideways (the first; then wide_chart_1, …)


def _scrolling(container, least: int):
    """A box in ``container`` as wide as its column that scrolls sideways, its chart at least ``least`` px wide: on
    a phone a grid of 30 layers keeps cells a finger can pick (:data:`charts.MIN_CELL`) and scrolls in its own box,
    the page itself never sideways; on a desk the chart is as wide as the column, as any other. The box is styled
    through its key (Streamlit makes it a CSS class), the next free one this run."""
    from streamlit.errors import StreamlitDuplicateElementKey

    for i in itertools.count():
        key = WIDE if i == 0 else f"{WIDE}_{i}"
        try:
            box = container.container(key=key)
        except StreamlitDuplicateElementKey:
            continue
        box.html(f"<style>.st-key-{key} {{ overflow-x: auto; overflow-y: hidden; }} "
                 f".st-key-{key} [data-testid=stVegaLiteChart] {{ min-width: {least}px; }}</style>")
        return box
    raise AssertionError("unreachable")  # (itertools.count never ends)


def _exported(chart: alt.TopLevelMixin | Spec) -> alt.TopLevelMixin | Spec:
    """A chart as a file draws it: a page-wide chart ("container": there is no page) at its widest, less its
    labels, or 600 px."""
    if getattr(chart, "width", alt.Undefined) != "container":
        return chart
    return chart.properties(width=max(200, (_max_width(chart) or 800) - 200))


def _png(chart: alt.TopLevelMixin | Spec) -> bytes:
    import vl_convert

    fonts.register()  # CJK tokens drawn, not boxes, where the server has no CJK font of its own
    with alt.data_transformers.disable_max_rows():  # a 64×64 window or 12 small multiples pass 5,000 rows
        return vl_convert.vegalite_to_png(_exported(chart).to_json(), scale=2)


def _svg(chart: alt.TopLevelMixin | Spec) -> bytes:
    import vl_convert

    fonts.register()  # label widths measured with a CJK font (the SVG's text is drawn by the reader's viewer)
    with alt.data_transformers.disable_max_rows():
        return vl_convert.vegalite_to_svg(_exported(chart).to_json()).encode()


def table(frame: pd.DataFrame, container=st, keep: tuple[str, ...] = (), formats: dict[str, str] | None = None,
          **kwargs):
    """``st.dataframe`` of a table as people read it (:func:`words.readable`): its columns in words, a column with
    one value in every row said once above it instead, byte counts as sizes, missing values blank. ``formats``:
    a printf format (``"%.4f"``) by raw column name; ``keep``: columns shown even when constant. The CSV of the
    same frame (:func:`downloads`) keeps the raw names and every column."""
    shown, constant = words.readable(frame, keep)
    if constant:
        container.caption("In every row: " + "; ".join(f"{words.said(name)}: {safe(_cell(value))}"
                                                    for name, value in constant.items()) + ".")
    config = {words.said(name): st.column_config.NumberColumn(format=fmt) for name, fmt in (formats or {}).items()
              if words.said(name) in shown and shown[words.said(name)].dtype.kind in "iuf"}
    return container.dataframe(shown, hide_index=True, column_config=config | kwargs.pop("column_config", {}),
                               **kwargs)


def _cell(value) -> str:
    """One value of a constant column, as the caption above a table says it."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    return words.said(value) if isinstance(value, str) else str(value)


def downloads(name: str, chart: alt.TopLevelMixin | Spec | None = None,
              frame: pd.DataFrame | None = None) -> None:
    """PNG/SVG of a chart and CSV of its numbers, made only when clicked (no cost on a rerun)."""
    cols = st.columns(3, width=360)
    if chart is not None:
        cols[0].download_button("PNG", lambda: _png(chart), f"{name}.png", "image/png", on_click="ignore",
                                icon=":material/download:", key=f"png_{name}")
        cols[1].download_button("SVG", lambda: _svg(chart), f"{name}.svg", "image/svg+xml", on_click="ignore",
                                icon=":material/download:", key=f"svg_{name}")
    if frame is not None:
        cols[2].download_button("CSV", lambda: frame.to_csv(index=False).encode(), f"{name}.csv", "text/csv",
                                on_click="ignore", icon=":material/download:", key=f"csv_{name}")


CANCELLED = "cancelled"  # session key: {work: the signature of its run that a Cancel button stopped}


class Progress:
    """A progress bar with a **Cancel** button beside it, for long work (``st.progress``'s ``progress`` and
    ``empty``). A click stops the work at its next step: Streamlit ends a run at the next element it sends (the
    bar's update), and the next run starts with the button's callback, which writes ``work`` and ``signature`` (what
    the run was computing) into the session, so the page does not start the same work again by itself
    (:func:`cancelled`) and stays usable. The row is drawn in ``container`` at once, or at the first update with
    ``lazy`` (work that is often cached draws nothing)."""

    def __init__(self, work: str, text: str, signature: object = None, container=st, lazy: bool = False):
        self.work, self.text, self.signature = work, text, signature
        self.slot = container.empty()
        self.bar: Any = None  # the st.progress element, once drawn
        if not lazy:
            self.progress(0.0, text)

    def progress(self, value: float, text: str | None = None) -> None:
        if self.bar is None:
            with self.slot.container():
                left, right = st.columns([7, 1], vertical_alignment="center")
                self.bar = left.progress(0.0, text=self.text)
                right.button("Cancel", key=f"cancel_{self.work}", icon=":material/stop_circle:",
                             help="stop this work: the page stays as it is, and offers to run it again",
                             on_click=_cancel, args=(self.work, self.signature))
        self.bar.progress(min(1.0, max(0.0, float(value))), text=text)

    def empty(self) -> None:
        self.slot.empty()


def _cancel(work: str, signature: object) -> None:
    st.session_state.setdefault(CANCELLED, {})[work] = signature


def uncancel(work: str) -> None:
    """Forget that ``work`` was cancelled: it runs as asked again."""
    st.session_state.get(CANCELLED, {}).pop(work, None)


AGAIN = "run_again"  # session key: the works whose "Run it again" was clicked, until the page asks (asked_again)


def _again(work: str) -> None:
    uncancel(work)
    st.session_state.setdefault(AGAIN, set()).add(work)


def asked_again(work: str) -> bool:
    """Whether "Run it again" was clicked for ``work`` since the page last asked (once: the answer is then
    forgotten). A page that runs its work only on a button's click (Heads' Run) runs it on this too; a page that
    runs its work whenever it is not cancelled needs not ask."""
    asked = st.session_state.get(AGAIN, set())
    if work not in asked:
        return False
    asked.discard(work)
    return True


def cancelled(work: str, signature: object = None, what: str = "This work") -> bool:
    """Whether this session cancelled ``work`` computing ``signature`` (a Cancel button of :class:`Progress`); if so
    the page says so, with a button that runs it again (its click clears the flag before the next run: the work goes
    ahead). Other inputs than the cancelled run's are not cancelled."""
    stopped = st.session_state.get(CANCELLED, {})
    if work not in stopped or stopped[work] != signature:
        return False
    st.info(f"{what} was cancelled: nothing of it is shown or kept. Change what it reads, or run it again.")
    # the flag goes in the click's callback, before the next run starts: a run cut short by another click (a rerun
    # ends the current one at its next element) cannot lose it, as it could lose the button's one True
    st.button("Run it again", key=f"again_{work}", icon=":material/replay:", on_click=_again, args=(work,))
    return True


OPENED = "opened_with"  # session key: the page the session's first link opened on, and that link's parameters


def opened_with(page: str, params: dict) -> None:
    """The session's first link opens on ``page`` with ``params`` (the frame says it once, as the session starts)."""
    st.session_state[OPENED] = (page, dict(params))


def opening_link(page: str) -> dict | None:
    """The parameters of the link this session opened with, to ``page`` alone and once: a page that acts on its link
    when it opens (Heads runs the probe a link names) asks this on its first run; None after that, or when the link
    opened another page."""
    opened = st.session_state.get(OPENED)
    if opened is None or opened[0] != page:
        return None
    del st.session_state[OPENED]
    return opened[1]
