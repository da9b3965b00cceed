"""What if it attended less? A decoder keeps every past token's key and value (the KV cache); a policy keeps only
some (a sliding window, the first tokens plus a window, the keys attention rated highest, a strided pattern). For the
sidebar's model: perplexity on a text against the budget, one line per policy, the memory each budget holds, what the
sidebar's head kept at every step, and which heads hurt most when each alone is cut (a click opens one on Explore).
An encoder keeps no cache: it gets a note, and a button to switch to the offline decoder."""

from __future__ import annotations

import math

import streamlit as st

import probes
from dashboard.core import budgets as deployment, models, ui, words
from dashboard.core.charts import Layered
from probes.kv import parse, stream as kvstream, sweep as kv
from probes.kv.layered import head_effects_layered
from probes.kv.texts import ewt_text

from . import charts
from .state import KV_TEXTS, KVState

BUDGETS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)  # the budgets offered (keys a query reads)
MAX_TOKENS = 1024  # the EWT text's length at most: the page reads it once per policy and budget
PUBLIC_TOKENS = 256  # ...and on a public deployment (one computation there: budgets.PUBLIC_SECONDS)
LIMITS = {"kv_tokens": (16, MAX_TOKENS), "kv_sinks": (1, 64), "kv_budget": (1, max(BUDGETS))}
DECODER = "smollm2"  # the offline decoder an encoder's note offers
ADVICE = "pick fewer policies or budgets, or a shorter text"


class _NotCached(Exception):
    """Raised by the ``_kept_*`` caches when asked for what they do not hold (an exception is never cached)."""


@st.cache_data(max_entries=8, show_spinner="Reading the EWT web text…")
def _ewt(name: str, tokens: int) -> str:
    return ewt_text(models.model_named(name), tokens)


@st.cache_data(max_entries=32, show_spinner=False)
def _length(name: str, text: str) -> int:
    """The text's tokens on this model (the library's error when it is too long or too short)."""
    return int(kvstream.token_ids(models.model_named(name), text).shape[1])


@st.cache_data(max_entries=64, show_spinner=False)  # a run of 1,024 tokens on smollm2 keeps 370 KB
def _kept_run(name: str, text: str, policy: str, _run: dict | None = None) -> dict:
    """The cache of one masked run (its :func:`probes.kv.sweep.summary`): stored when ``_run`` is given (not part of
    the key); else :class:`_NotCached` when not held, so that the page computes it outside the cache, with its bar."""
    if _run is None:
        raise _NotCached
    return _run


def _run(name: str, text: str, policy: str, progress=None) -> dict:
    """``policy`` on every head of every layer, read layer by layer (``method="masked"``: the numbers of reading
    token by token), cached; ``progress(done, layers)`` on a miss."""
    try:
        return _kept_run(name, text, policy)
    except _NotCached:
        pass
    got = kvstream.stream(models.model_named(name), text, parse(policy), method="masked", progress=progress)
    return _kept_run(name, text, policy, _run=kv.summary(got))


def cached(name: str, text: str, policy: str) -> bool:
    try:
        _kept_run(name, text, policy)
    except _NotCached:
        return False
    return True


@st.cache_data(max_entries=16, show_spinner=False)
def _kept_heads(name: str, text: str, policy: str, _rows: tuple | None = None) -> tuple:
    """The cache of :func:`probes.kv.stream.head_effects` for one policy: (rows, full loss), as :func:`_kept_run`."""
    if _rows is None:
        raise _NotCached
    return _rows


