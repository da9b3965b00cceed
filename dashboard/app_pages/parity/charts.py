"""Parity's chart: max |Δ| of every layer × head on a fixed log scale."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from dashboard.core.charts import Layered, titled
from dashboard.core.grid_charts import grid_axes, grid_size
from dashboard.core.words import difference

PARITY_DOMAIN = (1e-9, 1e-3)  # max |Δ| always drawn on this log scale: a grid of zeros does not look like a signal


def parity_heatmap(diffs: np.ndarray, tolerance: float) -> Layered:
    """Layers × heads grid of max |Δ| between Hugging Face and the scratch pass, on a fixed log scale
    (:data:`PARITY_DOMAIN`, pale to dark: 0 and anything under 1e-9 sit at its pale bottom and read
    "0 (bit-identical)" or their value in the tooltip; a grid of zeros is a pale block, not a dark one); the
    tolerance is a tick on the legend and in the title, and heads above it are outlined in red."""
    layers, heads = diffs.shape
    ly, h = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    d = diffs.astype(float).ravel()
    low, high = PARITY_DOMAIN
    frame = pd.DataFrame({"layer": ly.ravel(), "head": h.ravel(), "max_abs_diff": d,
                          "shown": np.clip(d, low, high), "within": d <= tolerance,
                          "difference": [difference(x) for x in d]})
    x, y, _ = grid_axes(layers, heads)
    base = alt.Chart(frame).encode(x=x, y=y)
    ticks = sorted({low, 1e-7, 1e-5, high, tolerance})
    rect = base.mark_rect().encode(
        color=alt.Color("shown:Q", scale=alt.Scale(type="log", domain=[low, high], scheme="orangered", clamp=True),
                        legend=alt.Legend(values=ticks, format=".2~e",
                                          title=["max |Δ|", f"tolerance {tolerance:.2g}"])),
        tooltip=[alt.Tooltip("layer:O"), alt.Tooltip("head:O"), alt.Tooltip("difference:N", title="max |Δ|"),
                 alt.Tooltip("within:N", title="within tolerance")],
    )
    failed = base.transform_filter("!datum.within").mark_rect(fill=None, stroke="#cb181d", strokeWidth=2)
    return alt.layer(rect, failed, title=titled(f"max |Δ| attention per head (tolerance {tolerance:.2g}; red outline: "
                                                "above it)")).properties(**grid_size(layers, heads))


