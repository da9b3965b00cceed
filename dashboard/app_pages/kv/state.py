"""The KV lab's part of the link: the text read (and its length in tokens, for the EWT text), the policy kinds and
budgets swept, the sinks of sinks + window, and the one policy and budget whose kept tokens and heads are shown."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard.core.parts import LinkPart, choice, parsed, whole
from probes.kv.sweep import KINDS

KV_TEXTS = {"ewt": "EWT web text", "sidebar": "the sidebar's text"}
MAX_BUDGET = 8192  # keys: a budget in a link (SmolLM2's context)


def _kinds(raw: str) -> str:
    kinds = [k.strip() for k in raw.split(",") if k.strip()]
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"expected some of {', '.join(KINDS)}, comma-separated")
    return ",".join(k for k in KINDS if k in kinds)


def _budgets(raw: str) -> str:
    numbers = [b.strip() for b in raw.split(",") if b.strip()]
    if not numbers or not all(b.isascii() and b.isdigit() and 0 < int(b) <= MAX_BUDGET for b in numbers):
        raise ValueError(f"expected budgets from 1 to {MAX_BUDGET:,} keys, comma-separated")
    return ",".join(str(b) for b in sorted({int(b) for b in numbers}))


@dataclass(frozen=True)
class KVState(LinkPart):
    kv_text: str = choice("ewt", KV_TEXTS)
    # the default chart: nine runs and the full cache's over 128 tokens, each run a pass of the whole text (the
    # sink, H2O's gain and the budgets' cost all show); more tokens or budgets are the reader's choice
    kv_tokens: int = whole(128, least=2)
    kv_policies: str = parsed("window,sinks,h2o", _kinds)
    kv_budgets: str = parsed("16,32,64", _budgets)
    kv_sinks: int = whole(4, least=1)
    kv_policy: str = choice("sinks", KINDS)
    kv_budget: int = whole(64, least=1)