def _clamp_settings() -> None:
    """A link may carry any number: keep each setting inside what its widget takes, and say so."""
    v = ui.part(KVState)
    fixed = {name: min(max(getattr(v, name), lo), hi) for name, (lo, hi) in LIMITS.items()}
    if deployment.public():
        fixed["kv_tokens"] = min(fixed["kv_tokens"], PUBLIC_TOKENS)
    moved = [f"{name.removeprefix('kv_')} {getattr(v, name):,} (set to {fixed[name]:,})" for name in fixed
             if getattr(v, name) != fixed[name]]
    if moved:
        st.warning("The link asks for " + "; ".join(moved) + ": this page takes tokens from 16 to "
                   f"{PUBLIC_TOKENS if deployment.public() else MAX_TOKENS:,}, sinks from 1 to 64 and budgets from 1 "
                   f"to {max(BUDGETS):,}.")
        ui.change(KVState, **fixed)


def _listed(field: str, label: str, options: list, container, cast=str, **kwargs) -> list:
    """A multiselect whose value is the page's comma-separated ``field`` (in ``options``' order)."""
    key = f"w_{field}"
    st.session_state[key] = [o for o in options if str(o) in getattr(ui.part(KVState), field).split(",")]

    def changed() -> None:
        picked = st.session_state[key]
        if picked:  # an empty list would not survive a link: the last choice stays in the view
            ui.change(KVState, **{field: ",".join(str(o) for o in options if o in picked)})

    picked = container.multiselect(label, options, key=key, on_change=changed, **kwargs)
    return [cast(o) for o in picked]


def _switch(name: str) -> None:
    ui.update(model=name)
    st.session_state["w_model_pick"] = name  # the sidebar's menu follows


def _encoder(m) -> None:
    what = m.family.title if m.family else "not a decoder"
    st.info(f"{ui.safe(m.name)} is an encoder ({ui.safe(what)}): it reads the whole text at once, every token with "
            "every other, and never writes one token after another, so it keeps no KV cache and there is nothing to "
            "evict. The policies on this page are a decoder's: each step's query reads the keys its cache still "
            "holds.")
    if DECODER in models.offered_models():
        st.button(f"Switch to {DECODER} (SmolLM2-135M, offline)", icon=":material/swap_horiz:", on_click=_switch,
                  args=(DECODER,), key="kv_switch")
    else:
        st.caption("Pick a decoder (a GPT-2 or Llama model) in the sidebar's Model menu.")


def _text(ctx: ui.Context) -> tuple[str, str] | None:
    """The text read and how the page names it, or None (a message says why)."""
    m = ctx.model
    s = ui.part(KVState)
    left, right = st.columns([2, 1])
    choice = ui.bound("radio", "kv_text", "Text", left, options=list(KV_TEXTS), format_func=KV_TEXTS.get,
                      horizontal=True, help="the EWT web text: UD English-EWT's web sentences (blogs, reviews, "
                                            "emails) run together, long enough for a cache to fill; the sidebar's "
                                            "text is usually a sentence, shorter than any budget", of=KVState)
    if choice == "sidebar":
        if not ctx.ready():
            return None
        if ctx.inp.pair:
            st.caption("This page reads the sidebar's text alone: the second sentence is left out.")
        return ctx.inp.text, "the sidebar's text"
    top = min(PUBLIC_TOKENS if deployment.public() else MAX_TOKENS, m.max_tokens - 2)
    if s.kv_tokens > top:
        right.caption(f"{ui.safe(m.name)} reads at most {m.max_tokens:,} tokens: {top:,} here.")
        ui.change(KVState, kv_tokens=top)
    tokens = ui.bound("number_input", "kv_tokens", "Tokens", right, of=KVState, min_value=min(16, top), max_value=top,
                      step=32,
                      help="the EWT text's length: whole sentences up to this many tokens"
                           + (f" (up to {PUBLIC_TOKENS} on this public deployment)" if deployment.public() else ""))
    text = _ewt(m.name, int(tokens))
    read = _length(m.name, text)
    if read != int(tokens):  # whole sentences: the last one that fits ends before the box's number
        right.caption(f"{read:,} tokens read: the whole sentences that fit in {int(tokens):,}.")
    return text, "the EWT web text"


