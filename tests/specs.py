"""Reading a chart's Vega-Lite spec as a reader reads the chart: its rows, and its title's lines as drawn. Shared by
the chart tests of the core and of each page, and by the AppTest helpers (apptest.py)."""

from __future__ import annotations

from typing import Any


def rows(spec: dict) -> list[dict]:
    """Every row of every table of a spec (as ``to_dict`` writes them: records under ``datasets``)."""
    return [r for table in spec["datasets"].values() for r in table]


def lines(part: Any) -> list[str]:
    """A title's or subtitle's lines, at the widest (a title that wraps to the chart's width is an expression)."""
    from dashboard.core.charts import title_lines

    return title_lines(part)


def said(spec: dict) -> str:
    """A chart's title as a reader reads it: its lines, then its subtitle's."""
    title = spec.get("title")
    if isinstance(title, str) or title is None:
        return title or ""
    return " ".join(lines(title.get("text")) + lines(title.get("subtitle")))
