"""Layers × heads grids, the map of a model that several pages draw: a probe's scores (Heads, Find heads) and a
change each head makes (Does it matter?, Find heads, Circuit), each cell a head that opens on Explore when
clicked."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from .charts import BLUE, GRID_CELL, HIGHLIGHT, Layered, titled, widths
from .words import said


def grid_axes(n_layers: int, n_heads: int) -> tuple[alt.X, alt.Y, dict]:
    """The axes of a layers × heads grid: the longer side across, so a deep model (smollm2: 30 layers × 9 heads) is
    a wide band one screen tall rather than a tall column, and a wide one (minilm: 6 × 12) stays heads across.
    Returns x, y and the fields of x and y (for layers drawn over the grid)."""
    layers: dict[str, Any] = dict(field="layer", type="ordinal", title="layer",
                                  scale=alt.Scale(domain=list(range(n_layers))))
    heads: dict[str, Any] = dict(field="head", type="ordinal", title="head",
                                 scale=alt.Scale(domain=list(range(n_heads))))
    across, down = (layers, heads) if n_layers > n_heads else (heads, layers)
    return (alt.X(**across, axis=alt.Axis(labelAngle=0)), alt.Y(**down),
            {"x": f"{across['field']}:O", "y": f"{down['field']}:O"})


GRID_COLUMN = 60  # px: a grid's column is at most this wide (a 12-head grid does not stretch into flat bands)
GRID_AXIS = 70  # px: a grid's y axis (its numbers and title)


def grid_size(n_layers: int, n_heads: int) -> dict:
    """A layers × heads grid's size: the page's width (at most :data:`GRID_COLUMN` a column, at least
    :data:`charts.MIN_CELL`: a 30-layer grid scrolls in its own box on a phone), :data:`GRID_CELL` a row (see
    :func:`grid_axes`)."""
    across, down = max(n_layers, n_heads), min(n_layers, n_heads)
    return dict(width="container", height=GRID_CELL * down, usermeta=widths(across, GRID_COLUMN, 160, GRID_AXIS))


def gains(frame: pd.DataFrame, value: str = "score") -> pd.Series:
    """Each row's ``value`` minus its baseline (NaN where there is no baseline)."""
    if "baseline" not in frame:
        return pd.Series(np.nan, index=frame.index)
    return frame[value] - frame["baseline"]




def head_grid(frame: pd.DataFrame, label: str, n_layers: int, n_heads: int, selected: tuple[int, int] | None = None,
              value: str = "score", reach: float | None = None, share: bool = False) -> Layered:
    """Layers × heads grid of one probe label's scores (rows of a probe table); clicking a cell selects
    that (layer, head): the selection is named ``head``. Where the rows have a baseline the colour is the
    gain over it, on a diverging scale centred at 0 and symmetric (so noise around the baseline stays pale,
    never stretched over the whole palette), with the raw value, the baseline and the gain in the tooltip and
    the baseline in the title; without one (or coloured by another value than the score), the raw value.
    ``reach``: the largest |gain| the scale spans (default: this grid's own), so grids of several models can share
    one scale and their colours compare. ``share``: the label is a plain share from 0 to 1 (the sink share), read as
    it is: on the heatmaps' fixed 0..1 scale (white is 0), the baseline in the tooltip and the title only."""
    rows = frame[frame["label"] == label]
    if rows.empty:
        raise ValueError(f"no rows for label {label!r}")
    rows = rows.assign(gain=gains(rows, value))
    relative = not share and value == "score" and bool(rows["gain"].notna().any())  # the baseline is the score's
    pick = alt.selection_point(name="head", fields=["layer", "head"], on="click", clear=False)
    tooltip = [alt.Tooltip("layer:O"), alt.Tooltip("head:O"),
               alt.Tooltip(f"{value}:Q", format=".4f", title=said(value))]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".4f", title=said(c))
                for c in ("baseline", "gain", "mean_attention", "sink")
                if c in rows and c != value and rows[c].notna().any()]
    tooltip += [alt.Tooltip("n:Q", title=said("n"))] if "n" in rows else []
    name, what = said(label), said(value)
    x, y, fields = grid_axes(n_layers, n_heads)
    base = alt.Chart(rows).encode(x=x, y=y)
    if share:
        color = alt.Color(f"{value}:Q", scale=BLUE, title=[what, "(0 to 1)"])
        baselines = rows["baseline"].dropna().unique() if "baseline" in rows else []
        uniform = f"; uniform attention gives {baselines[0]:.3g}" if len(baselines) == 1 else ""
        title = f"{name}: share of attention from 0 to 1{uniform} (click a cell to open it)"
    elif relative:
        reach = float(reach if reach is not None else rows["gain"].abs().max()) or 1e-9
        color = alt.Color("gain:Q", title=[f"{what} −", "baseline"],
                          scale=alt.Scale(scheme="redblue", reverse=True, domain=[-reach, reach], domainMid=0))
        baselines = rows["baseline"].dropna().unique()
        against = f"baseline {baselines[0]:.3g}" if len(baselines) == 1 else "baseline per head"
        title = f"{name}: {what} above or below its {against} (click a cell to open it)"
    else:
        color = alt.Color(f"{value}:Q", scale=alt.Scale(scheme="viridis"), title=what)
        title = f"{name}: {what} by head, no baseline (click a cell to open it)"
    rect = base.mark_rect(cursor="pointer").encode(
        color=color, tooltip=tooltip, opacity=alt.condition(pick, alt.value(1.0), alt.value(0.75)),
    ).add_params(pick)
    layers = [rect]
    if selected is not None:
        mark = pd.DataFrame({"layer": [selected[0]], "head": [selected[1]]})
        layers.append(alt.Chart(mark).mark_rect(fill=None, stroke=HIGHLIGHT, strokeWidth=2.5).encode(**fields))
    return alt.layer(*layers, title=titled(title)).properties(**grid_size(n_layers, n_heads))


