"""Explore: the selected head as a heatmap, where one query token looks and who looks at one key token,
every head of the layer side by side, a word-level view, and bertviz's head and model views.

The charts answer clicks: a cell of the heatmap makes its row the query and shows its column (who attends to
that key); a bar of either bar chart picks that token the same way; a small multiple opens its head. What
depends on the query (the heatmap, both bar charts, the story line) is one ``st.fragment``: a query change, by
click or by the picker, reruns that part only, and the small multiples below it are not sent again."""

from __future__ import annotations

import logging

import streamlit as st

import probes
from dashboard.core import models, trace, ui, verdicts
from dashboard.core.charts import MAX_CELLS, labels
from dashboard.core.token_charts import attention_frame, attention_heatmap, query_bars
from probes.explain import why as why_words

from . import charts, data
from .state import COLOURS, ExploreState

MODEL_VIEW_MAX = 1100  # px: a taller model view scrolls inside its frame
SCROLL = "explore_scroll"  # a small multiple was clicked: the next run scrolls up to the heatmap
CLICKS = "explore_clicks"  # clicks taken so far, per chart: each chart that answers clicks is keyed by it (_key)
log = logging.getLogger("dashboard")


def _key(name: str) -> str:
    """The widget key of the chart ``name`` (cell, keybar, querybar, heads). It changes after every click on
    that chart, so a chart holds at most one click (the one being acted on), never a stale selection."""
    return f"explore_{name}_{st.session_state.get(f'{CLICKS}_{name}', 0)}"


def _took_click(name: str) -> None:
    st.session_state[f"{CLICKS}_{name}"] = st.session_state.get(f"{CLICKS}_{name}", 0) + 1


@st.cache_data(max_entries=32, show_spinner=False)
def _multiples(inp: models.Input, layer: int, window: tuple[int, int], causal: bool, head: int):
    """The layer's small multiples over the heatmap's window, the selected head outlined: twelve small pictures, a
    few kilobytes, so a head change sends them again at little cost."""
    return charts.layer_multiples(data.layer(inp, layer, window), layer, causal, start=window[0], selected=head)


