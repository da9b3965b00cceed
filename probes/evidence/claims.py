"""Claims about a question, "head L.H finds what 'she' refers to", judged on items the head was not chosen on.

:func:`question_evidence` is what the app's answer box and ``python -m probes claim`` ask: from a sentence and its
question (the query word, its answer, the other candidate) it builds controls (:mod:`probes.evidence.controls`), or
it takes a user's questions; runs them (:func:`probes.evidence.questions.score_questions`); chooses the head that
answers the most of the first half right (:func:`probes.evidence.stats.split_half`, seeded), or takes the head it is
given; and judges that head on the other half: its accuracy with Wilson's interval, against what the most recent
candidate, the first-mentioned candidate and chance get right on the same items, and how often the head's pick is
theirs. The sentence itself is never among the items: it is where the question came from, and what the head does
on it is reported beside the verdict (:attr:`QuestionEvidence.text_margin`), not counted in it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..datasets import BadItem
from ..errors import BadOption
from ..head_index import check_head
from ..seam import reader
from .controls import DEFAULT_CONTROLS, controls
from .questions import Question, Scored, score_questions
from .record import Baseline, Evidence, percent, span
from .stats import bootstrap_mean, split_half, wilson

if TYPE_CHECKING:
    import pandas as pd

    from ..seam import ModelLike

RECENT = Baseline("the most recent candidate", float("nan"), tracks="follows the nearer candidate",
                  picks="the nearer candidate")
FIRST = Baseline("the first-mentioned candidate", float("nan"), tracks="follows the first-mentioned candidate",
                 picks="the first-mentioned candidate")


@dataclass
class QuestionEvidence(Evidence):
    """The evidence about one question's head, with what the head does on the sentence the question was asked of,
    how the items were made, and what every head got right on the items the head was chosen on."""

    text: str | None = None
    query: str | None = None
    key: str | None = None
    against: str | None = None
    on_key: float | None = None  # the head's weight from the query on the key word, on the text
    on_against: float | None = None  # …and on the other word
    margin: float = float("nan")  # mean weight on the answer minus the best other candidate, judged items
    margin_low: float = float("nan")  # its bootstrap interval
    margin_high: float = float("nan")
    made: dict[str, int] = field(default_factory=dict)  # recipe -> judged-or-chosen items made so
    dropped: list[BadItem] = field(default_factory=list)  # questions the model's tokens could not place
    chosen_grid: np.ndarray | None = None  # [L, H] accuracy on the items the head was chosen on (None: given)
    text_best: tuple[int, int] | None = None  # the head with the largest margin on the text alone (unchecked)
    scored: Scored | None = field(default=None, repr=False)  # every head's answers (another head is judged from it)

    @property
    def text_margin(self) -> float | None:
        if self.on_key is None:
            return None
        return self.on_key - (self.on_against or 0.0)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out.update(accuracy=out.pop("score"), text_margin=self.text_margin, on_key=self.on_key,
                   on_against=self.on_against, margin=_finite(self.margin), margin_low=_finite(self.margin_low),
                   margin_high=_finite(self.margin_high), controls=dict(self.made),
                   dropped=[str(b) for b in self.dropped],
                   text_best=None if self.text_best is None else f"{self.text_best[0]}.{self.text_best[1]}")
        return out


def _finite(x: float):
    return None if x != x else float(x)


def choose(scored: Scored, items: Sequence[int]) -> tuple[tuple[int, int], np.ndarray]:
    """The head that picks the answer on the most of ``items`` (ties: the larger mean margin), and every head's
    accuracy on them ``[L, H]``."""
    idx = list(items)
    accuracy = scored.correct()[idx].mean(0)
    margin = np.nan_to_num(scored.margins()[idx].mean(0), nan=-np.inf)
    order = np.lexsort((-margin.ravel(), -accuracy.ravel()))  # accuracy first, then margin
    layer, head = np.unravel_index(int(order[0]), accuracy.shape)
    return (int(layer), int(head)), accuracy


def judge(scored: Scored, head: tuple[int, int] | None = None, seed: int = 0, claim: str = "",
          unit: str = "items") -> QuestionEvidence:
    """The evidence for ``head`` (judged on every item), or for the head chosen on a seeded half and judged on the
    other (``head`` None)."""
    n_items = scored.n
    split = None
    grid = None
    if head is None:
        split = split_half(n_items, seed)
        if not split.chosen_on:
            return QuestionEvidence(claim, None, "accuracy", len(split.judged_on), float("nan"), float("nan"),
                                    float("nan"), [], split, unit=unit, made=scored.made(), dropped=scored.dropped)
        head, grid = choose(scored, split.chosen_on)
        judged = list(split.judged_on)
        chosen_score = float(grid[head])
    else:
        layers, heads = scored.shape if n_items else (0, 0)
        if n_items:
            check_head(head, layers, heads)
        judged, chosen_score = list(range(n_items)), None
    n = len(judged)
    if n == 0:
        return QuestionEvidence(claim, head, "accuracy", 0, float("nan"), float("nan"), float("nan"), [], split,
                                chosen_score, unit=unit, made=scored.made(), dropped=scored.dropped, chosen_grid=grid)
    layer, h = head
    picks = scored.picks()[judged, layer, h]
    answer = scored.answer[judged]
    hits = int((picks == answer).sum())
    low, high = wilson(hits, n)
    baselines = [Baseline("chance", float(scored.chance[judged].mean()))]  # first: a tie names the simplest
    baselines += [Baseline(b.name, float((rule[judged] == answer).mean()), float((picks == rule[judged]).mean()),
                           b.tracks, b.picks) for b, rule in ((RECENT, scored.recent), (FIRST, scored.first))]
    margins = scored.margins()[judged, layer, h]
    m_low, m_high = bootstrap_mean(margins, seed=seed)
    return QuestionEvidence(claim, head, "accuracy", n, hits / n, low, high, baselines, split, chosen_score,
                            unit=unit, margin=float(np.mean(margins)), margin_low=m_low, margin_high=m_high,
                            made=scored.made(), dropped=scored.dropped, chosen_grid=grid, scored=scored)


def items_frame(ev: QuestionEvidence, head: tuple[int, int] | None = None) -> pd.DataFrame:
    """The items behind ``ev``, one row each: the text, its query, candidates and answer, how it was made, the half
    it is in (chosen on / judged on; all judged when the head was given), and ``head``'s (default: the evidence's)
    pick and whether it is right (a CSV a reader can check by hand)."""
    import pandas as pd

    scored = ev.scored
    if scored is None or not scored.n:
        return pd.DataFrame(columns=["text", "query", "candidates", "answer", "made", "half", "pick", "right"])
    head = head or ev.head
    picks = scored.picks()[:, head[0], head[1]] if head is not None else np.full(scored.n, -1)
    chosen = set(ev.split.chosen_on) if ev.split is not None else set()
    return pd.DataFrame([dict(text=q.text, query=q.query, candidates=" | ".join(q.candidates), answer=q.answer,
                              made=q.made, half="chosen on" if i in chosen else "judged on",
                              pick=q.candidates[picks[i]] if picks[i] >= 0 else "(a tie)",
                              right=bool(picks[i] == scored.answer[i])) for i, q in enumerate(scored.questions)])


@reader
def question_evidence(model: ModelLike, text: str | None = None, query: str | None = None, key: str | None = None,
                      against: str | None = None, questions: Sequence[Question] | None = None,
                      head: tuple[int, int] | None = None, n_controls: int = DEFAULT_CONTROLS, seed: int = 0,
                      winobias: bool = True, source: str = "auto", backend: str = "eager", batch_size: int = 16,
                      progress: Callable[[int, int], None] | None = None,
                      attention_budget: int | None = None) -> QuestionEvidence:
    """Which head finds ``key`` (not ``against``) for ``query`` in ``text``, and how sure that is: judged on
    controls of the sentence (``n_controls`` of them, :func:`probes.evidence.controls.controls`), or on
    ``questions`` (a user's set) instead. ``head``: judge that head on every item instead of choosing one.
    ``progress(done, total)``: items run so far; ``attention_budget``: as in
    :func:`~probes.evidence.questions.score_questions` (what a pass of ``batch_size`` texts may keep of its
    probabilities)."""
    notes: list[str] = []
    asked = None
    if text is not None:
        if not query or not key or not against:
            missing = [name for name, w in (("query", query), ("key", key), ("against", against)) if not w]
            raise BadOption(f"a question on a text needs a query word, a key word and an 'against' word: "
                            f"{', '.join(missing)} missing")
        asked = Question(text, query, (key, against), key, "your sentence")
        placed = asked.place()
        if isinstance(placed, str):
            raise BadOption(f"{placed}: ask about words of the text")
    if questions is None:
        if asked is None or text is None or query is None or key is None or against is None:  # (asked: all given)
            raise BadOption("give a text with its question (query, key and against words), or a set of questions")
        questions, notes = controls(text, query, key, against, n_controls, seed, winobias)
        unit = "controls"
    else:
        questions, unit = list(questions), "items"
    total = len(questions) + (asked is not None)
    step = (lambda done, _: progress(done, total)) if progress is not None else None
    scored = score_questions(model, questions, source, backend, batch_size, step, attention_budget)
    claim = (f"finds what {query!r} refers to" if asked is not None else "picks each question's answer")
    evidence = judge(scored, head, seed, claim, unit)
    evidence.notes = notes + [f"{len(scored.dropped)} item(s) could not be read and were left out: "
                              + "; ".join(sorted({b.reason for b in scored.dropped}))] * bool(scored.dropped)
    if asked is not None:
        on_text = score_questions(model, [asked], source, backend, 1, attention_budget=attention_budget)
        if progress is not None:
            progress(total, total)
        evidence.text, evidence.query, evidence.key, evidence.against = text, query, key, against
        if on_text.n:
            weights = on_text.weights[0]  # [L, H, 2]: on the key word, on the other
            margin = weights[..., 0] - weights[..., 1]
            best = np.unravel_index(int(np.argmax(margin)), margin.shape)
            evidence.text_best = (int(best[0]), int(best[1]))
            if evidence.head is not None:
                evidence.on_key, evidence.on_against = (float(x) for x in weights[evidence.head])
        else:
            evidence.notes.append(f"the sentence itself could not be read: {on_text.dropped[0].reason}")
    return evidence


def box_sentence(ev: QuestionEvidence, subject: str | None = None) -> str:
    """What the head does, in one sentence for people (the app's box, the CLI's summary): supported, what it
    tracks, or that too few items were there. ``subject``: how the head is named (default "Head L.H")."""
    if ev.head is None or ev.verdict == "too few":
        return f"Too few {ev.unit} to judge a head (n = {ev.n} < 30)."
    layer, h = ev.head
    subject = subject or f"Head {layer}.{h}"
    shown = f"{percent(ev.score)} (95 % interval {span(ev.low, ev.high)})"
    where = f"on {ev.n} held-out {ev.unit}" if ev.split is not None else f"on {ev.n} {ev.unit}"
    best = ev.best_baseline
    if best is None:  # (only with no item: too few, above)
        return f"{subject}: nothing to judge it against (no baseline): {where} it picks the answer {shown}."
    if ev.supported:
        return (f"{subject} picks the answer {where} {shown}, above {best.name} ({percent(best.score)}) and every "
                "other head-free rule.")
    tracked = ev.tracked
    if tracked is not None and tracked.agreement is not None:  # (a tracked baseline has its agreement)
        return (f"{subject} {tracked.tracks}: {where} it picks the answer {shown}, {tracked.picks} "
                f"{percent(tracked.agreement)}.")
    return f"{subject} is no better than {best.name} ({percent(best.score)}): {where} it picks the answer {shown}."
