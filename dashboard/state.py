"""The view state: one dataclass, mirrored to the URL's query parameters so a link reopens the same
model, text, layer, head, query token and page. No Streamlit here: the app moves it between
``st.query_params``/``st.session_state`` and this object, and it is tested as plain data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

from probes import ProbesError, check_name
from probes.effects.compose import CONVENTIONS
from probes.kv.views import KINDS as KV_KINDS
from probes.runner import SOURCES
from probes.scratch import BACKENDS

DEFAULT_TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry."
DEFAULT_PROMPT = "Xiaoming gave the apple to Xiaohong because she was"
CHINESE_TEXT = "小明把苹果给了小红，因为她很饿"
# texts with a question the app opens on: (query word, the word it refers to, the distractor). With one of them
# (and no layer, head or query in the link) the app opens on the query word and the head chosen to answer it on
# half of the question's controls (its verdict, judged on the other half, is what the answer box says)
STORIES = {DEFAULT_TEXT: ("she", "Xiaohong", "Xiaoming"), CHINESE_TEXT: ("她", "小红", "小明")}
# what Explore's heatmap is coloured by: value -> its name in the app
COLOURS = {"weights": "attention weights", "norms": "value-weighted norms", "rollout": "rollout"}
# the pages, in menu order: url path -> (title, icon); each is dashboard/views/<path>.py, with a render(ctx)
PAGES = {
    "explore": ("Explore", ":material/grid_on:"),
    "find": ("Find heads", ":material/manage_search:"),
    "qkv": ("Q/K/V step by step", ":material/calculate:"),
    "generate": ("Generate", ":material/edit_note:"),
    "lens": ("Logit lens", ":material/visibility:"),
    "parity": ("Parity", ":material/rule:"),
    "heads": ("Heads", ":material/psychology:"),
    "effects": ("Does it matter?", ":material/science:"),
    "circuit": ("Circuit", ":material/hub:"),
    "cost": ("Cost", ":material/speed:"),
    "kv": ("What if it attended less?", ":material/compress:"),
}
# What if it attended less?: where its text comes from (the policy kinds it offers are probes.kv.views.KINDS)
KV_TEXTS = {"ewt": "EWT web text", "sidebar": "the sidebar's text"}
# the long work a link runs again when it opens, once it was run in the view the link was copied from: the Heads
# page's probe run and the Circuit page's path patching (the other pages compute what they show as they open)
RUNS = {"heads": "the probe run (Heads)", "patch": "path patching (Circuit)"}
# Circuit: what the grid of every earlier head is coloured by (source and kind), and the parts path patching patches
CIRCUIT_GRIDS = ("weights k", "weights q", "weights v", "text k", "text q")
PATCH_INTO = ("k", "q", "v")
# the logit lens's two views; Does it matter?'s measures of a head taken out, and how it is taken out
LENS_VIEWS = ("layers", "heads")
EFFECT_MEASURES = ("loss", "top_changed", "token_change", "hidden_change", "embedding_change")
ABLATIONS = ("zero", "mean")
FIND_MEASURES = ("weight", "norm", "ablation")


@dataclass(frozen=True)
class ViewState:
    model: str = "minilm"
    text: str = DEFAULT_TEXT
    pair: str = ""  # second sentence of a BERT pair ("" = none)
    source: str = "hf"
    backend: str = "eager"
    layer: int = 0
    head: int = 0
    query: int = 10  # index among the real tokens: "she" in the default sentence, on the offline default
    key: int = -1  # Explore: the key token of the clicked cell (its column, and "Why this weight?"); -1: none
    words: bool = False  # word-level view (pieces merged)
    colour: str = "weights"  # Explore's heatmap: attention weights, value-weighted norms or rollout (COLOURS)
    hide_first: bool = False  # Explore's heatmap of weights: the first token hidden, each row rescaled over the rest
    truncate: bool = False  # keep the first tokens of an input longer than the context window
    page: str = "explore"
    prompt: str = DEFAULT_PROMPT  # Generate: the start of the text, what the model writes after
    new_tokens: int = 10
    step: int = 0  # the generation step shown
    sample: bool = False  # greedy, or sampled with the seed and filters below
    seed: int = 0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    probe: str = "positional"  # Heads: the built-in probe run on the current model…
    items: int = 100  # …over this many items (half choose each label's head, half judge it: 30 or more each)
    label: str = ""  # Heads: the label whose grid is shown ("" = the one that gains most)
    # the question asked of the text (Explore, Find heads): which of two words the query word refers to; "" = none
    # asked (a text of STORIES asks its own)
    ask_query: str = ""
    ask_key: str = ""
    ask_against: str = ""
    # What if it attended less?: the text read (KV_TEXTS) and its length in tokens (the EWT text), the policy kinds
    # and budgets swept (comma-separated), the sinks of sinks + window, and the one policy and budget whose kept
    # tokens and heads are shown
    kv_text: str = "ewt"
    kv_tokens: int = 256
    kv_policies: str = "window,sinks,h2o"
    kv_budgets: str = "16,32,64,128"
    kv_sinks: int = 4
    kv_policy: str = "sinks"
    kv_budget: int = 64
    # the long work this view ran, which the link runs again when it opens: some of RUNS, comma-separated
    ran: str = ""
    # Circuit: the grid's colour (CIRCUIT_GRIDS), the convention of the scores from the weights, the corrupted text
    # of path patching ("" = the page's own minimal pair of the story sentence) and the part it patches into
    circuit_grid: str = "weights k"
    convention: str = "raw"
    patch_text: str = ""
    patch_into: str = "k"
    # Logit lens: the view (LENS_VIEWS) and the first position of the window shown on a long text (-1: the last ones)
    lens_view: str = "layers"
    lens_from: int = -1
    # Does it matter?: the measure ("" = the page's default for the model) and the ablation (ABLATIONS)
    effects_measure: str = ""
    effects_how: str = "zero"
    # Find heads: what the grid is coloured by (FIND_MEASURES), and whether a word's first piece that is the text's
    # first token (the attention sink) is counted (the question itself is ask_query, ask_key and ask_against)
    find_measure: str = "weight"
    count_sink: bool = False

    @classmethod
    def from_query(cls, params: Mapping[str, str], default_model: str = "minilm") -> tuple[ViewState, list[str]]:
        """The state a link describes, and a note for each parameter that could not be used (the
        default is kept for it): a hand-edited link never breaks the app."""
        state, problems = cls(model=default_model), []
        values = {}
        for f in fields(cls):
            if f.name not in params:
                continue
            raw = params[f.name]
            raw = raw[-1] if isinstance(raw, list) else str(raw)
            default = getattr(state, f.name)
            try:
                values[f.name] = _parse(f.name, raw, default)
            except ValueError as exc:
                problems.append(f"link parameter {f.name}={raw[:40]!r} ignored: {exc}")
        return replace(state, **values), problems

    def to_query(self) -> dict[str, str]:
        """Query parameters of this view: every field that differs from the default."""
        default = ViewState(model="")
        out = {}
        for name, value in asdict(self).items():
            if name != "model" and value == getattr(default, name):
                continue
            out[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return out

    def has_run(self, work: str) -> bool:
        """Whether this view ran ``work`` (one of RUNS): a link to it runs it again when it opens."""
        return work in self.ran.split(",")

    def with_run(self, work: str) -> ViewState:
        """This view, having run ``work`` (one of RUNS)."""
        return self if self.has_run(work) else replace(self, ran=",".join(w for w in RUNS if self.has_run(w)
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


MAX_WORD = 100  # characters of a word of a question in a link
MAX_PATCH_TEXT = 20_000  # characters of path patching's corrupted text in a link (the page checks its tokens)
MAX_BUDGET = 8192  # keys: a budget in a link (SmolLM2's context)
AT_LEAST = {"kv_budget": 1, "kv_tokens": 2, "kv_sinks": 1,  # a whole number in a link is 0 or more, these more…
            "lens_from": -1}  # …and this one -1 or more


def _parse(name: str, raw: str, default):
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise ValueError("expected 1 or 0")
    if isinstance(default, float):
        try:
            if not raw.isascii():  # float() takes '٣' (3): a number in a link is ASCII
                raise ValueError(raw)
            value = float(raw)
        except ValueError:
            raise ValueError("expected a number") from None
        if not value > 0 or value != value or value == float("inf"):
            raise ValueError("expected a number above 0")
        return value
    if isinstance(default, int):
        try:
            if not raw.isascii():  # int() takes '٣' (3): a number in a link is ASCII
                raise ValueError(raw)
            value = int(raw)
        except ValueError:
            raise ValueError("expected a whole number") from None
        least = AT_LEAST.get(name, 0)
        if value < least:
            raise ValueError(f"expected {least} or more")
        return value
    allowed = {"page": PAGES, "source": SOURCES, "backend": BACKENDS, "colour": COLOURS, "kv_text": KV_TEXTS,
               "kv_policy": KV_KINDS, "circuit_grid": CIRCUIT_GRIDS, "convention": CONVENTIONS,
               "patch_into": PATCH_INTO, "lens_view": LENS_VIEWS, "effects_measure": ("", *EFFECT_MEASURES),
               "effects_how": ABLATIONS, "find_measure": FIND_MEASURES}.get(name)
    if allowed and raw not in allowed:
        raise ValueError(f"expected one of {', '.join(a for a in allowed if a)}")
    if name == "ran":
        works = [w.strip() for w in raw.split(",") if w.strip()]
        if any(w not in RUNS for w in works):
            raise ValueError(f"expected some of {', '.join(RUNS)}, comma-separated")
        return ",".join(w for w in RUNS if w in works)
    if name == "patch_text" and len(raw) > MAX_PATCH_TEXT:
        raise ValueError(f"a corrupted text is at most {MAX_PATCH_TEXT:,} characters")
    if name == "kv_policies":
        kinds = [k.strip() for k in raw.split(",") if k.strip()]
        if not kinds or any(k not in KV_KINDS for k in kinds):
            raise ValueError(f"expected some of {', '.join(KV_KINDS)}, comma-separated")
        return ",".join(k for k in KV_KINDS if k in kinds)
    if name == "kv_budgets":
        numbers = [b.strip() for b in raw.split(",") if b.strip()]
        if not numbers or not all(b.isascii() and b.isdigit() and 0 < int(b) <= MAX_BUDGET for b in numbers):
            raise ValueError(f"expected budgets from 1 to {MAX_BUDGET:,} keys, comma-separated")
        return ",".join(str(b) for b in sorted({int(b) for b in numbers}))
    if name.startswith("ask_") and len(raw) > MAX_WORD:
        raise ValueError(f"a word of a question is at most {MAX_WORD} characters")
    if name == "model":
        try:
            check_name(raw)  # the library's one check of a name (the deployment's own rules apply when it loads)
        except ProbesError as exc:
            raise ValueError(str(exc)) from None
    return raw