def _pickers(m) -> tuple[list[str], list[int], int]:
    left, middle, right = st.columns([3, 3, 1])
    kinds = _listed("kv_policies", "Policies", list(kv.KINDS), left, format_func=kv.KINDS.get,
                    help="window: the last B keys. sinks + window: the first few tokens (the attention sinks) and the "
                         "last ones (StreamingLLM). H2O (Heavy-Hitter Oracle): the last B/2 and the older keys with "
                         "the most attention so far. TOVA: the keys the newest query attends to least are evicted. "
                         "SnapKV: the last queries vote. strided: the last B keys and every B-th before them "
                         "(Sparse Transformer); it evicts nothing. H2O, TOVA and SnapKV replay the policy step by "
                         "step: each takes several times as long as window")
    budgets = _listed("kv_budgets", "Budgets (keys a query reads)", list(BUDGETS), middle, cast=int,
                      help="the keys each query of each head reads at most, the newest included; a budget at or "
                           "above the text's length is full attention")
    sinks = 0
    if "sinks" in kinds:
        sinks = int(ui.bound("number_input", "kv_sinks", "Sinks", right, min_value=1, max_value=64, step=1,
                             help="sinks + window keeps this many first tokens, and the rest of the budget as a "
                                  "window", of=KVState))
    return kinds, budgets, sinks or ui.part(KVState).kv_sinks


def _sweep(name: str, text: str, plan: kv.Plan, full: dict, tokens: int,
           slot) -> tuple[dict[int, dict], Layered | None]:
    """Every run of the plan (by its index in ``plan.runs``), and the chart of them: cached runs first, then the cheap
    kinds (window, sinks, strided) before those that replay the policy step by step, the chart in ``slot`` redrawn
    as each run finishes. Past a public deployment's seconds the sweep stops, saying why: what ran stays drawn."""
    def cost(policy) -> tuple[bool, bool, bool]:  # what a run costs, as its policy says: replayed, re-reading keys…
        return policy.scored, policy.reads_keys, not policy.evicts

    todo = [i for i in range(len(plan.runs)) if not cached(name, text, plan.runs[i].policy.name)]
    order = sorted(range(len(plan.runs)), key=lambda i: (i in todo, cost(plan.runs[i].policy), plan.runs[i].budget))
    done: dict[int, dict] = {}
    chart: Layered | None = None
    signature = (name, text, tuple(plan.runs[i].policy.name for i in todo))  # what a Cancel stopped
    if todo and ui.cancelled("kv", signature, "Reading the text with the policies not yet run"):
        order, todo = [i for i in order if i not in todo], []  # what is cached is drawn; the rest waits
    bar = ui.Progress("kv", "Reading the text with the policies…", signature, lazy=True)
    count = [0]  # runs computed so far

    def draw() -> None:
        nonlocal chart
        if done:
            got = sorted(done)
            frame = kv.sweep_frame([plan.runs[i] for i in got], [done[i] for i in got])
            chart = charts.budget_chart(frame, full["perplexity"], tokens)
            ui.chart(chart, slot)

    def step(layer: int, n_layers: int) -> None:
        run = plan.runs[todo[count[0]]]
        bar.progress((count[0] + layer / n_layers) / len(todo),
                     text=f"Reading the text with {run.policy.name} on every head: run {count[0] + 1} of "
                          f"{len(todo)}, layer {layer} of {n_layers}")

    watched = deployment.watched(step, ADVICE)
    try:
        for i in order:
            if i in todo:
                if count[0] == 0:
                    draw()  # what is cached already, while the rest runs
                    bar.progress(0.0, text=f"Reading the text with {plan.runs[i].policy.name} on every head…")
                done[i] = _run(name, text, plan.runs[i].policy.name, progress=watched)
                count[0] += 1
                draw()
            else:
                done[i] = _run(name, text, plan.runs[i].policy.name)
        if not todo:
            draw()
    except probes.ProbesError as exc:  # past the public seconds, or what the library refused: said, the rest kept
        st.error(ui.safe(ui.in_app_words(exc)))
    finally:
        bar.empty()
    return done, chart


