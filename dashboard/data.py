"""What the pages ask ``probes`` for, cached. Keys are plain values (model name, text, pair, source,
backend, layer, head…), never tensors.

* models: ``st.cache_resource``, at most ``MODELS_LOADED`` at once (a model is hundreds of MB);
* traces: ``st.cache_resource`` too, bounded in bytes (``trace``): a Trace holds tensors, and ``st.cache_data``
  would pickle and copy all of them on every rerun just to read one head;
* everything the pages draw (one head, one layer, the Q/K/V steps, parity): ``st.cache_data``, small
  numpy arrays and frames, so a head change reruns no model;
* probe tables: in the session (see ``probe_table``);
* a model that a server on the Ray cluster of ``PROBES_RAY_ADDRESS`` holds is that server's (``model_of``), its
  traces are read from there, and the work that needs its weights runs there: the readers it calls
  (``@probes.reader``) go where their model or trace is.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TypedDict

import numpy as np
import pandas as pd
import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

import probes
from probes import explain, parity
from probes.tokens import unknown_tokens

# models kept loaded at once (a model is hundreds of MB): 2, or the environment's PROBES_MODELS_LOADED (a server
# with the memory for more; the tests keep every model they open)
MODELS_LOADED = max(1, int(os.environ.get("PROBES_MODELS_LOADED", "2") or 2))
TRACES_KEPT = 6
TRACE_BYTES = 2**31  # the traces kept at once hold at most 2 GiB (a trace of 8,192 tokens on SmolLM2 holds more alone)
PUBLIC_TRACE_BYTES = 2**28  # 256 MiB on a public deployment: three 2,000-character texts on SmolLM2 (no logits there,
# see `_run`), beside 1.1 GB of runtime and both offline models (benchmarks/public_memory.py)
ATTENTION_BUDGET = 2**28  # bytes of probabilities a trace keeps (256 MiB); past it, one logsumexp per row
PUBLIC_ATTENTION_BUDGET = 2**26  # 64 MiB on a public deployment: SmolLM2 past about 240 tokens, minilm never (512)
PUBLIC_FLOAT64_BYTES = 2**29  # a small cloud machine does not make a proof's float64 copy of SmolLM2 (1 GiB)
PUBLIC_WORK_BYTES = 96 * 2**20  # what one step of a long computation may hold at once on a public deployment (a
# path-patching pass: its copies' activations, the logits of a few positions), so that every page and button on
# SmolLM2 with a 2,000-character text stays within 1.5 GB resident beside the runtime and the model
# (benchmarks/public_memory.py); one sender of a 440-token text takes 55 MiB, a text past about 700 tokens is refused
PUBLIC_PROBE_BATCH = 4  # sentences a probe run traces at once on a public deployment (16 elsewhere): a trace keeps
# every head's probabilities, 16 sentences of 100 tokens on SmolLM2 170 MiB, 4 of them within PUBLIC_WORK_BYTES
PUBLIC_SECONDS = 60  # one computation on a public deployment: a visitor waits a minute at most, and the machine's
# one or two cores serve every visitor (work past it is stopped: see `watched`)


def release_memory() -> None:
    """Hand what this process has freed back to the system (:func:`probes.memory.release`). Every script run calls
    it as it ends: glibc keeps freed memory in each thread's arena, and each session runs in a thread of its own,
    so without it the server's resident memory stays at the highest any run reached (after a 60-item syntactic
    probe run on SmolLM2 in a thread: 343 MiB above the level before it, 17 MiB once trimmed)."""
    from probes import memory

    memory.release()


def setting(name: str) -> str:
    """A deployment setting: the environment variable, else the Streamlit secret of that name, else ""."""
    value = os.environ.get(name)
    if value is None:
        try:
            value = st.secrets.get(name, "")
        except Exception:  # noqa: BLE001 - no secrets file at all
            value = ""
    return str(value).strip()


def public() -> bool:
    """A public deployment (``PROBES_PUBLIC=1``): hub ids only, never a local path, and a cap on input
    length."""
    return setting("PROBES_PUBLIC").lower() in ("1", "true", "yes")


def allowed_models() -> list[str] | None:
    """``PROBES_MODELS`` (comma-separated): the only models this deployment loads, e.g. to keep a public
    app off multi-GB hub checkpoints. Unset: a public deployment loads the built-in offline models only (a
    visitor cannot make it download any checkpoint), any other deployment anything (None)."""
    names = [name.strip() for name in setting("PROBES_MODELS").split(",") if name.strip()]
    if not names and public():
        return list(probes.models.SHORT_NAMES)
    return names or None


@st.cache_data(ttl=60, show_spinner=False)
def hub_reachable() -> bool:
    """Whether the Hugging Face hub can be reached from this server (asked at most once a minute)."""
    from probes.models import hub_reachable as reachable

    return reachable(timeout=1.5)


CLUSTER = "PROBES_RAY_ADDRESS"  # the setting naming a Ray cluster whose served models the app uses (HOST:PORT, auto)
SERVED_TTL = 30  # seconds the list of served models (or the cluster's silence) is kept before asking again


def cluster_address() -> str:
    """``PROBES_RAY_ADDRESS``: the Ray cluster whose model servers (``python -m probes serve``) this app uses, or ""."""
    return setting(CLUSTER)


@st.cache_data(ttl=SERVED_TTL, show_spinner=False)
def _served(address: str) -> tuple[tuple[str, ...], str | None]:
    """The models served on the cluster at ``address``, and why none could be asked (None: it answered). The
    first ask joins the cluster (once per process); a silent cluster is asked again after :data:`SERVED_TTL`."""
    from probes import remote

    try:
        return tuple(remote.served(address)), None
    except Exception as exc:  # noqa: BLE001 - a cluster that cannot be used: the app works locally, and says so
        why = (str(exc).splitlines() or [type(exc).__name__])[0]
        why = re.sub(r"^--ray \S+( \([^)]*\))?: ", "", why)  # the library says it in the CLI's words: its flag,
        return (), why.split("): ", 1)[0] + ")" if "): " in why else why  # and what to do there, are left out


def served_models() -> list[str]:
    """The models this app opens from the Ray cluster of ``PROBES_RAY_ADDRESS`` (none without the setting, and on a
    public app none whose name is a local path)."""
    address = cluster_address()
    if not address:
        return []
    names = []
    for name in _served(address)[0]:
        try:
            names.append(probes.check_name(name, allow_local_paths=not public()))
        except probes.ProbesError:
            pass
    return names


def cluster_problem() -> str | None:
    """One line on why the cluster of ``PROBES_RAY_ADDRESS`` is not used (None: it is, or there is none)."""
    address = cluster_address()
    if not address or (why := _served(address)[1]) is None:
        return None
    return (f"The Ray cluster at {address} (PROBES_RAY_ADDRESS) cannot be used, so models load here instead: "
            f"{why.rstrip('.')}.")


def offered_models() -> list[str]:
    """The built-in models a visitor can pick here (all of them, unless ``PROBES_MODELS`` says otherwise)."""
    allowed = allowed_models()
    return [name for name in probes.models.SHORT_NAMES if allowed is None or name in allowed]


def max_chars() -> int | None:
    """Longest text accepted: ``PROBES_MAX_CHARS``, by default 2,000 characters on a public deployment
    and no cap otherwise (the model's context window still applies)."""
    raw = setting("PROBES_MAX_CHARS")
    if raw.isascii() and raw.isdigit():  # ('²'.isdigit() is True, and int('²') fails)
        return int(raw)
    return 2000 if public() else None


class TookTooLong(probes.ProbesError):
    """A computation on a public deployment ran past :data:`PUBLIC_SECONDS` and was stopped (nothing is kept)."""


clock = time.monotonic  # the seconds `watched` measures its bound in; a test swaps in a clock it moves itself, so
# that the bound is proven at the exact step it trips on, whatever the machine's speed or load


def watched(progress=None, advice: str | None = None):
    """``progress``, the callback a long loop calls between its steps (any arguments), made to stop the loop when
    nobody waits for it: when this session's browser has gone (a closed tab: quietly, as ``st.stop``; nothing is
    cached), and on a public deployment once it has run :data:`PUBLIC_SECONDS` (:class:`TookTooLong`, which the page
    shows; ``advice``: what to ask for besides running the app elsewhere). Cheap: a clock read and a dictionary
    lookup per call. Outside a script run (the warm start, a plain test) there is no browser to lose: only the bound
    applies. The seconds are :data:`clock`'s, read when ``watched`` is called and at each step."""
    started = clock()
    bound = PUBLIC_SECONDS if public() else None
    ctx = get_script_run_ctx(suppress_warning=True)
    server = runtime.get_instance() if ctx is not None and runtime.exists() else None

    def step(*args) -> None:
        if server is not None and ctx is not None and not server.is_active_session(ctx.session_id):
            st.stop()  # the browser has gone (Streamlit keeps a closed tab's session a while, and its run going)
        if bound is not None and clock() - started > bound:
            raise TookTooLong(f"This took longer than the {bound:g} seconds the public app gives one computation, so "
                              f"it was stopped: {f'{advice}, or ' if advice else ''}run the app on your own machine "
                              "(make app).")
        if progress is not None:
            progress(*args)

    return step


@dataclass(frozen=True)
class Input:
    """Everything that decides a forward pass: the cache key of a trace."""

    model: str
    text: str
    pair: str | None
    source: str
    backend: str
    truncate: bool


@dataclass(frozen=True)
class RunInfo:
    tokens: list[str]
    causal: bool
    backend: str  # the kernel that ran
    note: str  # why it is not the one asked for
    truncated_from: int | None  # original token count, when the input was cut to the context window
    unknown: int = 0  # real tokens the model's vocabulary could not read ([UNK])


@st.cache_resource(max_entries=MODELS_LOADED, show_spinner="Loading the model…")
def load_model(name: str, allow_local_paths: bool) -> probes.ModelLike:
    return probes.load(name, allow_local_paths=allow_local_paths, device="auto")


@st.cache_resource(max_entries=16, show_spinner="Connecting to the model's server on the Ray cluster…")
def served_model(name: str, address: str) -> probes.ModelLike:
    """The model a server on the Ray cluster at ``address`` holds (a ``RemoteModel``: its tokenizer and config here,
    its weights there; light, so more are kept than :data:`MODELS_LOADED`)."""
    return probes.load(name, ray=address)


def model_named(name: str) -> probes.ModelLike:
    """The model of that name (for work that does not depend on the sidebar's text: probes, generation)."""
    return model_of(Input(name, "", None, "hf", "eager", False))


def model_of(inp: Input) -> probes.ModelLike:
    """The model of this input: from the Ray cluster (``PROBES_RAY_ADDRESS``) when a server there holds it (it may
    then be one this deployment does not load itself), else loaded here."""
    served, offered = served_models(), allowed_models()
    name = probes.check_name(inp.model, allow_local_paths=not public(),
                             offered=None if offered is None else [*offered, *served])
    if name in served:
        return served_model(name, cluster_address())
    return load_model(name, not public())


def _run(inp: Input) -> probes.TraceLike:
    """The trace of this input, made now (not kept). On a public app with the public budget of probabilities, and
    without the logits: no page draws them (the lens and the attributions make their own), only the parity badge
    compared them, and on SmolLM2 they are half a trace (a 2,000-character text: 88 MiB of its 170)."""
    budget = min(ATTENTION_BUDGET, PUBLIC_ATTENTION_BUDGET) if public() else ATTENTION_BUDGET
    return probes.run(model_of(inp), inp.text, inp.pair, source=inp.source, truncate=inp.truncate,
                      backend=inp.backend, logits=not public(), attention_budget=budget)


@st.cache_resource(max_entries=4 * TRACES_KEPT, show_spinner="Running the model…")  # `trace` evicts, by bytes
def _traced(inp: Input, where: str = "") -> probes.TraceLike:
    """``where``: the Ray cluster whose server holds the model ("": this process), so that a trace made here is not
    taken for the server's (or the other way round) when the cluster comes or goes."""
    return _run(inp)


# the traces kept, least recently used first, with where they were made and their bytes
_held: OrderedDict[Input, tuple[str, int]] = OrderedDict()
_held_lock = threading.Lock()


def trace(inp: Input) -> probes.TraceLike:
    """The trace of this input, kept for the next rerun (a head change reruns no model). At most ``TRACES_KEPT``
    are kept, and at most ``TRACE_BYTES`` of them (``PUBLIC_TRACE_BYTES`` on a public deployment): the least
    recently used go first, and the newest is always kept. Counted in bytes, not entries: one 2,000-character
    text on SmolLM2 holds 80–300 MiB (and 88 MiB more with its logits), a sentence 5 MiB."""
    where = cluster_address() if inp.model.strip() in served_models() else ""
    t = _traced(inp, where)
    limit = PUBLIC_TRACE_BYTES if public() else TRACE_BYTES
    with _held_lock:
        if inp in _held and _held[inp][0] != where:  # made where the model no longer is: dropped
            _traced.clear(inp, _held.pop(inp)[0])
        if inp not in _held:
            _held[inp] = (where, t.nbytes)
        _held.move_to_end(inp)
        while len(_held) > 1 and (len(_held) > TRACES_KEPT or sum(n for _, n in _held.values()) > limit):
            gone, (made, _) = _held.popitem(last=False)
            _traced.clear(gone, made)
    return t


@st.cache_data(max_entries=64, show_spinner=False)
def run_info(inp: Input) -> RunInfo:
    t = trace(inp)
    model = model_of(inp)
    enc = model.encode(inp.text, inp.pair, truncate=inp.truncate)
    unknown = unknown_tokens(model.tokenizer, enc.input_ids[0][enc.attention_mask[0].bool()].tolist())
    return RunInfo(t.token_strings(), t.is_causal, t.backend, t.note, enc.truncated_from[0], unknown)


@st.cache_data(max_entries=64, show_spinner=False)
def story(inp: Input) -> explain.Answer | None:
    """For a text with a question (``state.STORIES``), the head that answers it best on this model (None for
    any other text)."""
    from .state import STORIES

    words = STORIES.get(inp.text.strip())
    if words is None or inp.pair:
        return None
    return explain.answering_head(trace(inp), inp.text, *words)


EVIDENCE_KEPT = 16  # questions' evidence kept at once, for every session (each holds every head's weights: ~0.5 MB)
MAX_QUESTIONS = 2000  # questions one upload may hold (each is one forward pass)
PUBLIC_QUESTIONS = 300  # …on a public deployment (about 10 s on SmolLM2 on two CPUs)
MAX_QUESTION_BYTES = 2_000_000  # bytes of one upload of questions
_evidence: OrderedDict[tuple, object] = OrderedDict()
_evidence_lock = threading.Lock()


class _Batched(TypedDict, total=False):
    """The texts a pass traces at once, where a deployment bounds them (else the library's default)."""

    batch_size: int


class _Budgeted(_Batched, total=False):
    """...and the bytes of probabilities a trace of them keeps."""

    attention_budget: int


@dataclass(frozen=True)
class Asked:
    """A question asked of a text: which of ``key`` and ``against`` the ``query`` word refers to; ``upload``: a
    user's own questions to judge it on instead of the controls (a name and the file's sha256, read by
    :func:`question_upload`)."""

    query: str
    key: str
    against: str
    upload: tuple[str, str] | None = None


def _evidence_key(inp: Input, asked: Asked) -> tuple:
    where = cluster_address() if inp.model.strip() in served_models() else ""
    return inp.model, where, inp.text, asked


def has_evidence(inp: Input, asked: Asked) -> bool:
    """Whether :func:`question_evidence` of this question is kept already (the page draws no progress bar then)."""
    with _evidence_lock:
        return _evidence_key(inp, asked) in _evidence


@st.cache_data(max_entries=8, show_spinner=False)
def question_upload(name: str, raw: bytes) -> probes.datasets.Items:
    """A user's questions (.jsonl: text, pronoun, candidates, answer), read once per file: the usable ones and every
    bad line with its number and why (:func:`probes.evidence.questions.parse_questions`)."""
    from probes.datasets.utf8 import decode
    from probes.errors import BadData
    from probes.evidence.questions import parse_questions

    if len(raw) > MAX_QUESTION_BYTES:  # before it is decoded: 2,000 questions of a sentence each are ~0.5 MB
        raise BadData(f"{name} is {len(raw) / 1e6:,.1f} MB; a file of questions here takes up to "
                      f"{MAX_QUESTION_BYTES / 1e6:.0f} MB: keep fewer questions")
    text = decode(raw, name)
    most = PUBLIC_QUESTIONS if public() else MAX_QUESTIONS
    lines = sum(1 for line in text.splitlines() if line.strip())
    if lines > most:
        raise BadData(f"{name} holds {lines:,} questions; this app judges up to {most:,} at once: keep the first "
                      f"{most:,} (or run python -m probes claim --data on your own machine)")
    return parse_questions(text, name)


def question_evidence(inp: Input, asked: Asked, raw: bytes | None = None, progress=None):
    """Which head finds ``asked.key`` for ``asked.query`` in the text, judged on items it was not chosen on
    (:func:`probes.evidence.claims.question_evidence`): on the question's controls, or on an upload's questions
    (``raw``, the file ``asked.upload`` names). Computed once per question and model, for every session (the last
    :data:`EVIDENCE_KEPT`); ``progress(done, total)`` while it runs, bounded on a public deployment."""
    from probes.evidence.claims import question_evidence as judged

    key = _evidence_key(inp, asked)
    with _evidence_lock:
        if key in _evidence:
            _evidence.move_to_end(key)
            return _evidence[key]
    questions = None
    if asked.upload is not None:
        if raw is None:  # not kept (see above): the upload's own bytes are needed to judge on it
            raise TypeError(f"question_evidence: the questions of {asked.upload[0]} were not given (raw)")
        questions = list(question_upload(asked.upload[0], raw))
    model = model_of(inp)
    batch: _Budgeted = {}
    if public():  # texts traced at once within the public work budget: what a trace keeps of each text, its
        # probabilities (every head's) or, past the public attention budget, its hidden states (a lazy trace: each
        # question's row recomputed), and one layer's scores, probabilities and mask while the pass runs
        texts = [inp.text] if questions is None else [q.text for q in questions]
        longest = max(model.encode(t, truncate=True).input_ids.shape[-1] for t in texts)
        probs = model.n_layers * model.n_heads * longest**2 * 4
        states = (model.n_layers + 1) * longest * model.config.hidden_size * 4
        per_text = (probs if probs <= PUBLIC_ATTENTION_BUDGET else states) + 3 * model.n_heads * longest**2 * 4
        batch = {"batch_size": max(1, min(16, PUBLIC_WORK_BYTES // per_text)),
                 "attention_budget": PUBLIC_ATTENTION_BUDGET}
    found = judged(model, inp.text, asked.query, asked.key, asked.against, questions=questions,
                    progress=watched(progress, "ask on a shorter text or upload fewer questions"), **batch)
    with _evidence_lock:
        _evidence[key] = found
        while len(_evidence) > EVIDENCE_KEPT:
            _evidence.popitem(last=False)
    return found


@st.cache_data(max_entries=64, show_spinner=False)
def text_words(inp: Input) -> list[tuple[str, list[int]]]:
    """The words of the text with the tokens each covers (Find heads' key menu)."""
    return explain.words(trace(inp), inp.text)


@st.cache_data(max_entries=64, show_spinner=False)
def massive_activations(inp: Input) -> pd.DataFrame:
    """The hidden-state numbers over 100 and over 1,000 × their layer's median size (Parity's table)."""
    return parity.massive_activations(trace(inp))


@st.cache_data(max_entries=64, show_spinner=False)
def margins(inp: Input, query: int, keys: tuple[int, ...], other: tuple[int, ...] = ()) -> explain.Margins:
    """Every layer × head's weight from one query token on a key word, on a distractor word and on the sink."""
    return explain.margins(trace(inp), query, list(keys), list(other))


@st.cache_data(max_entries=64, show_spinner=False)
def question(inp: Input, query: int, asked: Asked | None = None) -> tuple[int | None, int | None]:
    """The key word and the distractor word (indices among :func:`text_words`) the pages open on for this query
    token: those of the question asked of the text (``asked``: typed, or a story's own, ``state.STORIES``) when
    they are words of it, else the word the query attends to most (never the sink) and no distractor. One place
    for Find heads, the minimal pair and the callout, so 小红 is the default everywhere."""
    from .state import STORIES

    words = [w.lower() for w, _ in text_words(inp)]
    story = STORIES.get(inp.text.strip()) if not inp.pair else None
    if asked is None and story:
        asked = Asked(*story)
    if asked and asked.key.lower() in words:
        other = words.index(asked.against.lower()) if asked.against.lower() in words else None
        return words.index(asked.key.lower()), other
    return explain.likely_key(trace(inp), inp.text, query), None


@st.cache_data(max_entries=64, show_spinner=False)
def query_norms(inp: Input, query: int, keys: tuple[int, ...]) -> np.ndarray:
    """Every layer × head's value-weighted norm from one query token on some key tokens ``[layers, heads]``."""
    from probes.effects.norms import query_norms as norms

    return norms(trace(inp), model_of(inp), query, list(keys))


@st.cache_data(max_entries=256, show_spinner=False)
def head(inp: Input, layer: int, head: int, rows: tuple[int, int] | None = None) -> np.ndarray:
    """One head's probabilities ``[r, n]`` (``rows``: a window of query rows, start and stop)."""
    picked = slice(*rows) if rows else None
    return trace(inp).attention(layer, head, rows=picked).float().cpu().numpy()


@st.cache_data(max_entries=256, show_spinner=False)
def head_norms(inp: Input, layer: int, head: int, rows: tuple[int, int] | None = None) -> np.ndarray:
    """One head's value-weighted norms ‖α_ij·f(x_j)‖ ``[r, n]`` (Kobayashi et al.), rows as :func:`head`."""
    from probes.effects.norms import value_norms

    picked = slice(*rows) if rows else None
    got = value_norms(trace(inp), model_of(inp), layer, head, rows=picked)
    return got.float().cpu().numpy()


@st.cache_data(max_entries=32, show_spinner=False)
def why(inp: Input, layer: int, head: int, query: int, key: int):
    """One score of one head split into what wrote its query × what wrote its key: a ``QKAttribution``."""
    from probes.effects.why import qk_attribution

    return qk_attribution(model_of(inp), inp.text, layer, head, query, key, pair=inp.pair,
                   truncate=inp.truncate)


@st.cache_data(max_entries=16, show_spinner="Splitting the head's scores by the heads that wrote them…")
def senders_on_text(inp: Input, layer: int, head: int) -> pd.DataFrame:
    """Each earlier head's share of head ``layer``.``head``'s scores on the text's cells it weighs most (q and k)."""
    from probes.effects.why import senders_on_text as split

    return split(model_of(inp), inp.text, layer, head, pair=inp.pair, truncate=inp.truncate)


@st.cache_data(max_entries=16, show_spinner="Composing every earlier head's weights with this head's…")
def composition(name: str, layer: int, head: int, convention: str = "raw") -> pd.DataFrame:
    """Q-, K- and V-composition of every earlier head onto head ``layer``.``head``, from the weights alone, in
    ``convention`` (``"raw"`` or ``"transformerlens"``: :mod:`probes.effects.compose`), each with its noise floor
    (:func:`probes.evidence.edges.composition_floors`: ``floor``, ``above_floor``, ``z``…)."""
    from probes.effects.compose import composition_scores
    from probes.evidence.edges import composition_floors

    scores = composition_scores(model_named(name), receivers=[(layer, head)],
                                convention=convention)
    return composition_floors(scores)


# token rows (copies × tokens) per pass of the long loops a page runs (path patching's senders, the ablation grid's
# heads): a Cancel, a closed tab or the public bound stops the work within one pass (about a second on smollm2; the
# grid's passes were a whole layer's heads before, up to 6 s on a busy machine: benchmarks/cancel.py); on a CPU
# bigger passes are no faster (smollm2, 57 tokens, 261 senders: 74 s in passes of 16, 68 s in passes of 4)
STEP_ROWS = 256


@st.cache_data(max_entries=8, show_spinner=False)
def _patch_kept(name: str, text: str, corrupted: str, layer: int, head: int, into: str,
                _frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The cache of :func:`path_patch`, as :func:`_ablation_kept` is the ablation grid's: ``_frame`` is stored when
    given; a run it does not hold raises :class:`_NotCached`."""
    if _frame is None:
        raise _NotCached
    return _frame


def path_patch(name: str, text: str, corrupted: str, layer: int, head: int, into: str,
               progress=None) -> pd.DataFrame:
    """Path patching of every earlier head into head ``layer``.``head``'s ``into`` (q, k or v): one row per sender,
    the largest effects checked against their noise floor (:func:`probes.evidence.edges.patch_floors`: ``checked``,
    ``<measure>_floor``, ``<measure>_above``…; the same patch from null corruptions of the text). Cached
    (:func:`_patch_kept`); on a miss ``progress(done, total, what)`` is called after each pass of senders and each
    null run (``what``: which of the two), behind a spinner when ``progress`` is None."""
    from probes.effects.path_patching import batch_for, path_patch as patch
    from probes.evidence.edges import CHECKED, NULLS, patch_floors

    try:
        return _patch_kept(name, text, corrupted, layer, head, into)
    except _NotCached:
        pass
    model = model_named(name)
    length = model.encode(text).input_ids.shape[-1]
    batch = max(1, STEP_ROWS // length)
    if public():  # and no more senders a pass than the public budget holds (none: refused, before any pass)
        try:
            batch = min(batch, batch_for(model, length, model.predicts_tokens, PUBLIC_WORK_BYTES))
        except probes.errors.BadOption as exc:
            raise probes.errors.BadOption(
                f"Path patching on this public app may hold {PUBLIC_WORK_BYTES / 2**20:,.0f} MiB at a time, and "
                f"this text of {length:,} tokens needs more for one earlier head: shorten the text, or run the app "
                "on your own machine (make app).") from exc
    advice = "shorten the text, or pick a head in an earlier layer (fewer senders)"
    # one bar over both parts, each weighed by its senders patched: every earlier head once, then the largest
    # (at most CHECKED) once per null corruption
    senders = layer * model.n_heads
    checks = NULLS * min(CHECKED, senders)
    total = senders + checks

    def patched(done: int, _of: int) -> None:
        if progress is not None:
            progress(done, total, "patching")

    def floored(done: int, of: int) -> None:
        if progress is not None:
            progress(senders + round(checks * done / of), total, "floors")

    wait = (st.spinner("Patching each earlier head from the corrupted text into this head…") if progress is None
            else nullcontext())
    with wait:
        got = patch(model, text, corrupted, (layer, head), into=into, batch=batch,
                    progress=watched(patched, advice=advice))
        frame = patch_floors(model, text, corrupted, (layer, head), into, result=got, batch=batch,
                             progress=watched(floored, advice=advice)).frame
    return _patch_kept(name, text, corrupted, layer, head, into, _frame=frame)


@st.cache_data(max_entries=32, show_spinner=False)
def rollout(inp: Input, layer: int) -> np.ndarray:
    """Attention rollout up to ``layer`` (every head of each layer, with the residual): ``[n, n]``."""
    from probes.effects.rollout import rollout as roll

    return roll(trace(inp), upto=layer)[layer].numpy()


@st.cache_data(max_entries=32, show_spinner=False)
def layer(inp: Input, layer: int, window: tuple[int, int]) -> np.ndarray:
    """Every head of one layer over a window of tokens (start, stop): ``[H, w, w]``."""
    lo, hi = window
    return trace(inp).attention(layer, rows=slice(lo, hi))[..., lo:hi].float().cpu().numpy()


@st.cache_data(max_entries=8, show_spinner="Drawing bertviz's view…")
def bertviz_html(inp: Input, kind: str, layer: int = 0, head: int | None = None) -> str:
    """bertviz's head or model view of every layer, self-contained (see ``bertviz_embed``); the head view
    opens on ``layer`` showing ``head`` (None: every head)."""
    from . import bertviz_embed

    t = trace(inp)
    attention, tokens = list(t.all_attention().float().numpy()), t.token_strings()
    if kind == "head":
        return bertviz_embed.head_view_html(attention, tokens, sentence_b_start(inp), layer,
                                            None if head is None else [head])
    return bertviz_embed.model_view_html(attention, tokens, sentence_b_start(inp))


@st.cache_data(max_entries=64, show_spinner=False)
def words(inp: Input, layer: int, head: int) -> tuple[list[str], np.ndarray]:
    return explain.word_level(trace(inp), layer, head, inp.text, inp.pair)


@st.cache_data(max_entries=64, show_spinner=False)
def steps(inp: Input, layer: int, head: int, query: int) -> explain.QuerySteps:
    return explain.query_steps(trace(inp), layer, head, query)


@st.cache_data(max_entries=32, show_spinner="Comparing Hugging Face with the from-scratch pass…")
def parity_report(inp: Input) -> parity.ParityReport:
    """Parity of this input: the reference is always Hugging Face; the candidate our scratch pass
    with the chosen backend (eager when the page shows Hugging Face). Both are the traces the pages
    use (``trace``, cached), so the one the page already made is not run again; on a public app the
    candidate is kept only when the page shows it (else it would take a place among the traces kept there)."""
    candidate = replace(inp, source="scratch", backend=parity_backend(inp))
    keep = inp.source == "scratch" or not public()
    return parity.compare(trace(replace(inp, source="hf", backend="eager")),
                   trace(candidate) if keep else _run(candidate),
                   progress=watched(advice="shorten the text"))


@dataclass(frozen=True)
class Proof:
    """A float64 parity check of one input: our pass and Hugging Face's, both on a float64 copy of the model."""

    passed: bool
    backend: str  # the kernel that ran on our side
    attention_max_abs_diff: float
    hidden_max_rel_diff: float
    logits_max_rel_diff: float | None
    tolerance: dict


PROOFS = "float64_proofs"  # session key: the inputs proven in float64 this session (the badge reads it)


def parity_backend(inp: Input) -> str:
    """The backend parity checks on our side: the chosen one when the page shows our pass, else eager."""
    return inp.backend if inp.source == "scratch" else "eager"


def prove_parity(inp: Input, progress=None) -> Proof:
    """Run the float64 check of this input (a float64 copy of the model, built and dropped: 1 GiB for SmolLM2;
    a public deployment refuses a copy over ``PUBLIC_FLOAT64_BYTES``) and keep its figures in the session.
    ``progress(done, total)``: after each step of the check (:func:`probes.parity.check`)."""
    r = parity.check(model_of(inp), inp.text, inp.pair,
                truncate=inp.truncate, backend=parity_backend(inp),
                dtype="float64", float64_limit=PUBLIC_FLOAT64_BYTES if public() else None,
                progress=watched(progress, advice="shorten the text"))
    proof = Proof(r.passed, r.backend, r.attention_max_abs_diff, r.hidden_max_rel_diff, r.logits_max_rel_diff,
                  r.tolerance)
    st.session_state.setdefault(PROOFS, {})[_checked(inp)] = proof
    return proof


def proof_of(inp: Input) -> Proof | None:
    """This input's float64 check, if it was run this session."""
    return st.session_state.get(PROOFS, {}).get(_checked(inp))


def _checked(inp: Input) -> Input:
    """What a parity check of ``inp`` runs on our side (the key of its proof)."""
    return replace(inp, source="scratch", backend=parity_backend(inp))


def sentence_b_start(inp: Input) -> int | None:
    """Index (among real tokens) of the second sentence's first token, for bertviz."""
    if not inp.pair:
        return None
    segments = [tok.segment for tok in trace(inp).real_tokens()]
    return segments.index(1) if 1 in segments else None


# -- Does it matter? -----------------------------------------------------------------------------

REFERENCE = "ewt-dev"  # mean-ablation writes each head's mean output over the first sentences of this set
REFERENCE_SIZE = 32


@st.cache_data(max_entries=1, show_spinner="Reading the reference sentences for mean-ablation…")
def reference_texts() -> list[str]:
    from probes.datasets import catalog

    return catalog.texts(catalog.read_items(REFERENCE)[:REFERENCE_SIZE])


class _NotCached(Exception):
    """Raised by :func:`_ablation_kept` when it is asked for a grid it does not hold (an exception is never cached)."""


@st.cache_data(max_entries=16, show_spinner=False)
def _ablation_kept(name: str, text: str, how: str, position: int, measure: str | None,
                   _frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The cache of :func:`ablation`: ``_frame`` (not part of the key) is stored when given; without it a grid that
    is not held raises :class:`_NotCached`, so the caller can compute it outside the cache, with a progress bar (a
    cached function must not draw: its elements would be replayed on every hit)."""
    if _frame is None:
        raise _NotCached
    return _frame


def ablation(name: str, text: str, how: str, position: int, measure: str | None = None,
             progress=None) -> pd.DataFrame:
    """Every single-head ablation of ``text`` (``how``: zero or mean over :func:`reference_texts`): layer, head and
    the column of ``measure`` (None: one column per measure), ``position`` the token whose change
    ``token_change`` measures. Cached (:func:`_ablation_kept`); on a miss ``progress(done, total)`` is called after
    each head."""
    from probes.effects.ablation import ablate_each

    try:
        return _ablation_kept(name, text, how, position, measure)
    except _NotCached:
        pass
    reference = reference_texts() if how == "mean" else None
    wait = st.spinner("Removing every head in turn and measuring what changed…") if progress is None else nullcontext()
    model = model_named(name)
    with wait:
        frame = ablate_each(model, text, how=how, reference=reference, position=position,
                            measures=None if measure is None else [measure],
                            batch=max(1, STEP_ROWS // model.encode(text).input_ids.shape[-1]),
                            progress=watched(progress, "shorten the text"))
    return _ablation_kept(name, text, how, position, measure, _frame=frame)


@st.cache_data(max_entries=64, show_spinner=False)
def attribution_default(name: str, text: str) -> tuple[int, str] | None:
    """The last token of ``text`` that can be typed as a logit-attribution target: (its position, its raw text), or
    None (:func:`probes.effects.attribution.last_target`)."""
    from probes.effects.attribution import last_target

    return last_target(model_named(name), text)


@st.cache_data(max_entries=16, show_spinner="Splitting the logit into each head's share…")
def attribution(name: str, text: str, target: str, other: str | None, position: int):
    """Direct logit attribution of ``target`` (minus ``other``) at ``position``: an ``Attribution``."""
    from probes.effects.attribution import logit_attribution, target_id

    model = model_named(name)
    return logit_attribution(model, text, target_id(model, target),
                   target_id(model, other) if other else None, position)


@st.cache_data(max_entries=16, show_spinner="Reading every layer through the unembedding…")
def lens(name: str, text: str, truncate: bool, positions: tuple[int, int], layer: int | None = None):
    """The logit lens of ``text`` at positions [lo, hi) (a window of a long text): every layer's top tokens, and,
    with ``layer``, the direct effect of that layer's heads (a ``Lens`` of small frames)."""
    from probes.effects.lens import logit_lens

    return logit_lens(model_named(name), text, truncate=truncate, positions=range(*positions),
                   heads=layer is not None, head_layers=None if layer is None else [layer])


@st.cache_data(max_entries=64, show_spinner=False)
def lens_column(name: str, ids: tuple[int, ...]) -> pd.DataFrame:
    """The logit lens of the token ids ``ids`` (a generated text, as it is) at its last token, layers only."""
    from probes.effects.lens import logit_lens

    return logit_lens(model_named(name), ids=ids, positions=[len(ids) - 1], heads=False).layers


@st.cache_resource(max_entries=4, show_spinner="Running both texts…")
def minimal_pair(name: str, text_a: str, text_b: str, query: str, key: str):
    """Attention from the query word to the key word in every head of both texts (a ``Pair``, which holds
    both texts' traces: a resource, bounded, like :func:`trace`)."""
    from probes.effects.pairs import minimal_pair as pair

    return pair(model_named(name), text_a, text_b, query, key)


@dataclass(frozen=True)
class PairHead:
    """One head in both texts of a minimal pair: tokens, attention ``[n, n]`` and the query word's first token."""

    tokens_a: list[str]
    weights_a: np.ndarray
    query_a: int
    tokens_b: list[str]
    weights_b: np.ndarray
    query_b: int


@st.cache_data(max_entries=64, show_spinner=False)
def pair_head(name: str, text_a: str, text_b: str, query: str, key: str, layer: int, head: int) -> PairHead:
    got = minimal_pair(name, text_a, text_b, query, key)
    sides = []
    for t, text, word in ((got.trace_a, text_a, got.query[0]), (got.trace_b, text_b, got.query[1])):
        sides += [t.token_strings(), t.attention(layer, head).float().cpu().numpy(), explain.words(t, text)[word][1][0]]
    return PairHead(*sides)


# -- Generate ------------------------------------------------------------------------------------

GENERATIONS_KEPT = 4


@dataclass(frozen=True)
class Writing:
    """Everything that decides a generation: its cache key."""

    model: str
    prompt: str
    new_tokens: int
    sample: bool
    seed: int
    temperature: float
    top_k: int
    top_p: float

    @property
    def sampling(self):
        from probes.generation import Sampling

        return Sampling(self.sample, self.seed, self.temperature, self.top_k, self.top_p)


@dataclass(frozen=True)
class GenerationProof:
    passed: bool
    exact_attention_max_abs_diff: float | None  # float64 (None: the model is too big for the check)
    attention_max_abs_diff: float  # fp32, against Hugging Face's fp32 pass
    logits_max_rel_diff: float
    hf_same_tokens: bool | None  # greedy: does Hugging Face's generate write the same tokens? (None: sampled)


@st.cache_resource(max_entries=GENERATIONS_KEPT, show_spinner="Writing, one token at a time…")
def generation(w: Writing):
    """The model's continuation of the prompt with the from-scratch KV cache (a GenerationTrace)."""
    from probes import generation as g

    return g.generate(model_named(w.model), w.prompt, w.new_tokens, w.sampling)


@st.cache_data(max_entries=16, show_spinner="Proving the cache against one full forward pass…")
def generation_proof(w: Writing) -> GenerationProof:
    """The cached steps against one full Hugging Face pass over the whole sequence; greedy, also Hugging
    Face's own generate."""
    from probes import generation as g

    model = model_named(w.model)
    gen = generation(w)
    proof = g.prove(model, gen, "hf", float64_limit=PUBLIC_FLOAT64_BYTES if public() else None,
                    attention_budget=min(ATTENTION_BUDGET, PUBLIC_ATTENTION_BUDGET) if public() else None)
    same = None if w.sample else g.hf_generate(model, w.prompt, gen.n_steps) == gen.new_ids
    return GenerationProof(proof.passed, proof.exact_attention_max_abs_diff, proof.attention_max_abs_diff,
                           proof.logits_max_rel_diff, same)


PROBE_TABLES_KEPT = 4


def probe_table(name: str, probe: str, limit: int, progress=None) -> pd.DataFrame:
    """A probe's scores for every layer × head on the built-in data (``limit`` items), with each label's head judged
    on held-out items (:func:`probes.evidence.probes.run_probe`), kept in the session (the last
    ``PROBE_TABLES_KEPT``). Not ``st.cache_data``: its run draws a progress bar,
    which a cached function may not touch. ``progress(done, total)`` is called as items finish."""
    from probes.evidence import probes as judged

    tables = st.session_state.setdefault("probe_tables", {})
    key = (name, probe, limit)
    if key not in tables:  # each label's head chosen on half of the items, judged on the other half
        batch: _Batched = {"batch_size": PUBLIC_PROBE_BATCH} if public() else {}
        tables[key] = judged.run_probe(model_named(name), probe, limit,
                              progress=watched(progress, "run fewer items"), **batch)
        while len(tables) > PROBE_TABLES_KEPT:
            tables.pop(next(iter(tables)))
    return tables[key]


def has_probe_table(name: str, probe: str, limit: int) -> bool:
    return (name, probe, limit) in st.session_state.get("probe_tables", {})


IMPORTANCE = "importance"  # its tables sit beside the probes' (no probe has this name: probes.heads.registry)


def importance_table(name: str, limit: int, progress=None) -> pd.DataFrame:
    """Head importance (the gradient of each head's gate, Michel et al.) over the first ``limit`` sentences of
    :data:`REFERENCE`, kept like a probe table; ``progress(done, total)`` as sentences finish."""
    from probes import jobs
    from probes.datasets import catalog
    from probes.effects.importance import importance

    tables = st.session_state.setdefault("probe_tables", {})
    key = (name, IMPORTANCE, limit)
    if key not in tables:
        model = model_named(name)
        texts = catalog.texts(catalog.read_items(REFERENCE)[:limit])
        done, checked = [0], watched(progress)

        def step(n: int) -> None:
            done[0] += n
            checked(done[0], len(texts))

        tables[key] = jobs.with_model(importance(model, texts, ablation=False, progress=step), model)
        while len(tables) > PROBE_TABLES_KEPT:
            tables.pop(next(iter(tables)))
    return tables[key]
