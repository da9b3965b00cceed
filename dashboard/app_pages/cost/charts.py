"""Cost's chart: a measure against input length, one line a path, beside the quadratic it is measured against."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from dashboard.core.charts import titled
from dashboard.core.words import said

PALETTE = ["#08519c", "#e6550d", "#31a354", "#756bb1"]
QUADRATIC = "c·L² (quadratic)"


def cost_chart(frame: pd.DataFrame, y: str, title: str, quadratic: float | None = None) -> alt.Chart:
    """A measure (``y``: a column of a tidy ``tokens, path, …`` table) against input length, one line
    per path, log-log; ``quadratic`` = c draws the curve c·L² for comparison."""
    data = frame[["tokens", "path", y]].dropna()
    paths = list(dict.fromkeys(data["path"]))
    colours = PALETTE[: len(paths)]
    if quadratic is not None:
        grid = np.unique(np.geomspace(data["tokens"].min(), data["tokens"].max(), 24).round())
        data = pd.concat([data, pd.DataFrame({"tokens": grid, "path": QUADRATIC, y: quadratic * grid**2})])
        paths, colours = paths + [QUADRATIC], colours + ["#969696"]
    return (
        alt.Chart(data, title=titled(title))
        .mark_line(point=True)
        .encode(
            x=alt.X("tokens:Q", scale=alt.Scale(type="log", base=2), title="input length (tokens)"),
            y=alt.Y(f"{y}:Q", scale=alt.Scale(type="log"), title=said(y)),
            color=alt.Color("path:N", title=None, scale=alt.Scale(domain=paths, range=colours),
                            legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=0)),
            strokeDash=alt.condition(alt.datum.path == QUADRATIC, alt.value([4, 3]), alt.value([1, 0])),
            tooltip=[alt.Tooltip("path:N"), alt.Tooltip("tokens:Q"),
                     alt.Tooltip(f"{y}:Q", format=".4g", title=said(y))],
        )
        .properties(width="container", height=280)
    )