def _sink_effect(frame) -> str:
    """One line on the sink: window against sinks + window at the same budget."""
    both = frame[frame["kind"].isin(["window", "sinks"])].pivot_table(index="budget", columns="kind",
                                                                      values="perplexity")
    if not {"window", "sinks"} <= set(both.columns):
        return ""
    both = both.dropna()
    if both.empty:
        return ""
    budget = int(both.index[len(both) // 2])
    window, sinks = both.loc[budget, "window"], both.loc[budget, "sinks"]
    return (f" **The attention sink:** at {budget} keys, a plain window reads the text at perplexity {window:.2f}; "
            f"keeping the first tokens as well (sinks + window, the same budget) gives {sinks:.2f}. Many heads park "
            "the weight they do not need on the first tokens, and a window that drops them makes every later "
            "softmax spread that weight over the keys it kept.")


def _memory(frame, full: dict) -> None:
    st.subheader("Memory: what each budget holds")
    memory = kv.memory_frame(frame).drop(columns="full_kv_bytes")
    ui.table(memory, keep=tuple(memory.columns), formats={"saved": "percent", "seen_fraction": "percent"})
    st.caption("One row per budget and footprint: every policy that evicts holds the same keys' worth of bytes at a "
               "budget. "
               f"KV cache held: the most keys and values the cache holds at once (2 × layers × key/value heads × "
               f"d_head × keys × 4 bytes, fp32), against the full cache of every token "
               f"({words.size(full['full_kv_bytes'])}). Memory saved: the share of the full cache's bytes not held. "
               "Keys read: the share of the past keys a query read, averaged over steps, heads and layers (strided "
               "reads fewer but keeps them all: it saves work, not memory).")


def _chosen(plan: kv.Plan) -> kv.Planned:
    """The one policy and budget whose kept tokens and heads are shown (the view's, else the nearest that ran)."""
    kinds = list(dict.fromkeys(r.kind for r in plan.runs))
    s = ui.part(KVState)
    if s.kv_policy not in kinds:
        ui.change(KVState, kv_policy="sinks" if "sinks" in kinds else kinds[0])
    left, right = st.columns(2)
    kind = ui.bound("selectbox", "kv_policy", "Policy", left, options=kinds, format_func=kv.KINDS.get,
                    help="the policy whose kept tokens and heads are shown below", of=KVState)
    budgets = [r.budget for r in plan.runs if r.kind == kind]
    if ui.part(KVState).kv_budget not in budgets:
        nearest = min(budgets, key=lambda b: (abs(b - ui.part(KVState).kv_budget), b))
        right.caption(f"Budget {ui.part(KVState).kv_budget:,} is not among those swept for {kv.KINDS[kind]}: showing "
                      f"{nearest}.")
        ui.change(KVState, kv_budget=nearest)
    budget = ui.bound("selectbox", "kv_budget", "Budget (keys)", right, options=budgets, of=KVState)
    return next(r for r in plan.runs if r.kind == kind and r.budget == budget)


def _kept(ctx: ui.Context, chosen: kv.Planned, run: dict, text: str) -> None:
    m, v = ctx.model, ui.view()
    group = m.n_heads // m.n_kv_heads
    kv_head = kv.kv_head(v.head, m.n_heads, m.n_kv_heads)
    st.subheader(f"What layer {v.layer}, head {v.head} kept under {chosen.policy.name}")
    picture = kv.kept_picture(chosen.policy, run["evicted_at"][v.layer, kv_head])
    tokens = _tokens(m.name, text)
    chart = charts.kept_map(picture, tokens, f"Layer {v.layer}, kv head {kv_head}: keys read at each step",
                               subtitle=chosen.policy.name)
    ui.chart(chart)
    binned = int((picture["key_end"] - picture["key"]).max())
    shared = (f" Query head {v.head} reads key/value head {kv_head}, with query heads {kv_head * group}–"
              f"{kv_head * group + group - 1}: they share what it keeps." if group > 1 else "")
    sinks = (f" The first {chosen.policy.sinks} columns stay dark to the end: the sinks." if chosen.policy.sinks
             else "")
    st.caption("Steps down (the query at each position), keys across: dark, the head held the key and read it at "
               "that step; grey, it had evicted it (strided: skipped it); blank, the future, which no step reads."
               + (f" Each cell is {binned} × {binned} positions, shaded by the share read." if binned > 1 else "")
               + sinks + shared + " The layer and head are the sidebar's.")
    ui.downloads(f"kv-kept-L{v.layer}-kv{kv_head}-{chosen.kind}{chosen.budget}", chart, picture)


@st.cache_data(max_entries=32, show_spinner=False)
def _tokens(name: str, text: str) -> list[str]:
    model = models.model_named(name)
    return [model.tokenizer.decode([i]) for i in kvstream.token_ids(model, text)[0].tolist()]


def _heads(ctx: ui.Context, chosen: kv.Planned, text: str) -> None:
    m = ctx.model
    name = chosen.policy.name
    st.subheader(f"The heads most hurt by {name}")
    heads = m.n_layers * m.n_kv_heads
    key = (m.name, text, name)
    try:
        rows, full_loss = _kept_heads(*key)
    except _NotCached:
        ask = st.empty()  # the offer, gone once the heads are cut
        offer = ask.container()
        offer.caption(f"Cut one key/value head at a time with {name}, every other head reading its full cache, and "
                      f"measure the loss: one full pass that replays the policy on every head, then {heads} cut "
                      f"passes ({m.n_layers} layers × {m.n_kv_heads} key/value heads), each from its head's layer "
                      "and its first eviction on. Seconds on a tiny model; on smollm2, about as long as the sweep "
                      "above.")
        if not offer.button(f"Cut each of the {heads} heads alone", icon=":material/content_cut:", key="kv_heads"):
            return
        ask.empty()
        bar = ui.Progress("kv_heads", "Replaying the policy on every head while the model reads the full cache…",
                          key)

        def step(done: int, total: int) -> None:  # layer-steps: even in time
            bar.progress(done / total, text=f"Cutting each head alone: {done / total:.0%}")

        try:
            got = head_effects_layered(models.model_named(m.name), text, [chosen.policy],
                                       progress=deployment.watched(step, "pick a shorter text"))
        finally:
            bar.empty()
        rows, full_loss = _kept_heads(*key, _rows=(got.rows, got.full_loss))
    frame = kv.heads_frame(rows)
    chart = charts.hurt_bars(frame, f"The {min(charts.TOP, len(frame))} key/value heads whose cut hurts most "
                                       "(click a bar to open it on Explore)")
    problem = st.session_state.pop("heads_problem", None)
    if problem:
        st.warning(ui.safe(problem))
    ui.chart(chart, on_select=lambda: ui.open_clicked_head("kv_hurt", m.n_layers, m.n_heads),
             selection_mode="head", key="kv_hurt")
    worst = frame.iloc[0]
    st.caption(f"Loss change: the mean next-token loss over the text with only this key/value head cut by {name} "
               f"(every other head reads everything), minus the full cache's ({full_loss:.3f} nats). Attention on "
               "the kept keys: the share of its query heads' attention (full cache) that the keys it kept hold, "
               f"averaged over steps. Most hurt: layer {int(worst['layer'])}, key/value head "
               f"{int(worst['kv_head'])} ({worst['loss_change']:+.4f} nats). A click opens its first query head on "
               "Explore, with the sidebar's text.")
    shown = frame[["layer", "kv_head", "query_heads", "loss_change", "mass"]]  # (the CSV has every column)
    ui.table(shown, keep=tuple(shown.columns), formats={"loss_change": "%+.4f", "mass": "%.3f"}, height=240)
    ui.downloads(f"kv-heads-{chosen.kind}{chosen.budget}", chart, frame)


def render(ctx: ui.Context) -> None:
    st.header("What if it attended less?")
    m = ctx.model
    st.markdown(
        "A decoder keeps every past token's key and value (its **KV cache**, see Generate), so memory grows with "
        "the text. A cache *policy* keeps only some: each head's query then reads at most a **budget** of keys, and "
        "what it dropped it never sees again. Here every key/value head of every layer follows the policy while the "
        "model reads a text, and the page measures what that costs the model's predictions: its **perplexity** "
        "(exp of the mean next-token loss, about how many tokens the model hesitates between at each step; lower is "
        "better).")
    if not m.is_causal:
        _encoder(m)
        return
    if not m.predicts_tokens or not m.scratch_supported:
        why = "it has no language-model head" if not m.predicts_tokens else ui.safe(m.scratch_problem)
        st.info(f"This page runs the from-scratch decoder, which cannot read {ui.safe(m.name)} here ({why}). Pick "
                f"{DECODER} in the sidebar's Model menu.")
        return
    _clamp_settings()
    got = _text(ctx)
    if got is None:
        return
    text, what = got
    kinds, budgets, sinks = _pickers(m)
    if not kinds or not budgets:
        st.info("Pick at least one policy and one budget.")
        return
    tokens = _length(m.name, text)
    plan = kv.sweep_plan(kinds, budgets, tokens, sinks)
    try:  # every key kept: the rule the policies are read against
        full = _run(m.name, text, "full", progress=deployment.watched(advice=ADVICE))
    except probes.ProbesError as exc:  # past the public seconds, or a text the model cannot read
        st.error(ui.safe(ui.in_app_words(exc)))
        return
    slot = st.empty()
    notes = []
    if plan.covered:
        notes.append(f"a budget of {_listed_numbers(plan.covered)} keys covers the whole {tokens}-token text: that is "
                     "full attention, left out")
    notes += plan.skipped
    if notes:
        said = ui.safe("; ".join(notes))
        st.caption(said[:1].upper() + said[1:] + ".")
    if not plan.runs:
        slot.info(f"Every budget picked covers {what} ({tokens} tokens): each is full attention, perplexity "
                  f"{full['perplexity']:.2f}, and nothing is evicted. "
                  + ("Pick the EWT web text, or budgets below the text's length." if what != "the EWT web text"
                     else f"Pick budgets below {tokens}, or more tokens."))
        return
    done, chart = _sweep(m.name, text, plan, full, tokens, slot)
    if not done:
        return
    frame = kv.sweep_frame([plan.runs[i] for i in sorted(done)], [done[i] for i in sorted(done)])
    lost = frame.loc[~frame["perplexity"].map(math.isfinite), "name"].tolist()
    if lost:
        st.caption(f"Not drawn: {', '.join(lost)}, whose mean loss is past what a float's exponential holds "
                   "(perplexity ∞).")
    st.caption(f"Perplexity: exp of the mean next-token loss over the text's {tokens - 1} predictions ({what}, "
               f"{tokens} tokens), read with the policy on every key/value head of every layer; lower is better. "
               f"Dashed: the full cache ({full['perplexity']:.2f}). Hover a point for the bytes its cache held."
               + (f" {words.gloss('H2O')}." if "h2o" in set(frame["kind"]) else "") + _sink_effect(frame))
    ui.downloads("kv-budgets", chart, frame)
    _memory(frame, full)
    st.subheader("One policy, one budget")
    chosen = _chosen(plan)
    run = done.get(plan.runs.index(chosen))
    if run is None:
        st.info(f"{chosen.policy.name} did not run: pick another policy or budget.")
        return
    _kept(ctx, chosen, run, text)
    _heads(ctx, chosen, text)


def _listed_numbers(numbers: list[int]) -> str:
    return ", ".join(f"{n:,}" for n in numbers[:-1]) + (" or " if len(numbers) > 1 else "") + f"{numbers[-1]:,}"
