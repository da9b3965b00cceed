"""Findings on the offline models, each judged when asked: what the app's "Start here" tour shows.

A finding is a claim about one model ("minilm has a previous-token head", "on smollm2 one head finds who 她 is") and
the work that judges it: a probe run held out (:mod:`probes.evidence.probes`: the head chosen on half of the items,
judged on the other half), a question judged on its controls (:mod:`probes.evidence.claims`), an induction head and
the earlier heads it reads from (the probe's verdict, then composition edges above their noise floor,
:mod:`probes.evidence.edges`), or what cutting the KV cache costs (per-token losses of two policies at one budget,
with a bootstrap interval of the difference). Nothing here says "supported" by itself: every verdict comes from the
evidence record (:func:`probes.evidence.record.verdict`) or, for the KV cache, from the interval.

Several findings read one piece of work (the positional probe gives the previous-token head and the sink):
:data:`FINDINGS` names each finding's work (:attr:`Finding.work`), so a caller that keeps works by (model, work)
computes each once. :func:`judge` runs a finding from scratch; :func:`read` turns a work's result into the finding's
:class:`Judged` (the verdict and its evidence line).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BadOption
from .record import BASELINE, SUPPORTED, TOO_FEW

if TYPE_CHECKING:
    from ..seam import ModelLike

Progress = Callable[[int, int], None] | None

PROBE_ITEMS = 60  # items a probe finding runs: 30 chosen on, 30 judged (record.MIN_ITEMS)
KV_TOKENS, KV_BUDGET, KV_SINKS = 256, 64, 4  # the KV finding: EWT web text, keys per head, first tokens kept
CHINESE = ("小明把苹果给了小红，因为她很饿", "她", "小红", "小明")  # the seeds' question (dashboard.core.state's)
STORY = ("Xiaoming gave the apple to Xiaohong because she was hungry.", "she", "Xiaohong", "Xiaoming")


@dataclass(frozen=True)
class Judged:
    """A finding's verdict (``supported``, ``baseline`` or ``too few``: :mod:`probes.evidence.record`'s), the
    evidence line that says it, and the head it names (None: no head, or the finding is about no single head)."""

    verdict: str
    said: str
    head: tuple[int, int] | None = None

    @property
    def supported(self) -> bool:
        return self.verdict == SUPPORTED


@dataclass(frozen=True)
class Finding:
    """One claim about one offline model. ``work``: what judging it runs (a key of :data:`WORKS`, with ``options``);
    ``page``: the app page that shows it, opened with ``link`` (and the judged head as layer and head, where
    ``head_in_link``); ``otherwise``: one sentence on what to try when it is not supported."""

    key: str
    model: str
    title: str
    about: str
    work: str
    options: tuple[tuple[str, Any], ...]
    reader: Callable[[Any], Judged]
    page: str
    link: Mapping[str, str] = field(default_factory=dict)
    head_in_link: bool = True
    otherwise: str = ""

    @property
    def question(self) -> tuple[str, str, str, str] | None:
        """(text, query, key, against) for a question finding (judged on the question's controls), else None."""
        return dict(self.options).get("question") if self.work == "question" else None

    def link_to(self, judged: Judged | None) -> dict[str, str]:
        """The app link that shows this finding: its model, page and view, with the judged head as layer and head."""
        out = {"model": self.model, "page": self.page, **self.link}
        if self.head_in_link and judged is not None and judged.head is not None:
            out.update(layer=str(judged.head[0]), head=str(judged.head[1]))
        return out


# -- the works: what judging a finding runs ---------------------------------------------------------------------

def _probe(model: ModelLike, probe: str, limit: int = PROBE_ITEMS, progress: Progress = None):
    from .probes import run_probe

    return run_probe(model, probe, limit, progress=progress)


def _question(model: ModelLike, question: tuple[str, str, str, str], progress: Progress = None):
    from .claims import question_evidence

    return question_evidence(model, *question, progress=progress)


def _induction(model: ModelLike, limit: int = PROBE_ITEMS, progress: Progress = None) -> dict:
    """The induction probe judged held out, and the earlier heads its chosen head reads through its key above the
    noise floor of random matrices (K-composition from the weights)."""
    from ..effects.compose import composition_scores
    from .edges import composition_floors

    table = _probe(model, "induction", limit, progress)
    row = _chosen(table, "induction")
    edges = None
    if row is not None and int(row["layer"]) > 0:
        edges = composition_floors(composition_scores(model, "k", receivers=[(int(row["layer"]), int(row["head"]))]))
    return {"table": table, "edges": edges}


def _kv(model: ModelLike, tokens: int = KV_TOKENS, budget: int = KV_BUDGET, sinks: int = KV_SINKS,
        progress: Progress = None) -> dict:
    """The EWT text read with the full cache, a window of ``budget`` keys, and ``sinks`` first tokens + a window
    (the same budget), layer at a time: each run's per-token losses."""
    from ..kv import parse, stream
    from ..kv.texts import ewt_text

    text = ewt_text(model, tokens)
    names = ["full", f"window:{budget}", f"sinks:{sinks}+window:{budget - sinks}"]
    out = {}
    for i, name in enumerate(names):
        run = stream.stream(model, text, parse(name), method="masked")
        out[name] = run.losses.double().cpu().numpy()
        if progress is not None:
            progress(i + 1, len(names))
    return out


WORKS: dict[str, Callable[..., Any]] = {"probe": _probe, "question": _question, "induction": _induction, "kv": _kv}


def gather(finding: Finding, model: ModelLike, progress: Progress = None):
    """The work that judges ``finding`` on ``model`` (the model it names): shared by the findings of the same work and
    options."""
    if model.name != finding.model:
        raise BadOption(f"the finding {finding.key!r} is about {finding.model}, not {model.name}")
    return WORKS[finding.work](model, **dict(finding.options), progress=progress)


def read(finding: Finding, result) -> Judged:
    """The finding's verdict and evidence line, from its work's result (:func:`gather`)."""
    return finding.reader(result)


def judge(finding: Finding, model: ModelLike, progress: Progress = None) -> Judged:
    """Run and read ``finding`` on ``model``."""
    return read(finding, gather(finding, model, progress))


# -- the readers: a work's result → the verdict and its line ------------------------------------------------------

def _chosen(table, label: str):
    from .probes import verdicts

    rows = verdicts(table)
    rows = rows[rows["label"].astype(str) == label]
    return None if rows.empty else rows.iloc[0]


def _label(label: str, what: str) -> Callable[[Any], Judged]:
    def reader(table) -> Judged:
        row = _chosen(table, label)
        if row is None or not row["verdict"]:
            return Judged(TOO_FEW, f"no head could be chosen for {what}: too few items")
        head = (int(row["layer"]), int(row["head"]))
        return Judged(str(row["verdict"]), f"Head {head[0]}.{head[1]}, chosen on half of the items and judged on the "
                                           f"other half: {row['said']}.", head)
    return reader


def _answer(ev) -> Judged:
    from .claims import box_sentence

    if ev.head is None:
        return Judged(TOO_FEW, box_sentence(ev), None)
    of = f"half of its {ev.split.n} controls" if ev.split is not None else f"all {ev.n} controls"
    return Judged(ev.verdict, box_sentence(ev, f"Head {ev.head[0]}.{ev.head[1]}, chosen on {of},"), ev.head)


def _circuit(result: dict) -> Judged:
    judged = _label("induction", "the induction head")(result["table"])
    edges = result["edges"]
    if judged.head is None or edges is None:
        return judged
    above = edges[edges["above_floor"]].sort_values("score", ascending=False).head(2)
    if above.empty:
        return Judged(BASELINE, f"{judged.said} No earlier head writes its key above random matrices' floor.",
                      judged.head)
    senders = " and ".join(f"{int(r.sender_layer)}.{int(r.sender_head)} ({r.score:.3f})" for r in above.itertuples())
    floor = float(above["floor"].iloc[0])
    return Judged(judged.verdict, f"{judged.said} It reads its key from {senders}, above the floor random matrices "
                                  f"reach ({floor:.3f}).", judged.head)


def _kv_result(budget: int = KV_BUDGET, sinks: int = KV_SINKS) -> Callable[[dict], Judged]:
    def reader(losses: dict) -> Judged:
        import numpy as np

        from .stats import bootstrap_mean

        full, window, kept = (losses[k] for k in ("full", f"window:{budget}", f"sinks:{sinks}+window:{budget - sinks}"))
        saved = window - kept  # per predicted token: what keeping the first tokens saves over the window alone
        low, high = bootstrap_mean(saved)
        mean = float(np.mean(saved))
        ppl = {name: float(np.exp(np.mean(x))) for name, x in (("full", full), ("window", window), ("kept", kept))}
        line = (f"On {len(saved) + 1} tokens of EWT web text, {budget} keys per head: a window alone reads at "
                f"perplexity {ppl['window']:,.1f}, the first {sinks} tokens + a {budget - sinks}-token window at "
                f"{ppl['kept']:,.1f} (the full cache: {ppl['full']:,.1f}); the first tokens save {mean:+.3f} nats a "
                f"token (95 % interval {low:+.3f} to {high:+.3f}, n = {len(saved)} tokens).")
        return Judged(SUPPORTED if low > 0 else BASELINE, line)
    return reader


FINDINGS: dict[str, Finding] = {f.key: f for f in [
    Finding("previous", "minilm", "A previous-token head",
            "one head of minilm looks at the token just before each token, almost always",
            "probe", (("probe", "positional"),), _label("previous", "the previous token"), "explore",
            {"text": "The old man gave his dog a bone because the dog was hungry.", "query": "10"},
            otherwise="The Heads page runs the positional probe on more items (Probe: positional)."),
    Finding("sink", "minilm", "The attention sink",
            "one head of minilm parks most of its weight on the first token ([CLS]), whatever the query",
            "probe", (("probe", "positional"),), _label("sink", "the sink share"), "explore",
            {"text": "The old man gave his dog a bone because the dog was hungry.", "query": "10"},
            otherwise="Tick \"Hide the first token\" on Explore to see where the other heads look."),
    Finding("determiner", "minilm", "A syntactic head: the determiner",
            "one head of minilm sends each determiner (the, a, his) to the noun it belongs to, beyond what a fixed "
            "offset does", "probe", (("probe", "syntactic"),), _label("det (dep→head)", "det (dep→head)"), "explore",
            {"text": "My friend said that she put the book on the table.", "query": "10"},
            otherwise="The Heads page runs the syntactic probe on more sentences (Probe: syntactic): try 200."),
    Finding("story", "minilm", "Who is “she”? (minilm, the default sentence)",
            "the question the app's default sentence asks: does a head of minilm find that “she” is Xiaohong?",
            "question", (("question", STORY),), _answer, "explore", {"text": STORY[0]}, head_in_link=False,
            otherwise="Try smollm2 on the Chinese sentence (below), where one head is supported."),
    Finding("chinese", "smollm2", "Who is 她? (smollm2, the Chinese sentence)",
            "on smollm2, one head finds that 她 is 小红 in sentences it was not chosen on",
            "question", (("question", CHINESE),), _answer, "explore", {"text": CHINESE[0]}, head_in_link=False,
            otherwise="Ask your own questions on Find heads (upload a .jsonl): more items narrow the interval."),
    Finding("induction", "smollm2", "The induction circuit",
            "on repeated random tokens, one head of smollm2 looks at the token after the earlier copy of the current "
            "one, and reads its key from previous-token heads", "induction", (), _circuit, "circuit",
            otherwise="The Heads page runs the induction probe on more sequences (Probe: induction)."),
    Finding("kv", "smollm2", "The KV cache keeps its sinks",
            "cut smollm2's KV cache to a window and it loses the first tokens the heads park their weight on; keep "
            "them, and it reads almost as well as with the full cache", "kv", (), _kv_result(), "kv",
            {"kv_tokens": str(KV_TOKENS), "kv_policies": "window,sinks", "kv_budgets": str(KV_BUDGET),
             "kv_budget": str(KV_BUDGET),
             "kv_sinks": str(KV_SINKS)}, head_in_link=False,
            otherwise="Try a larger budget or H2O on the KV page."),
]}