SIGNED = ("loss", "logit_diff", "diff", "share")  # measures that can go below 0: drawn diverging around 0
EFFECT_RANGE = ["#ffffff", "#a63603"]  # a change ≥ 0: white is no change


def effect_grid(frame: pd.DataFrame, value: str, n_layers: int, n_heads: int, title: str,
                selected: tuple[int, int] | None = None, signed: bool | None = None,
                extra: tuple[str, ...] = ()) -> Layered:
    """Layers × heads grid of one number per head (a ``layer, head, <value>`` frame: an ablation's effect, a
    head's share of a logit, a difference between two texts). A number that can be negative (``signed``, by
    default: the measure is one of :data:`SIGNED` or a value is below 0) is coloured on a diverging scale
    centred at 0 and symmetric, so 0 is white whatever the range; a change that is never below 0 on a scale
    from 0 (white) to its largest value. Clicking a cell selects that (layer, head): the selection is
    ``head``. ``extra``: more columns for the tooltip."""
    missing = [c for c in ("layer", "head", value) if c not in frame]
    if missing:
        raise ValueError(f"the frame has no {', '.join(missing)} column")
    rows = frame[["layer", "head", value, *extra]]
    values = rows[value].astype(float)
    if signed is None:
        signed = value in SIGNED or bool((values < 0).any())
    reach = float(values.abs().max()) if len(values) else 0.0
    reach = reach if reach > 0 and np.isfinite(reach) else 1e-9
    if signed:
        scale = alt.Scale(scheme="redblue", reverse=True, domain=[-reach, reach], domainMid=0)
    else:
        scale = alt.Scale(domain=[0, reach], range=EFFECT_RANGE, interpolate="rgb")
    pick = alt.selection_point(name="head", fields=["layer", "head"], on="click", clear=False)
    x, y, fields = grid_axes(n_layers, n_heads)
    base = alt.Chart(rows).encode(x=x, y=y)
    tooltip = [alt.Tooltip("layer:O"), alt.Tooltip("head:O"),
               alt.Tooltip(f"{value}:Q", format=".5f", title=said(value))]
    tooltip += [alt.Tooltip(f"{c}:Q", format=".5f", title=said(c)) for c in extra]
    rect = base.mark_rect(cursor="pointer").encode(
        color=alt.Color(f"{value}:Q", scale=scale, title=said(value)),
        tooltip=tooltip, opacity=alt.condition(pick, alt.value(1.0), alt.value(0.75)),
    ).add_params(pick)
    layers = [rect]
    if selected is not None:
        mark = pd.DataFrame({"layer": [selected[0]], "head": [selected[1]]})
        layers.append(alt.Chart(mark).mark_rect(fill=None, stroke=HIGHLIGHT, strokeWidth=2.5).encode(**fields))
    return alt.layer(*layers, title=titled(title)).properties(**grid_size(n_layers, n_heads))