def _window(n: int) -> tuple[int, int]:
    """The rows/columns shown: all of a short input, a window of ``MAX_CELLS`` of a long one."""
    if n <= MAX_CELLS:
        return 0, n
    start = st.slider(f"Window (the heatmap shows {MAX_CELLS} of the {n} tokens)", 0, n - MAX_CELLS,
                      max(0, min(ui.view().query - MAX_CELLS // 2, n - MAX_CELLS)), key="window")
    return start, start + MAX_CELLS


def _question(ctx: ui.Context):
    """The question asked of the text (its own, for a story; or the words typed in "Ask a question"), and the answer
    box: the head chosen on half of its controls and what it does on the other half (:mod:`dashboard.core.verdicts`);
    for a text with no question, one line on how to ask one. Returns what to call once the page has drawn where the
    evidence is still to compute (the box then comes in a run of its own), else None."""
    question = verdicts.asked(ctx.inp)
    with st.expander("Ask a question about a word" + (f": now “{ui.safe(question.query)}” → “{ui.safe(question.key)}”, "
                                                       f"not “{ui.safe(question.against)}”" if question else ""),
                     icon=":material/quiz:"):
        verdicts.ask()
        st.caption("Which word does a word refer to? Type the word, what it refers to and the other candidate (all "
                   "three words of the text). Pronouns (he, she, it; 他, 她) get controls built for them; for any "
                   "other word, upload your own questions on Find heads.")
    if question is None:
        st.caption(verdicts.HOW_TO_ASK)
        return None
    return verdicts.answer(ctx, question)


def _colour_by(ctx: ui.Context, container) -> str:
    """What the token heatmap is coloured by: attention weights, value-weighted norms (the from-scratch families
    only: they need the output projection) or rollout (read from the trace: any model)."""
    offered = [c for c in COLOURS if c != "norms" or ctx.model.family is not None]
    if ui.part(ExploreState).colour not in offered:
        ui.change(ExploreState, colour="weights")
    why = ("" if "norms" in offered else f" Value-weighted norms are not offered for {ctx.model.name}: they need the "
           "output projection of a family the from-scratch path covers.")
    return ui.bound("radio", "colour", "Colour by", container, of=ExploreState, options=offered, horizontal=True,
                    format_func=COLOURS.get,
                    help="attention weights: each row sums to 1. Value-weighted norms ‖α·f(x)‖ (Kobayashi et al. "
                         "2020): the weight times the length of what the key's value writes into the residual stream, "
                         "not a probability. Rollout (Abnar & Zuidema 2020): every head of layers 0 to this one, "
                         "with the residual, multiplied through: one map per layer, not per head." + why)


def _shaded(ctx: ui.Context, colour: str, lo: int, hi: int, query: int):
    """The token heatmap coloured by norms or rollout, and what to say under it."""
    v, info = ui.view(), ctx.run
    if colour == "norms":
        norms = data.head_norms(ctx.inp, v.layer, v.head, (lo, hi))[:, lo:hi]
        chart = attention_heatmap(info.tokens[lo:hi], norms, f"Layer {v.layer}, head {v.head}: value-weighted "
                                         "norms", causal=info.causal, start=lo, query=query, value="norm",
                                         top=float(norms.max()) if norms.size else 0.0, clickable=True)
        note = ("Value-weighted norms ‖α_ij·f(x_j)‖: the weight times the length of what key j's value writes into "
                "the residual stream (Kobayashi et al. 2020). Not probabilities: rows do not sum to 1, and the colour "
                f"runs from 0 to this head's largest norm ({float(norms.max()) if norms.size else 0.0:.3g}).")
        return chart, note
    flow = data.rollout(ctx.inp, v.layer)[lo:hi, lo:hi]
    chart = attention_heatmap(info.tokens[lo:hi], flow, f"Layer {v.layer}: rollout through layers 0–{v.layer}",
                                     causal=info.causal, start=lo, query=query, value="rollout", clickable=True)
    note = (f"Rollout is per layer, not per head: the same map for every head of layer {v.layer}. Each layer's "
            "attention, averaged over its heads and mixed half and half with the residual connection, multiplied "
            f"through layers 0–{v.layer}: row i is how much of what token i holds after this layer came from each "
            "input token (rows sum to 1; Abnar & Zuidema 2020).")
    return chart, note


UNREADABLE = 0.25  # a text with at least this share of [UNK] tokens gets a warning


def render(ctx: ui.Context) -> None:
    v = ui.view()
    st.header(f"{ui.safe(ctx.model.name)}: layer {v.layer}, head {v.head}")
    if not ctx.ready():
        return
    info = ctx.run
    n = len(info.tokens)
    where = ("Hugging Face (eager, fp32)" if ctx.inp.source == "hf"
             else f"our from-scratch pass, {info.backend} attention")
    m = ctx.model
    shared = f" reading {m.n_kv_heads} key/value heads" if m.n_kv_heads < m.n_heads else ""
    st.caption(f"{n} tokens · {m.n_layers} layers × {m.n_heads} heads{shared} · source: {where}. "
               "Rows: the token attending (query); columns: the token attended to (key); each row sums to 1. "
               "Hover a cell for its exact weight; click it to follow its row (the query) and its column.")
    if info.note:
        st.info(info.note)
    if info.truncated_from:
        st.warning(f"The input has {info.truncated_from:,} tokens; the model takes {n:,}: the rest was cut off.")
    if info.unknown and info.unknown >= UNREADABLE * n:
        reader = next((name for name in ("smollm2",) if name != m.name and name in models.offered_models()), None)
        st.warning(f"{info.unknown} of {n} tokens are unknown to {ui.safe(m.name)} (shown as [UNK:…]): its vocabulary "
                   "cannot read most of this text, so where they attend says little about it."
                   + (f" {reader} reads every character (its byte-level tokenizer has no unknown token): pick it in "
                      "the sidebar's Model menu." if reader else ""))

    answer_later = _question(ctx)  # the heatmap first, the verdict when ready (below: after the page has drawn)
    lo, hi = _window(n)
    _focus(ctx, lo, hi)

    st.subheader(f"Every head of layer {v.layer}")
    shown = f" Tokens {lo}–{hi - 1} of {n}, the heatmap's window." if hi - lo < n else ""
    st.caption(f"Head {v.layer}.{v.head}, outlined, is the one above; click another to open it." + shown)
    picked = ui.chart(_multiples(ctx.inp, v.layer, (lo, hi), info.causal, v.head), on_select=_open_head,
                      selection_mode="head", key=_key("heads"))
    if _open_head(picked):  # a selection the callback has not taken (AppTest sets one without a click)
        st.rerun()
    if st.session_state.pop(SCROLL, False):
        _scroll_to_heatmap()

    st.subheader("bertviz")
    if st.toggle("Show bertviz's head view and model view", key="bertviz"):
        _bertviz(ctx, info)
    if answer_later is not None:
        answer_later()


def _open_head(picked=None) -> bool:
    """A click on a small multiple (the callback, before the script reruns, so the sidebar shows the new head;
    or ``picked``, the chart's state): open that head. True if the view changed."""
    if picked is None:
        point = ui.clicked(_key("heads"), "head")
    else:
        points = picked["selection"].get("head") or []
        point = dict(points[0]) if points else None
    if not point:
        return False
    layer, head = (int(part) for part in str(point["head"]).split("."))
    _took_click("heads")
    v = ui.view()
    if (layer, head) == (v.layer, v.head):
        return False
    ui.update(layer=layer, head=head)
    st.session_state[SCROLL] = True  # the next run shows the head's heatmap, far above the small multiples
    return True


def _scroll_to_heatmap() -> None:
    """Bring the heatmap (its element: the chart keyed ``explore_cell_…``) to the top of the window, after a click on
    a small multiple far below it opened another head. A script in the page, run once a click (the click count makes
    each one new); where no script runs (AppTest, a browser without JavaScript) the page simply stays where it is."""
    clicks = st.session_state.get(f"{CLICKS}_heads", 0)
    st.html(f"""<script>/* click {clicks} */
(() => {{
  const go = (tries) => {{
    const heatmap = document.querySelector('[class*="st-key-explore_cell_"]');
    if (!heatmap) {{ if (tries > 0) setTimeout(() => go(tries - 1), 100); return; }}
    heatmap.style.scrollMarginTop = "4rem";  // below Streamlit's header bar
    heatmap.scrollIntoView({{block: "start"}});
  }};
  go(50);
  setTimeout(() => go(0), 700);  // again once the charts have been drawn (the page above may have grown)
}})();
</script>""", unsafe_allow_javascript=True)


@st.fragment
def _focus(ctx: ui.Context, lo: int, hi: int) -> None:
    """Everything that follows the query token: a query change (a click, the picker) reruns only this."""
    try:
        _follow_clicks(ctx, lo)
        _heatmap_and_bars(ctx, lo, hi)
    except (probes.ProbesError, ValueError) as exc:
        st.error(ui.safe(ui.in_app_words(exc)))
    except Exception as exc:  # as the app's frame does: the details go to the server log
        log.exception("Explore failed")
        st.error(f"Something went wrong on this page ({type(exc).__name__}: {ui.safe(exc)}). The other pages still "
                 "work; if it happens again, please report it with this page's link.")
    ui.write_link()  # a rerun of this part alone keeps the link right too


def _word_tokens(ctx: ui.Context) -> list[list[int]]:
    """For the word-level view: the tokens of each of its words (the text's words; a pair's are not mapped)."""
    return [tokens for _, tokens in trace.text_words(ctx.inp)]


def _follow_clicks(ctx: ui.Context, lo: int) -> None:
    """Act on a click in the heatmap or a bar chart before anything is drawn: a cell sets the query (its row)
    and the key (its column); a bar of "Where … looks" the key; a bar of "Who attends to …" the query. In the
    word-level view a word stands for its first token."""
    n = len(ctx.run.tokens)
    cell, key, query = ui.clicked(_key("cell"), "cell"), ui.clicked(_key("keybar"), "key"), \
        ui.clicked(_key("querybar"), "query")
    for name, point in (("cell", cell), ("keybar", key), ("querybar", query)):
        if point:
            _took_click(name)
    if cell and ui.part(ExploreState).words:
        words = _word_tokens(ctx)
        row, col = int(cell["query_pos"]), int(cell["key_pos"])
        if row >= len(words) or col >= len(words):
            return
        cell = {"query_pos": words[row][0], "key_pos": words[col][0]}
    if cell:
        ui.update(query=min(int(cell["query_pos"]), n - 1))
        ui.change(ExploreState, key=min(int(cell["key_pos"]), n - 1))
    if key:
        ui.change(ExploreState, key=min(int(key["key_pos"]), n - 1))
    if query:
        ui.update(query=min(int(query["query_pos"]), n - 1))


def _heatmap_and_bars(ctx: ui.Context, lo: int, hi: int) -> None:
    v, info = ui.view(), ctx.run
    s = ui.part(ExploreState)
    n = len(info.tokens)
    left, right = st.columns([1, 2])
    word_level = ui.bound("toggle", "words", "Word level (pieces merged)", left,
                          help="attention between words: to a word = sum over its pieces, from a word = their "
                               "mean (Clark et al. 2019); special tokens left out", of=ExploreState)
    query = ui.query_picker(info, right)
    colour = _colour_by(ctx, left)
    hide = ui.bound("toggle", "hide_first", "Hide the first token", left,
                    help="attention weights only: the first token's column (BOS, [CLS] or the first word piece, where "
                         "many heads park most of their weight: an attention sink) is left out and each row is "
                         "rescaled to sum to 1 over the other keys, so they can be told apart. The tooltip keeps the "
                         "true weight; switch it off to see the true weights again.", of=ExploreState)
    title = f"Layer {v.layer}, head {v.head}"
    if word_level and colour != "weights":
        st.caption(f"{COLOURS[colour].capitalize()} are drawn at token level: the word-level view shows weights.")
    if hide and (word_level or colour != "weights"):
        st.caption("“Hide the first token” rescales the token-level attention weights only: this view is drawn as it "
                   "is, first token included.")
    if word_level:
        names, matrix = data.words(ctx.inp, v.layer, v.head)
        words = _word_tokens(ctx)
        mapped = len(words) <= len(names)
        row = next((i for i, tokens in enumerate(words) if query in tokens), None) if mapped else None
        # each word also carries the number the query picker gives its first token: "7: she (10)"
        numbered = [f"{name} ({words[i][0]})" if mapped and i < len(words) else name for i, name in enumerate(names)]
        chart = attention_heatmap(numbered[: MAX_CELLS], matrix[: MAX_CELLS, : MAX_CELLS],
                                         title + " (words)", causal=info.causal, query=row, clickable=mapped)
        shown = f"the first {MAX_CELLS} of {len(names)} words · " if len(names) > MAX_CELLS else ""
        where = (f"the query token's word, {row}: {ui.safe(names[row])} (token {query} in the query picker), is "
                 "outlined; words are numbered in order, with their first token's number in brackets; click a word "
                 "to follow it · " if row is not None else "")
        st.caption(f"{shown}{where}special tokens left out, so a row sums to what that word gives the other words; "
                   "the bar charts below stay at token level")
        frame = attention_frame(names, matrix, info.causal)
    elif colour != "weights":
        chart, note = _shaded(ctx, colour, lo, hi, query)
        st.caption(note + " The bars and the small multiples below are attention weights.")
        frame = chart.table
    elif hide:
        rescaled, true, first = charts.without_first(trace.head(ctx.inp, v.layer, v.head, (lo, hi)), lo, hi)
        chart = attention_heatmap(info.tokens[lo:hi], rescaled, title + ", first token hidden (rows rescaled)",
                                         causal=info.causal, start=lo, query=query, value="rescaled", clickable=True,
                                         key_start=first, true=true)
        first_token = ui.safe(labels(info.tokens)[0])
        st.caption(f"First token hidden: the colours are rescaled. The column of “{first_token}” is left out and each "
                   "row is divided by the weight it gives the other keys, so it sums to 1 over them; these are not the "
                   "model's weights. Hover a cell for its true weight; the bars below show the true weights. Switch "
                   "“Hide the first token” off to see them in the heatmap.")
        if info.causal:  # the sink's effect: a decoder's cache that keeps it, or not
            ui.page_link("kv", "What happens without the sink: What if it attended less?")
        frame = chart.table
    else:
        weights = trace.head(ctx.inp, v.layer, v.head, (lo, hi))[:, lo:hi]
        chart = attention_heatmap(info.tokens[lo:hi], weights, title, causal=info.causal, start=lo, query=query,
                                         clickable=True)
        frame = chart.table  # the heatmap's own long table: its numbers, as shown
    ui.chart(chart, on_select="rerun", selection_mode="cell", key=_key("cell"))
    suffix = "" if colour == "weights" or word_level else f"-{colour}"
    suffix += "-first-hidden" if hide and colour == "weights" and not word_level else ""
    ui.downloads(f"attention-L{v.layer}H{v.head}{suffix}", chart, frame)

    names = labels(info.tokens)
    picked = 0 <= s.key < n  # a clicked cell's column (the view's key: part of the link)
    key = s.key if picked else query
    row = trace.head(ctx.inp, v.layer, v.head, (query, query + 1))[0]
    ui.chart(query_bars(info.tokens[lo:hi], row[lo:hi], query, info.causal, start=lo, name=names[query],
                               key=key, clickable=True), on_select="rerun", selection_mode="key", key=_key("keybar"))
    column = trace.head(ctx.inp, v.layer, v.head, (lo, hi))[:, key]  # (the heatmap's window: cached already)
    ui.chart(charts.key_bars(info.tokens[lo:hi], column, key, info.causal, start=lo, name=names[key], query=query,
                             clickable=True), on_select="rerun", selection_mode="query", key=_key("querybar"))
    window = f" (tokens {lo}–{hi - 1} of {n})" if hi - lo < n else ""
    st.caption(f"The column of {ui.safe(names[key])} in the heatmap: every query's weight on it{window}. Click a bar "
               "of either chart to follow that token (the orange bar is the other chart's token).")
    _why(ctx, query, key if picked else None)


WHY_TOP = 5  # terms said in words
WHY_GRID = 3  # heads or MLPs named on their own in the grid at most (only big ones); the others in bands of layers


def _why(ctx: ui.Context, query: int, key: int | None) -> None:
    """"Why this weight?": the clicked cell's score read first as position against content (a rotary model: by
    frequency band), then split into what wrote its query × what wrote its key (QK attribution, from the
    from-scratch pass): the top terms in words, a grid of buckets (the embeddings, big heads and MLPs by name, the
    others in bands of layers) and a CSV of every term (and of the bands)."""
    st.subheader("Why this weight?")
    v, info = ui.view(), ctx.run
    if key is None:
        st.caption("Click a cell of the heatmap: its score is split here into what wrote the query × what wrote the "
                   "key (the embeddings, each earlier head and MLP, the biases).")
        return
    names = labels(info.tokens)
    if ui.without_scratch(ctx.model, "The split (it reads every head's output projection)"):
        return
    if info.causal and key > query:
        st.info(f"{ui.safe(names[query])} cannot look at {ui.safe(names[key])}: in a causal model a query sees only "
                "itself and earlier tokens. Click a cell on or left of the diagonal.")
        return
    try:
        why = data.why(ctx.inp, v.layer, v.head, query, key)
    except probes.ProbesError as exc:
        st.info(ui.safe(ui.in_app_words(exc)))
        return
    q_name, k_name = ui.safe(names[query]), ui.safe(names[key])
    st.caption(f"Head {v.layer}.{v.head} gives query {q_name} weight {why.weight:.3f} on key {k_name}: the softmax of "
               f"its score {why.score:.3g} (scale · q·k) against the row's other scores. The score splits exactly into "
               f"what wrote the query × what wrote the key: {len(why.parts)} parts a side (the embeddings, each "
               "earlier head's and MLP's output, the biases), the norms frozen at their scale on this text, computed "
               f"by the from-scratch pass. Sum of the parts {why.total:.4g} (|Δ| {why.delta:.1g} from the score).")
    st.markdown(f"**Position or content?** {ui.safe(why_words.reading(why))}")
    if why.bands is not None:
        groups = why_words.labelled_band_groups(why)
        pushes = [why_words.pushes(row.contribution, why.score) for row in groups.itertuples()]
        st.markdown("\n".join(f"- {ui.safe(row.label)}: {ui.safe(push)}; content {row.content:+.3g}, position "
                               f"{row.position:+.3g}" for row, push in zip(groups.itertuples(), pushes, strict=True)))
        st.caption("Rotary positions are not a part: every part's q and k are turned by their position. So the score "
                   "is also split by frequency band: pair b of q and k turns by θ_b per token, and its term is their "
                   "dot product after the turn; content is the same with no turn between them (offset 0), position "
                   f"the difference. The {len(why.bands)} bands sum to the score. Grouped by how far a band turns "
                   f"across this text's {len(why.tokens)} tokens: high-frequency bands turn a full circle or more "
                   "(they tell nearby offsets apart), low-frequency ones less than 6° (nearly position-free), the "
                   "middle ones in between.")
    lines = [ui.safe(why_words.sentence(why, row)) for row in why.top(WHY_TOP).itertuples()]
    st.markdown("\n".join(f"{i}. {line}" for i, line in enumerate(lines, start=1)))
    chart = charts.qk_grid(why.grid(WHY_GRID), why.score, f"Head {v.layer}.{v.head}: “{info.tokens[query]}” ({query}) "
                           f"→ “{info.tokens[key]}” ({key}), score {why.score:.3g}")
    ui.chart(chart)
    st.caption("Each cell: one query bucket's q · one key bucket's k × scale, so the grid sums to the score. Buckets: "
               "the embeddings and the biases; a head or MLP whose total on either side is a fifth of the score or "
               f"more is named (the {WHY_GRID} largest); the other heads and MLPs in bands of layers. Red adds to the "
               "score, blue takes from it. "
               f"{why_words.grid_caption(why, WHY_GRID)} The CSV holds every term.")
    ui.downloads(f"why-L{v.layer}H{v.head}-q{query}-k{key}", chart, why.frame())
    if why.bands is not None:
        st.caption("The score by rotary frequency band, as a CSV:")
        ui.downloads(f"why-bands-L{v.layer}H{v.head}-q{query}-k{key}", frame=why.band_table())


def _bertviz(ctx: ui.Context, info: trace.RunInfo) -> None:
    from . import bertviz_views  # bertviz (with IPython) costs a second to import: only when asked for

    problem = bertviz_views.too_long(len(info.tokens))
    if problem:
        st.info(problem)
        return
    head_tab, model_tab = st.tabs(["Head view", "Model view"])
    with head_tab:
        v = ui.view()
        st.caption(f"Opens on layer {v.layer}, head {v.head} (the sidebar's); bertviz's own menu and colour boxes "
                   "pick others.")
        st.iframe(data.bertviz_html(ctx.inp, "head", v.layer, v.head),
                  height=bertviz_views.head_view_height(len(info.tokens), pair=ctx.inp.pair is not None))
    with model_tab:
        st.iframe(data.bertviz_html(ctx.inp, "model"),
                  height=min(MODEL_VIEW_MAX, bertviz_views.model_view_height(ctx.model.n_layers, ctx.model.n_heads,
                                                                              len(info.tokens))))
