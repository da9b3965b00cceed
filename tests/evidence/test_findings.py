"""The tour's findings: each verdict is read from its evidence (a probe's held-out table, the KV runs' per-token
losses), never given; a finding's link carries the head its evidence chose."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from probes.errors import BadOption
from probes.evidence import findings
from probes.evidence.findings import FINDINGS, KV_BUDGET, KV_SINKS, Judged
from probes.evidence.record import BASELINE, SUPPORTED


def _table(verdict: str) -> pd.DataFrame:
    """A probe's table as run_probe writes it: every head's rows, the chosen head's with its held-out verdict."""
    rows = [dict(label="previous", layer=0, head=h, score=0.1, chosen=False, verdict="", said="", heldout_n=math.nan)
            for h in range(4)]
    rows[2].update(chosen=True, verdict=verdict, said=f"{verdict}: 0.999 (95 % interval 0.998 to 1, n = 30)",
                   heldout_n=30)
    rows.append(dict(label="sink", layer=1, head=3, score=0.7, chosen=True, verdict=BASELINE, said="no better",
                     heldout_n=30))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("verdict", [SUPPORTED, BASELINE])
def test_a_probe_findings_verdict_and_head_are_the_tables(verdict: str) -> None:
    judged = findings.read(FINDINGS["previous"], _table(verdict))
    assert judged.verdict == verdict and judged.supported is (verdict == SUPPORTED)
    assert judged.head == (0, 2)
    assert judged.said.startswith("Head 0.2, chosen on half of the items and judged on the other half: " + verdict)
    sink = findings.read(FINDINGS["sink"], _table(verdict))  # the same work, another label
    assert (sink.verdict, sink.head) == (BASELINE, (1, 3))


def test_a_label_with_no_chosen_head_is_too_few() -> None:
    table = _table(SUPPORTED)
    judged = findings.read(FINDINGS["determiner"], table)
    assert judged.verdict == "too few" and judged.head is None


def _losses(window_extra: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    full = rng.uniform(2.0, 6.0, 200)
    kept = full + rng.normal(0.0, 0.05, 200)
    return {"full": full, f"window:{KV_BUDGET}": kept + window_extra + rng.normal(0.0, 0.05, 200),
            f"sinks:{KV_SINKS}+window:{KV_BUDGET - KV_SINKS}": kept}


def test_the_kv_finding_holds_only_when_the_first_tokens_save_loss_beyond_the_interval() -> None:
    losses = _losses(1.0)
    held = findings.read(FINDINGS["kv"], losses)
    assert held.verdict == SUPPORTED and held.head is None
    window = float(np.exp(np.mean(losses[f"window:{KV_BUDGET}"])))
    assert f"a window alone reads at perplexity {window:,.1f}" in held.said
    assert "n = 200 tokens" in held.said
    none = findings.read(FINDINGS["kv"], _losses(0.0))
    assert none.verdict == BASELINE


def test_a_finding_refuses_a_model_it_is_not_about() -> None:
    with pytest.raises(BadOption, match="about smollm2, not minilm"):
        findings.gather(FINDINGS["kv"], SimpleNamespace(name="minilm"))


def test_a_findings_link_opens_its_page_on_the_judged_head() -> None:
    finding = FINDINGS["determiner"]
    link = finding.link_to(Judged(SUPPORTED, "", (2, 8)))
    assert link == {"model": "minilm", "page": "explore", "text": finding.link["text"], "query": "10", "layer": "2",
                    "head": "8"}
    assert "layer" not in FINDINGS["chinese"].link_to(Judged(SUPPORTED, "", (11, 8)))  # the story opens its head
    assert FINDINGS["chinese"].question == ("小明把苹果给了小红，因为她很饿", "她", "小红", "小明")
    assert FINDINGS["previous"].question is None

