"""Start here: a bare address opens on the tour; every finding's verdict is the library's (a verdict the library
turns to "not supported" is said so, never shown as holding), and a finding's button opens its page on its view."""

from __future__ import annotations

import pytest
from apptest import open_app, rerun, texts

from dashboard.app_pages.start import data
from dashboard.core import questions
from dashboard.core.shared_work import SharedWork
from probes.evidence import findings
from probes.evidence.findings import FINDINGS, Judged
from probes.evidence.record import BASELINE, SUPPORTED

HEAD = (1, 2)


@pytest.fixture
def verdicts(monkeypatch):
    """The library's findings judged instantly: each finding's verdict is what the test sets in the returned dict
    (supported unless set), read by the library's own :func:`findings.read`; nothing is computed."""
    said: dict[str, str] = {}
    runs: list[str] = []

    def gather(finding, model, progress=None):
        runs.append(finding.key)
        return finding.key

    def question_evidence(inp, asked, raw=None, progress=None):
        runs.append(asked.query)
        return next(f.key for f in FINDINGS.values() if f.question and f.question[1] == asked.query)

    def read(finding, result):
        verdict = said.get(finding.key, SUPPORTED)
        return Judged(verdict, f"line of {finding.key}: {verdict}", HEAD)

    kept: dict = {}
    monkeypatch.setattr(findings, "gather", gather)
    monkeypatch.setattr(findings, "read", read)
    monkeypatch.setattr(data, "_works", SharedWork("finding", len(FINDINGS)))
    monkeypatch.setattr(data.models, "model_named", lambda name: name)  # (no model is needed: nothing is run)
    monkeypatch.setattr(questions, "question_evidence", question_evidence)
    monkeypatch.setattr(questions, "has_evidence", lambda inp, asked: (inp.model, asked.query) in kept)
    said["runs"] = runs  # type: ignore[assignment]
    return said


def test_a_bare_address_opens_on_the_tour_with_every_finding_judged_by_the_library(verdicts):
    at = open_app()
    assert [h.value for h in at.header][:1] == ["Start here"]
    holds = texts(at.success)
    for finding in FINDINGS.values():
        assert f"line of {finding.key}: supported" in holds
    assert len(at.success) == len(FINDINGS) and not at.warning


def test_a_finding_the_library_does_not_support_is_said_so_with_what_to_try(verdicts):
    verdicts["chinese"] = BASELINE
    at = open_app()
    held, not_held = texts(at.success), texts(at.warning)
    assert "line of chinese" not in held
    assert f"Not shown to hold. line of chinese: baseline {FINDINGS['chinese'].otherwise}" in not_held
    assert len(at.success) == len(FINDINGS) - 1


def test_each_work_is_computed_once_for_the_findings_that_share_it(verdicts):
    open_app()
    open_app()  # a second session: everything is kept
    runs = verdicts["runs"]
    probe_works = [f for f in FINDINGS.values() if f.question is None]
    assert sorted(set(runs) & {f.key for f in probe_works}) == sorted(
        {next(g.key for g in probe_works if (g.work, g.options) == (f.work, f.options)) for f in probe_works})
    assert len([r for r in runs if r in {f.key for f in probe_works}]) == len({(f.work, f.options)
                                                                                for f in probe_works})


def test_a_findings_button_opens_its_page_with_its_model_text_and_head(verdicts):
    at = open_app()
    at.button(key="start_determiner").click()
    at = rerun(at)
    finding = FINDINGS["determiner"]
    assert at.sidebar.text_area[0].value == finding.link["text"]
    assert at.sidebar.slider[0].value == HEAD[0] and at.sidebar.slider[1].value == HEAD[1]
    assert at.query_params.get("page") in (None, [], "explore", ["explore"])
    assert not [h for h in at.header if h.value == "Start here"]


def test_the_kv_finding_opens_the_kv_page_on_smollm2(verdicts):
    at = open_app()
    at.button(key="start_kv").click()
    at = rerun(at)
    assert at.sidebar.selectbox[0].value == "smollm2"
    assert at.query_params["page"] in ("kv", ["kv"])
    assert at.query_params["kv_budgets"] in ("64", ["64"])
    assert at.query_params["kv_tokens"] in ("256", ["256"])  # the text the finding was judged on


def test_a_link_without_a_page_still_opens_explore(verdicts):
    at = open_app(model="minilm", layer=2, text="The cat sat on the mat.")
    assert not [h for h in at.header if h.value == "Start here"]
    assert verdicts["runs"] == []


def test_every_finding_opens_a_page_of_the_app_and_asks_the_apps_own_questions():
    from dashboard.core.pages import PAGES
    from dashboard.core.state import STORIES

    assert {f.page for f in FINDINGS.values()} <= set(PAGES)
    for finding in FINDINGS.values():
        if finding.question is not None:  # the answer box's own question: Explore reuses its evidence
            text, *words = finding.question
            assert STORIES[text] == tuple(words)
