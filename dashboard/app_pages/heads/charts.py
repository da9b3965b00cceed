"""Heads' readings of a probe table: the label whose head gains most over its baseline, and the rows of the heads
each label chose."""

from __future__ import annotations

import pandas as pd

from dashboard.core.grid_charts import gains


def best_label(frame: pd.DataFrame, value: str = "score", skip: frozenset[str] | set[str] = frozenset(),
               least: int = 0) -> str:
    """The label whose best head gains most over its baseline (the raw best score where none has one): the
    grid a reader should see first, not the alphabetically first one. Among labels scored as shares or
    accuracies (0 to 1) where there are any: a gain of 5 tokens of attention distance or 0.5 nats of entropy
    is not comparable with a gain of 0.5 in accuracy. Labels in ``skip`` (the sink share: the first token is
    never the answer unless asked for) only when there is nothing else; labels with fewer than ``least`` examples
    (column ``n``: a gain over one example is chance) only when no label has that many."""
    skipped = frame["label"].astype(str).isin(skip)
    if not skipped.all():
        frame = frame[~skipped]
    if least and "n" in frame:
        enough = frame["n"].groupby(frame["label"].astype(str)).transform("min") >= least
        if enough.any():
            frame = frame[enough]
    labels = frame["label"].astype(str)
    shares = frame[value].between(0, 1).groupby(labels).transform("all")
    if shares.any():
        frame, labels = frame[shares.astype(bool)], labels[shares.astype(bool)]
    gain = gains(frame, value)
    score = gain if gain.notna().any() else frame[value]
    by = score.groupby(labels).max().dropna()
    return str(by.idxmax()) if len(by) else str(frame["label"].iloc[0])


def chosen_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Each judged label's chosen head (the rows ``chosen`` marks in a table with held-out verdicts,
    :mod:`probes.evidence.probes`), one row a label; empty for a table without them."""
    if "chosen" not in frame or "verdict" not in frame:
        return frame.iloc[0:0]
    picked = frame["chosen"].astype(str).str.lower().isin(["true", "1"])
    rows = frame[picked].copy()
    rows["label"] = rows["label"].astype(str)
    return rows.drop_duplicates("label")


def supported_label(frame: pd.DataFrame, skip: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The label whose chosen head is supported on held-out items with the largest held-out gain over its baseline
    (None: no label's head is supported). Labels in ``skip`` (the sink) only when no other is supported."""
    rows = chosen_rows(frame)
    if rows.empty:  # (a table without verdicts, or none chosen)
        return None
    rows = rows[rows["verdict"].astype(str) == "supported"]
    if rows.empty:
        return None
    others = rows[~rows["label"].isin(skip)]
    rows = others if len(others) else rows
    gain = rows["heldout_score"] - rows["baseline_heldout"].fillna(0.0)
    return str(rows.loc[gain.idxmax(), "label"])


