"""Links written by the app before its pages became folders open on the same view today: the same elements in the
same order, with the same words, widgets, chart titles and tables, and the same link written back
(tests/links.py says what a view is here; links_bbffcaf.json is what commit bbffcaf drew). One change is on purpose:
a link's notes on parameters it could not use come in the order of the link's parts (the core's, then each page's in
menu order), where they came in the order of the one dataclass of 46 fields before."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from links import LINKS, draw, visible

RECORD = json.loads((Path(__file__).with_name("links_bbffcaf.json")).read_text())


def test_the_record_holds_every_link() -> None:
    assert list(RECORD) == list(LINKS)


@pytest.mark.parametrize("name", list(LINKS))
def test_a_link_of_the_old_app_opens_on_the_same_view(name: str) -> None:
    now, then = visible(draw(LINKS[name])), visible(RECORD[name])
    before, after = (json.dumps(view, ensure_ascii=False, indent=1).splitlines() for view in (then, now))
    assert now == then, "\n".join(difflib.unified_diff(before, after, "then", "now", lineterm="", n=2))
