"""The logit lens's grid of tokens (the Logit lens page, and Generate's column of each new token)."""

from __future__ import annotations

import re

import altair as alt
import numpy as np
import pandas as pd

from .charts import BLUE, CANVAS, Layered, compact, titled, widths

LENS_CELL = 50  # px: a logit-lens cell holds a token as text (16 fit beside the sidebar)
# px: a cell is never narrower, so it shows a token of about six characters, not "…" (a phone's lens of 16 positions
# scrolls in its own box instead)
LENS_MIN_CELL = 44
LENS_AXIS = 110  # px: the rows' names ("after layer 29", "11.8") beside the table
LENS_RANGE = ["#ffffff", "#a63603"]  # a head's direct logit contribution: white is 0 (below 0 stays white)


BYTES = re.compile(r"(?:\\x[0-9a-f]{2})+")  # a run of \xNN escapes: bytes of a character the token holds part of


def bytes_said(run: str) -> str:
    """A run of ``\\xNN`` escapes (what :func:`probes.tokens.readable_tokens` makes of a piece of a character) as
    a reader reads it: ‹99 82›, the bytes in hex between guillemets."""
    return "‹" + " ".join(run[i + 2:i + 4] for i in range(0, len(run), 4)) + "›"


def visible(piece: str) -> str:
    """A token as a cell or tooltip shows it: each leading or trailing space (a no-break space too) as ␣, a token
    of spaces only as ␣s, and the bytes of a character it holds only part of (a byte-level vocabulary's piece of 她)
    as ‹e5 a5›, not as the escapes \\xe5\\xa5."""
    core = BYTES.sub(lambda m: bytes_said(m.group()), piece.strip())
    lead, trail = len(piece) - len(piece.lstrip()), len(piece) - len(piece.rstrip())
    return "␣" * len(piece) if not piece.strip() else "␣" * lead + core + "␣" * trail


def lens_grid(frame: pd.DataFrame, row: str, rows: list[str], value: str = "probability", title: str = "",
              reach: float | None = None) -> Layered:
    """The logit lens as a table (a tidy ``<row>, position, input, rank, piece, <value>`` frame of
    ``probes.effects.lens``): one row per value of ``row`` in the order ``rows`` (layers: "embeddings" … "after layer
    N−1"; heads: "L.H"), one column per position (its input token), each cell the top token as text. ``value``
    "probability" is coloured on the fixed 0..1 blue scale (white is 0); a logit contribution (a head's direct
    effect) from 0 (white) to ``reach`` (default: the largest top logit shown), in another hue, below 0 white. The
    tooltip lists the top k with their value."""
    missing = [c for c in (row, "position", "input", "rank", "piece", value) if c not in frame]
    if missing:
        raise ValueError(f"the frame has no {', '.join(missing)} column")
    frame = frame.assign(shown=[visible(p) for p in frame["piece"]])
    digits = ".3f" if value == "probability" else "+.3f"
    frame["said"] = [f"{s}  {v:{digits}}" for s, v in zip(frame["shown"], frame[value], strict=True)]
    ranks = sorted(frame["rank"].unique())
    tops = frame.pivot_table(index=[row, "position"], columns="rank", values="said", aggfunc="first")
    tops.columns = [f"top{r}" for r in tops.columns]
    cells = frame[frame["rank"] == 1][[row, "position", "input", "shown", value]].merge(
        tops.reset_index(), on=[row, "position"])
    positions = sorted(cells["position"].unique())
    inputs = dict(zip(cells["position"], cells["input"], strict=True))
    names = [f"{p}: {inputs[p]}" for p in positions]
    cells["column"] = [f"{p}: {t}" for p, t in zip(cells["position"], cells["input"], strict=True)]
    if value == "probability":
        scale, dark = BLUE, 0.5
    else:
        reach = float(reach if reach is not None else cells[value].max())
        reach = reach if reach > 0 and np.isfinite(reach) else 1e-9
        scale, dark = alt.Scale(domain=[0, reach], range=LENS_RANGE, interpolate="rgb", clamp=True), reach / 2
    tooltip = [alt.Tooltip(f"{row}:N"), alt.Tooltip("column:N", title="position")]
    tooltip += [alt.Tooltip(f"top{r}:N", title=f"top {r}") for r in ranks]
    base = alt.Chart(compact(cells.drop(columns=["input"]))).encode(
        x=alt.X("column:N", sort=names, title="position: input token", axis=alt.Axis(labelAngle=-60, labelOverlap=False,
                                                                                     orient="top")),
        y=alt.Y(f"{row}:N", sort=rows, title=None, axis=alt.Axis(labelOverlap=False)),
        tooltip=tooltip,
    )
    # the colour bar (under the table, as every chart's legend) no longer than the narrowest table is wide
    legend = alt.Legend(gradientLength=min(200, LENS_MIN_CELL * len(positions)))
    rect = base.mark_rect(stroke="#d9d9d9", strokeWidth=0.5).encode(
        color=alt.Color(f"{value}:Q", scale=scale, title=value if value == "probability" else "logit (direct)",
                        legend=legend))
    text = base.mark_text(fontSize=11, limit=alt.expr(f"width / {len(positions)} - 4")).encode(
        text=alt.Text("shown:N"),
        color=alt.condition(f"datum['{value}'] > {dark}", alt.value("white"), alt.value("black")))
    return alt.layer(rect, text, title=titled(title)).properties(
        width="container", height=alt.Step(20),
        usermeta={**CANVAS, **widths(len(positions), LENS_CELL, 200, LENS_AXIS, least=LENS_MIN_CELL)})


