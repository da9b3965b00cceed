"""The view state, mirrored to the URL's query parameters so a link reopens the same view. A link has parts: the
shared core (:class:`ViewState`: model, text, source, layer, head, query token, page, the question asked of the
text, the long work the view ran) and one part a page (a :class:`LinkPart` its folder declares and registers with
its :class:`~dashboard.core.pages.Page`), which only that page reads and writes. Each parameter of a link is one
field of one part, under the field's name.

No Streamlit here: the app moves the parts between ``st.query_params``/``st.session_state`` and these objects, and
they are tested as plain data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from probes import ProbesError, check_name
from probes.runner import SOURCES
from probes.scratch import BACKENDS

from . import pages
from .parts import LinkPart, choice, parsed

DEFAULT_TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE_TEXT = "小明把苹果给了小红，因为她很饿"
# texts with a question the app opens on: (query word, the word it refers to, the distractor). With one of them
# (and no layer, head or query in the link) the app opens on the query word and the head chosen to answer it on
# half of the question's controls (its verdict, judged on the other half, is what the answer box says)
STORIES = {DEFAULT_TEXT: ("she", "Xiaohong", "Xiaoming"), CHINESE_TEXT: ("她", "小红", "小明")}
MAX_WORD = 100  # characters of a word of a question in a link


def _ran(raw: str) -> str:
    runs = pages.runs()
    works = [w.strip() for w in raw.split(",") if w.strip()]
    if any(w not in runs for w in works):
        raise ValueError(f"expected some of {', '.join(runs)}, comma-separated")
    return ",".join(w for w in runs if w in works)


def _word(raw: str) -> str:
    if len(raw) > MAX_WORD:
        raise ValueError(f"a word of a question is at most {MAX_WORD} characters")
    return raw


def _model(raw: str) -> str:
    try:
        check_name(raw)  # the library's one check of a name (the deployment's own rules apply when it loads)
    except ProbesError as exc:
        raise ValueError(str(exc)) from None
    return raw


@dataclass(frozen=True)
class ViewState(LinkPart):
    """The link's shared core: what the sidebar holds and what two or more pages read."""

    WRITTEN: ClassVar[tuple[str, ...]] = ("model",)

    model: str = parsed("minilm", _model)
    text: str = DEFAULT_TEXT
    pair: str = ""  # second sentence of a BERT pair ("" = none)
    source: str = choice("hf", SOURCES)
    backend: str = choice("eager", BACKENDS)
    layer: int = 0
    head: int = 0
    query: int = 10  # index among the real tokens: "she" in the default sentence, on the offline default
    truncate: bool = False  # keep the first tokens of an input longer than the context window
    page: str = choice(pages.FIRST, lambda: pages.PAGES)
    # the question asked of the text (Explore, Find heads): which of two words the query word refers to; "" = none
    # asked (a text of STORIES asks its own)
    ask_query: str = parsed("", _word)
    ask_key: str = parsed("", _word)
    ask_against: str = parsed("", _word)
    # the long work this view ran, which the link runs again when it opens: names of the pages' runs
    # (dashboard.core.pages.runs()), comma-separated
    ran: str = parsed("", _ran)

    @classmethod
    def from_link(cls, params: Mapping[str, Any], default_model: str = "minilm") -> tuple[ViewState, list[str]]:
        """The core of the view a link describes, on ``default_model`` where the link names none."""
        return cls.from_query(params, model=default_model)

    def has_run(self, work: str) -> bool:
        """Whether this view ran ``work`` (one of the pages' runs): a link to it runs it again when it opens."""
        return work in self.ran.split(",")

    def with_run(self, work: str) -> ViewState:
        """This view, having run ``work`` (one of the pages' runs)."""
        return self if self.has_run(work) else replace(self, ran=",".join(w for w in pages.runs() if self.has_run(w)
                                                                            or w == work))

    def clamp(self, n_layers: int, n_heads: int, n_tokens: int | None = None) -> tuple[ViewState, list[str]]:
        """Keep layer, head and query token inside what the loaded model and text have."""
        changes, problems = {}, []
        for name, n in (("layer", n_layers), ("head", n_heads), ("query", n_tokens)):
            value = getattr(self, name)
            if n is not None and not 0 <= value < n:
                changes[name] = min(max(value, 0), max(n - 1, 0))
                problems.append(f"{name} {value} does not exist here (0–{n - 1}): showing {changes[name]}")
        return replace(self, **changes), problems


@dataclass(frozen=True)
class Link:
    """A whole link: its core and every page's part (by the part's class)."""

    view: ViewState
    parts: Mapping[type[LinkPart], LinkPart]

    @classmethod
    def read(cls, params: Mapping[str, Any], default_model: str = "minilm") -> tuple[Link, list[str]]:
        """Every part of the view a link describes (each registered page's too), and the notes on parameters that
        could not be used: the core's first, then each page's in menu order."""
        view, problems = ViewState.from_link(params, default_model)
        parts: dict[type[LinkPart], LinkPart] = {}
        for part in pages.parts():
            parts[part], noted = part.from_query(params)
            problems += noted
        return cls(view, parts), problems

    def to_query(self) -> dict[str, str]:
        """The link's query parameters: the core's, then each part's."""
        out = self.view.to_query()
        for part in self.parts.values():
            out.update(part.to_query())
        return out
