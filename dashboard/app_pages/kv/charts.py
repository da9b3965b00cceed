"""The charts of "What if it attended less?": perplexity against the KV budget, one line per policy; what one head
kept at every step, as a picture; and the heads most hurt when each is cut alone. Pure functions of the tidy frames
:mod:`probes.kv.sweep` makes, like ``charts``."""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import pandas as pd

from dashboard.core.charts import CANVAS, MAX_WIDTH, Layered, titled
from dashboard.core.words import said, size

# one colour per policy kind, in probes.kv.sweep.KINDS's order (window and sinks + window side by side: the sink's
# effect is the gap between them)
KIND_COLOURS = {"window": "#969696", "sinks + window": "#08519c", "H2O": "#e6550d", "TOVA": "#31a354",
                "SnapKV": "#756bb1", "strided": "#8c6d31"}
OTHER_COLOURS = ("#d6616b", "#17becf", "#bcbd22")  # for policies registered after these
FULL = "#444444"  # the full cache's rule
LOG_RATIO = 4.0  # perplexities spanning more than this factor are drawn on a log scale
KEPT, EVICTED = "#08519c", "#e3e3e3"  # a key a head read, and one it no longer holds (the future stays blank)
TOP = 15  # heads drawn as bars


def wide(values: pd.Series) -> bool:
    """Whether perplexities span enough (more than :data:`LOG_RATIO` ×) to be read on a log scale."""
    values = values[values.map(math.isfinite)]
    if values.empty:
        return False
    low, high = float(values.min()), float(values.max())
    return low > 0 and high / low > LOG_RATIO


def log_ticks(values: pd.Series) -> list[float]:
    """A log axis's ticks: 1, 2, 5 × the powers of ten from just below the smallest value to just above the largest
    (so the highest point has a tick near it)."""
    values = values[values.map(math.isfinite)]
    low, high = float(values.min()), float(values.max())
    ticks = [m * 10.0**e for e in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
             for m in (1, 2, 5)]
    inside = [t for t in ticks if low / 1.5 <= t <= high * 1.5]
    return inside or [low, high]


def budget_chart(frame: pd.DataFrame, full: float, tokens: int) -> Layered:
    """Perplexity against the budget (a :func:`probes.kv.sweep.sweep_frame`), one line per policy kind, the budgets
    on a log₂ axis; the full cache's perplexity ``full`` a dashed rule; the y axis on a log scale when the values
    span more than :data:`LOG_RATIO` ×. The tooltip: the policy as written, the bytes the cache held and what that
    saves, and the share of past keys read."""
    finite = frame[frame["perplexity"].map(math.isfinite)]  # past what a float holds: not drawn (the page says so)
    rows = finite.assign(held=[size(b) for b in finite["kv_bytes"]])
    present = list(dict.fromkeys(rows["policy"]))
    kinds = [k for k in KIND_COLOURS if k in present] + [k for k in present if k not in KIND_COLOURS]
    spare = iter(OTHER_COLOURS)  # a policy registered after these gets a colour of its own, not none
    log = wide(pd.concat([rows["perplexity"], pd.Series([full])]))
    y_scale = alt.Scale(type="log", nice=False, padding=16) if log else alt.Scale(zero=False, padding=16)
    y_axis = alt.Axis(values=log_ticks(pd.concat([rows["perplexity"], pd.Series([full])]))) if log else alt.Axis()
    budgets = sorted(rows["budget"].unique().tolist())
    x = alt.X("budget:Q", scale=alt.Scale(type="log", base=2, padding=12, nice=False),
              axis=alt.Axis(values=budgets, format="d", labelOverlap=False), title="budget: keys a query reads")
    lines = (
        alt.Chart(rows)
        .mark_line(point=alt.OverlayMarkDef(size=60, filled=True))
        .encode(
            x=x,
            y=alt.Y("perplexity:Q", scale=y_scale, axis=y_axis, title="perplexity" + (" (log scale)" if log else "")),
            color=alt.Color("policy:N", title=None, scale=alt.Scale(
                domain=kinds, range=[KIND_COLOURS.get(k) or next(spare, FULL) for k in kinds]),
                            legend=alt.Legend(orient="bottom", direction="horizontal", labelLimit=0)),
            tooltip=[alt.Tooltip("name:N", title="policy"), alt.Tooltip("budget:Q", title="budget (keys)"),
                     alt.Tooltip("perplexity:Q", format=".2f"), alt.Tooltip("held:N", title=said("kv_bytes")),
                     alt.Tooltip("saved:Q", format=".0%", title=said("saved")),
                     alt.Tooltip("seen_fraction:Q", format=".0%", title=said("seen_fraction"))],
        )
    )
    line = pd.DataFrame({"perplexity": [full], "label": [f"full cache: {full:.2f}"]})
    rule = alt.Chart(line).mark_rule(color=FULL, strokeDash=[5, 4]).encode(
        y="perplexity:Q", tooltip=[alt.Tooltip("label:N", title="every key kept")])
    label = alt.Chart(line).mark_text(align="right", baseline="bottom", dy=-3, color=FULL).encode(
        y="perplexity:Q", x=alt.value(alt.ExprRef("width")), text="label:N")  # at the right end, above the rule
    title = titled(f"Perplexity against the budget ({tokens} tokens)", "every head of every layer cut")
    return alt.layer(lines, rule, label, title=title).properties(width="container", height=300)


