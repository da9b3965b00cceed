"""Links written by the app before its pages became folders open on the same view today: the same elements in the
same order, with the same words, widgets, chart titles and tables, and the same link written back
(tests/links.py says what a view is here, and how much a figure in a sentence may move between two CPUs;
links_bbffcaf.json is what commit bbffcaf drew). Changes on purpose:
a link's notes on parameters it could not use come in the order of the link's parts (the core's, then each page's in
menu order), where they came in the order of the one dataclass of 46 fields before;
"explore-opens-on-the-story" (the bare address) opens on Start here, the tour of findings (issue 61), no longer on
Explore: a link with parameters and no page= still opens Explore;
the KV lab's opening paragraph says what perplexity is, its Policies help names H2O (Heavy-Hitter Oracle) (issue 61);
the KV lab's perplexity caption ends on a line on H2O when H2O is drawn (issue 61);
the KV lab says how many tokens of the EWT text it read beside the Tokens box, where whole sentences make fewer
(27 tokens read for 40) (issue 61);
the KV lab's offer to cut each head says how it now runs (one full pass, then each head from its layer and first
eviction on: probes.kv.layered) (issue 61);
Heads says what held-out means under a label's verdict (issue 61);
the Circuit table's "In every row" line names random_low and random_high in words (random matrices, low / high
(95 %)) (issue 61);
the Q/K/V page's "weighted value vectors (heaviest) and their sum" wraps to its chart's width (a phone cut it
with "…") (issue 61);
a story's text opens on the head chosen on its question's controls only on the pages whose answer box shows that
evidence (Explore; Find for its own question): Heads, Cost, Generate and Find on the story's question keep the link's
head (layer 0 where the link names none) instead of computing the evidence first, and whatever another session has
cached (issue 61);
a bad page= lists the Start here page among the pages (issue 61);
Circuit's composition caption ends on what a noise floor is (words.gloss("floor")) (issue 61)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
from links import LINKS, draw, same_view, visible

RECORD = json.loads((Path(__file__).with_name("links_bbffcaf.json")).read_text())


def test_the_record_holds_every_link() -> None:
    assert list(RECORD) == list(LINKS)


@pytest.mark.parametrize("name", list(LINKS))
def test_a_link_of_the_old_app_opens_on_the_same_view(name: str) -> None:
    now, then = visible(draw(LINKS[name])), visible(RECORD[name])
    before, after = (json.dumps(view, ensure_ascii=False, indent=1).splitlines() for view in (then, now))
    assert same_view(then, now), "\n".join(difflib.unified_diff(before, after, "then", "now", lineterm="", n=2))


@pytest.mark.parametrize(("then", "now", "same"), [
    ("Sum of the parts -0.6705 (|Δ| 4e-07 from the score)", "Sum of the parts -0.6705 (|Δ| 5e-07 from the score)",
     True),  # a float32 residual is noise whatever its digits
    ("float64 max |Δ| 3e-15, fp32 1.1e-06", "float64 max |Δ| 5e-15, fp32 1.3e-06", True),
    ("Dashed: the full cache (10586.98).", "Dashed: the full cache (10586.96).", True),  # 1e-5 of its size
    ("prediction (0.72) is on top", "prediction (0.73) is on top", True),  # one unit of the last digit
    ("prediction (0.72) is on top", "prediction (0.75) is on top", False),
    ("from after layer 2 on.", "from after layer 3 on.", False),  # an integer is exact
    ("max |Δ| 4e-03", "max |Δ| 6e-03", False),  # e-notation over 1e-4 is a figure, not noise
    ("PASS · identical", "FAIL · identical", False),
    ("18 parts a side", "18 parts a side, 2 more", False),
])
def test_a_figure_may_move_as_float32_does_between_cpus_and_no_more(then: str, now: str, same: bool) -> None:
    assert same_view({"body": then}, {"body": now}) is same
