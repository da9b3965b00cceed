"""Driving the app headless with Streamlit's AppTest, shared by the page tests: open it from a link, and read
its messages as a reader sees them."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from specs import lines
from streamlit.components.v2 import manifest_scanner
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")

# Each new AppTest scans every installed package for Streamlit component manifests (a thread pool reading their
# pyproject files: docs/tests.md, "Earlier stops", says what it cost), the same answer each time; a server does it
# once at its start, and here it is once a process too. (What it finds: none; the app uses no custom components.)
manifest_scanner.scan_component_manifests = lru_cache(maxsize=None)(manifest_scanner.scan_component_manifests)


def open_app(**params) -> AppTest:
    """The app as a link with these query parameters opens it, after its first run (which must not raise)."""
    at = AppTest.from_file(APP, default_timeout=300)
    for key, value in params.items():
        at.query_params[key] = str(value)
    at.run()
    assert not at.exception, at.exception
    return at


def texts(elements) -> str:
    """The text of messages as a reader sees it (the app escapes user text as markdown: unescaped here)."""
    return re.sub(r"\\(.)", r"\1", "\n".join(e.value for e in elements)).replace("\u2060", "")


def rerun(at: AppTest) -> AppTest:
    """Run the app again after a widget changed (which must not raise)."""
    at.run()
    assert not at.exception, at.exception
    return at


def specs(at: AppTest) -> list[dict]:
    """The vega-lite specs of every chart on the page, in order, each title as the browser draws it."""
    return [drawn(c) for c in at.get("vega_lite_chart")]


def drawn(chart) -> dict:
    """A chart element's spec with its title as the browser draws it: a title the spec reads from its table
    (``charts.data_title``: an expression) is the table's title column."""
    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    from dashboard.core.charts import DATA, TITLE, read_from_table

    spec = json.loads(chart.proto.spec)
    if read_from_table(spec.get("title")):
        (table,) = [d for d in chart.proto.datasets if d.name == DATA]
        spec["title"] = str(convert_arrow_bytes_to_pandas_df(table.data.data)[TITLE].iloc[0])
    return spec


def titles(at: AppTest) -> list[str | None]:
    """Every chart's title as text (a title given as ``{"text": ...}`` too, its lines joined; not its subtitle), or
    None for a chart without one."""
    return [s.get("title") if isinstance(s.get("title"), str) else " ".join(lines((s.get("title") or {}).get("text")))
            or None for s in specs(at)]


def sidebar_text(at: AppTest) -> str:
    """The text in the sidebar's text box: what the page traces."""
    text = at.sidebar.text_area[0].value
    assert text is not None, "the sidebar's text box is empty"
    return text


def said(at: AppTest) -> list[str]:
    """Every chart's title and subtitle as a reader reads them: the title's lines, then the subtitle's."""
    return [" ".join(lines(t) if isinstance(t := s.get("title"), str) or t is None
                     else lines(t.get("text")) + lines(t.get("subtitle"))) for s in specs(at)]


def rows(at: AppTest, title: str) -> list[dict]:
    """The data rows of the chart with this title (Streamlit ships chart data as Arrow, beside the spec)."""
    import json

    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    def read(spec: dict) -> str:  # the title and subtitle as a reader reads them (lines joined)
        t = spec.get("title")
        return " ".join(lines(t) if isinstance(t, str) or t is None
                        else lines(t.get("text")) + lines(t.get("subtitle")))

    charts = [c for c in at.get("vega_lite_chart") if title in json.dumps(drawn(c), ensure_ascii=False)
              or title in read(drawn(c))]
    assert charts, f"no chart titled {title!r}"
    main = charts[0].proto.datasets[0]  # the first layer's data (a highlight layer has its own)
    return convert_arrow_bytes_to_pandas_df(main.data.data).to_dict("records")


def model_options(at: AppTest) -> list[str]:
    """The sidebar's Model menu."""
    return list(at.sidebar.selectbox[0].options)


def upload(at: AppTest, name: str, csv: bytes) -> AppTest:
    """On the Heads page: switch to "Upload a table" and upload ``csv``."""
    at.segmented_control(key="heads_how").set_value("Upload a table")
    rerun(at)
    at.file_uploader(key="probe_upload").set_value((name, csv, "text/csv"))
    return rerun(at)


def run_probe(probe: str, items: int) -> AppTest:
    """On the Heads page: run a built-in probe over ``items`` items."""
    at = open_app(page="heads")
    at.selectbox(key="w_probe").set_value(probe)
    at.number_input(key="w_items").set_value(items)
    at.button[0].click()
    return rerun(at)


def steps_table(at: AppTest):
    """The Q/K/V page's table of every key's steps (q·k, × scale, softmax weight…)."""
    return next(d.value for d in at.dataframe if "softmax weight" in d.value.columns)


def opening(model: str = "minilm") -> tuple[int, int]:
    """The head the app opens on for its story sentence on ``model``: the one the library's evidence chooses on half
    of the question's controls (:func:`probes.evidence.claims.question_evidence`), never the largest margin on the
    sentence alone."""
    return _opening(model)


@lru_cache(maxsize=4)
def _opening(model: str) -> tuple[int, int]:
    import probes
    from dashboard.core.state import DEFAULT_TEXT, STORIES
    from probes.evidence.claims import question_evidence

    head = question_evidence(probes.load(model), DEFAULT_TEXT, *STORIES[DEFAULT_TEXT]).head
    assert head is not None, f"no head answers the story's question on {model}"
    return head


def opening_header(model: str = "minilm") -> str:
    """Explore's header on the story sentence as the app opens it."""
    layer, head = opening(model)
    return f"{model}: layer {layer}, head {head}"


def cancel_at_first_update(monkeypatch, work: str) -> list[float]:
    """Make ``work``'s Cancel button be clicked once, at its bar's first step of work done (an update above 0): its
    callback runs and the run ends there, as Streamlit ends a run at the next element it sends after a click.
    Returns each update's fraction of ``work``'s bars, of every run."""
    import streamlit as st

    from dashboard.core import ui

    shown: list[float] = []
    update = ui.Progress.progress
    clicks: list[float] = []  # the update that clicked, once

    def clicked(self, value, text=None):
        if self.work != work:
            return update(self, value, text)
        shown.append(value)
        update(self, value, text)
        if value > 0 and not clicks:
            clicks.append(value)
            ui._cancel(self.work, self.signature)
            st.rerun()

    monkeypatch.setattr(ui.Progress, "progress", clicked)
    return shown