def _span(start: pd.Series, end: pd.Series) -> list[str]:
    return [f"{a}" if b - a == 1 else f"{a}–{b - 1}" for a, b in zip(start, end, strict=True)]


def kept_map(frame: pd.DataFrame, tokens: list[str], title: str, subtitle: str | None = None) -> alt.Chart:
    """What one head kept (a :func:`probes.kv.sweep.kept_picture`): steps down, keys across, each cell dark where the
    head read the key at that step and pale grey where it no longer held it (a binned cell: the share read, between
    the two); the future is blank. ``tokens``: the text's tokens (named in the tooltip of a one-token bin)."""
    n = len(tokens)
    rows = frame.assign(steps=_span(frame["step"], frame["step_end"]), keys=_span(frame["key"], frame["key_end"]))
    single = bool((frame["key_end"] - frame["key"] == 1).all())
    extra: list[Any] = []
    if single:
        rows["token"] = [tokens[k] for k in frame["key"]]
        extra = [alt.Tooltip("token:N", title="key token")]
    if single:  # each cell read or not: two swatches
        rows["state"] = ["kept" if k else "evicted" for k in frame["kept"]]
        colour = alt.Color("state:N", scale=alt.Scale(domain=["kept", "evicted"], range=[KEPT, EVICTED]), title=None,
                           legend=alt.Legend(orient="bottom", direction="horizontal"))
    else:  # a bin's share read, from evicted to kept on one hue
        colour = alt.Color("kept:Q", scale=alt.Scale(domain=[0, 1], range=[EVICTED, KEPT], interpolate="rgb"),
                           legend=alt.Legend(values=[0, 1], labelExpr="datum.value == 0 ? 'evicted' : 'kept'",
                                             gradientLength=120, title="share kept", orient="bottom",
                                             direction="horizontal"))
    domain = alt.Scale(domain=[0, n], nice=False, zero=False)
    return (
        alt.Chart(rows, title=titled(title, subtitle))
        .mark_rect()
        .encode(
            x=alt.X("key:Q", scale=domain, title="key (position in the text)", axis=alt.Axis(format="d")),
            x2="key_end:Q",
            y=alt.Y("step:Q", scale=alt.Scale(domain=[0, n], nice=False, zero=False, reverse=True),
                    title="step (the query's position)", axis=alt.Axis(format="d")),
            y2="step_end:Q",
            color=colour,
            tooltip=[alt.Tooltip("steps:N", title="step"), alt.Tooltip("keys:N", title="key"), *extra,
                     alt.Tooltip("kept:Q", format=".0%", title="kept")],
        )
        .properties(width="container", height=360, usermeta={**CANVAS, MAX_WIDTH: 560})
    )


def hurt_bars(frame: pd.DataFrame, title: str, top: int = TOP) -> alt.Chart:
    """The ``top`` heads whose cut alone raises the loss most (a :func:`probes.kv.sweep.heads_frame`, most hurt first),
    one bar each (loss change in nats), named "layer.kv head"; the tooltip has the query heads that read it, the
    attention mass the kept keys held and the keys read. A click on a bar selects its ``layer`` and ``head`` (the
    first query head; the selection ``head``), so the page can open it on Explore."""
    rows = frame.head(top).assign(name=lambda f: [f"layer {a}, kv head {b}"
                                                  for a, b in zip(f["layer"], f["kv_head"], strict=True)])
    order = rows["name"].tolist()
    pick = alt.selection_point(name="head", fields=["layer", "head"], on="click", clear=False)
    return (
        alt.Chart(rows, title=titled(title))
        .mark_bar(cursor="pointer", color="#08519c")
        .encode(
            y=alt.Y("name:N", sort=order, title=None, axis=alt.Axis(labelLimit=200)),
            x=alt.X("loss_change:Q", title="loss change when cut alone (nats)"),
            tooltip=[alt.Tooltip("name:N", title="head"), alt.Tooltip("query_heads:N", title="query heads"),
                     alt.Tooltip("loss_change:Q", format="+.4f", title=said("loss_change")),
                     alt.Tooltip("mass:Q", format=".1%", title=said("mass")),
                     alt.Tooltip("seen_fraction:Q", format=".0%", title=said("seen_fraction"))],
        )
        .add_params(pick)
        .properties(width="container", height=alt.Step(20))
    )
