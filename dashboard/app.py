"""The attention workbench: pick a model, type a sentence, and look at what each head does, why (the
Q/K/V arithmetic), whether our from-scratch pass agrees with Hugging Face, and which heads are
positional, syntactic or semantic over a dataset.

Run with ``make app`` (or ``streamlit run dashboard/app.py``). This file is the frame: the view state
(mirrored to the URL), the sidebar and the navigation; each page is a folder of ``dashboard/app_pages/``, and what pages
share is ``dashboard/core/``."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import streamlit as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `streamlit run` from a plain checkout

from dashboard import warm
from dashboard.core import fonts

FAVICON = str(Path(__file__).parent / "static" / "favicon.png")  # served by this app: no request leaves the machine
st.set_page_config(page_title="Attention workbench", page_icon=FAVICON, layout="wide")
fonts.webfont()  # the CJK webfont that .streamlit/config.toml's theme names, written once per process
WARM_SPOT = warm.wait_in_page()  # served by dashboard/serve.py: the warm start imports and loads the default view first

import probes  # noqa: E402
from probes import memory, threads  # noqa: E402

threads.apply("app")  # torch's threads for an app on this machine (the machine is watched once per process)
try:  # large tensors' memory goes back to the system when freed (glibc; once per process)
    memory.steady()
except probes.errors.BadOption as exc:  # a malformed PROBES_MMAP_THRESHOLD: said on every page, the app still runs
    st.warning(str(exc))
import dashboard.app_pages  # noqa: E402, F401 - registers every page, in menu order
from dashboard.core import budgets, models, questions, trace, ui, verdicts  # noqa: E402
from dashboard.core.models import Input  # noqa: E402
from dashboard.core.pages import FIRST, HOME, PAGES  # noqa: E402
from dashboard.core.state import STORIES, Link  # noqa: E402
from probes import families  # noqa: E402
from probes.runner import SOURCES  # noqa: E402
from probes.scratch import BACKENDS  # noqa: E402

CUSTOM = "other…"
DOWNLOAD = "↓"  # the Model menu's mark of a hub model to download (a word cuts long names at the sidebar's width)
ON_CLUSTER = "on the cluster"  # the Model menu's mark of a model served from the Ray cluster (PROBES_RAY_ADDRESS)
log = logging.getLogger("dashboard")


def start_session() -> None:
    """First run of a browser session: the view comes from the link."""
    if ui.VIEW in st.session_state:
        return
    link, problems = Link.read(st.query_params.to_dict(), probes.OFFLINE_DEFAULT)
    ui.open_link(link)
    st.session_state["link_problems"] = problems
    if "page" in st.query_params:
        st.session_state["goto"] = link.view.page
    elif st.query_params:  # a link that names no page opens on Explore, as links did before the tour; a bare one, HOME
        st.session_state["goto_unnamed"] = FIRST
    st.session_state["story_off"] = any(k in st.query_params for k in ("layer", "head", "query"))
    ui.opened_with(link.view.page, st.query_params.to_dict())  # the page the link opens on may act on it, once


def model_choices() -> list[str]:
    """The Model menu, in a stable order: what loads here first (the offline models, then hub models in this machine's
    Hugging Face cache), then hub models to download where the hub is reachable, then "other…" (a name typed). Hub
    models this server can neither find in its cache nor download are not offered: one line under the menu names
    them (:func:`unreachable_models`). A deployment's own list (``PROBES_MODELS``) is kept as it is. The models served
    on the Ray cluster of ``PROBES_RAY_ADDRESS`` are offered too (marked :data:`ON_CLUSTER`), even where this
    deployment would not load them itself."""
    served = models.served_models()
    if (allowed := models.allowed_models()) is not None:
        return [*allowed, *(name for name in served if name not in allowed)]
    from probes.models import SHORT_NAMES, in_local_cache

    cached = [name for name in probes.KNOWN_HUB_MODELS if in_local_cache(name)]
    download = [name for name in probes.KNOWN_HUB_MODELS if name not in cached] if models.hub_reachable() else []
    here = [*SHORT_NAMES, *cached, *download]
    return [*here, *(name for name in served if name not in here), CUSTOM]


def unreachable_models() -> list[str]:
    """The known hub models left out of the menu: not in the local cache, and the hub cannot be reached."""
    if models.allowed_models() is not None or models.hub_reachable():
        return []
    from probes.models import in_local_cache

    return [name for name in probes.KNOWN_HUB_MODELS if not in_local_cache(name)]


def offered(name: str, choices: list[str]) -> bool:
    """Whether this deployment's menu offers the model a link names (the library's check of the name)."""
    try:
        probes.check_name(name, allow_local_paths=not budgets.public(), offered=choices)
    except probes.ProbesError:
        return False
    return True


def pick_model(sidebar) -> None:
    choices = model_choices()
    current = ui.view().model
    if CUSTOM not in choices and not offered(current, choices):  # a link to a model this deployment does not offer
        st.session_state["link_problems"].append(f"model {current!r} is not offered here: showing {choices[0]}")
        ui.update(model=choices[0])
        current = choices[0]
    if st.session_state.get("w_model_pick") not in choices:  # first run (or the list changed): from the view
        st.session_state["w_model_pick"] = current if current in choices else CUSTOM

    from probes.models import in_local_cache

    served = models.served_models()

    def unreachable(choice: str) -> bool:  # a hub model this server can neither find in its cache nor download
        return choice != CUSTOM and choice not in served and not in_local_cache(choice) and not models.hub_reachable()

    def picked():
        choice = st.session_state["w_model_pick"]
        if unreachable(choice):  # not loadable here: keep the model shown, and say why
            st.session_state["link_problems"].append(
                f"{choice} needs the Hugging Face hub, which this server cannot reach (no network), and it is not in "
                f"the local cache: staying on {ui.view().model}. minilm and smollm2 work offline.")
            st.session_state["w_model_pick"] = ui.view().model if ui.view().model in choices else CUSTOM
        elif choice != CUSTOM:
            ui.update(model=choice)

    def named(choice: str) -> str:  # a hub model that is not cached here loads only where the hub is reachable
        if choice in served:
            return f"{choice} · {ON_CLUSTER}"
        if choice == CUSTOM or in_local_cache(choice):
            return choice
        return f"{choice} · hub unreachable" if unreachable(choice) else f"{choice} {DOWNLOAD}"

    sidebar.selectbox("Model", choices, key="w_model_pick", on_change=picked, format_func=named,
                      help=f"'{probes.OFFLINE_DEFAULT}' is all-MiniLM-L6-v2 (a BERT encoder) and 'smollm2' is "
                           "SmolLM2-135M (a Llama decoder), both shipped as Python packages: no network. Next come hub "
                           "models in this machine's Hugging Face cache, then, where the hub is reachable, hub models "
                           f"to download (marked {DOWNLOAD}); \"other…\" takes any other name. "
                           f"{families.coverage()}, other architectures show the Hugging Face view only")
    if st.session_state["w_model_pick"] == CUSTOM:
        hint = "a hub id, e.g. gpt2" if budgets.public() else "a hub id, a local model directory or a .gguf file"
        st.session_state.setdefault("w_model_custom", "" if current in choices else current)

        def typed():
            ui.update(model=st.session_state["w_model_custom"].strip() or probes.OFFLINE_DEFAULT)

        sidebar.text_input("Model name", key="w_model_custom", placeholder=hint, on_change=typed)
    if problem := models.cluster_problem():  # PROBES_RAY_ADDRESS names a cluster that does not answer: one line
        sidebar.warning(ui.safe(problem))
    elif served:
        sidebar.caption(f"Models marked \"{ON_CLUSTER}\" run on the Ray cluster at "
                        f"{ui.safe(models.cluster_address())}: only what a page draws comes here.")
    if missing := unreachable_models():  # not options (none would load): one line names them
        some = [m for m in (next((m for m in f.examples if m in missing), None) for f in families.families()) if m]
        names = missing if len(missing) <= 2 else some[:2]  # one of each of the first families
        one = len(missing) == 1
        sidebar.caption(f"{len(missing)} hub model{'' if one else 's'} ({', '.join(names)}"
                        f"{', …' if len(names) < len(missing) else ''}) need{'s' if one else ''} the Hugging Face "
                        "hub, which this server cannot reach.", help=f"Not in this machine's Hugging Face cache: "
                        f"{', '.join(missing)}. Where the hub is reachable they are in the menu, marked {DOWNLOAD}.")
    elif any(named(choice).endswith(DOWNLOAD) for choice in choices):  # the mark is short (no name cut): said once
        sidebar.caption(f"{DOWNLOAD} needs download: a hub model not in this machine's Hugging Face cache, fetched "
                        "from the hub when picked.")


def sidebar_input() -> Input:
    sb = st.sidebar
    sb.title("Attention workbench")
    pick_model(sb)
    cap = budgets.max_chars()
    ui.bound("text_area", "text", "Text", sb, height=110,
             help="the sentence to look at" + (f" (up to {cap:,} characters here)" if cap else ""))
    ui.bound("text_input", "pair", "Second sentence (BERT pairs, optional)", sb)
    ui.bound("checkbox", "truncate", "Cut to the context window", sb,
             help="keep the first tokens of a text longer than the model takes, instead of refusing it")
    v = ui.view()
    return Input(v.model, v.text, v.pair.strip() or None, v.source, v.backend, v.truncate)


def sidebar_model(model: probes.ModelLike) -> None:
    sb = st.sidebar
    v = ui.view()
    if not model.scratch_supported and v.source != "hf":
        ui.update(source="hf")
    sources = list(SOURCES) if model.scratch_supported else ["hf"]
    ui.bound("radio", "source", "Source", sb, options=sources, horizontal=True,
             format_func={"hf": "Hugging Face", "scratch": "From scratch"}.get,
             help=None if model.scratch_supported else f"Hugging Face view only: {ui.safe(model.scratch_problem)}")
    if ui.view().source == "scratch":
        import torch

        flash = torch.cuda.is_available() or ui.view().backend == "flash"  # a link may ask for it: its note says why
        backends = [b for b in BACKENDS if b != "flash" or flash]
        ui.bound("radio", "backend", "Attention backend", sb, options=backends, horizontal=True,
                 help="eager keeps every probability; sdpa (and flash, on a CUDA GPU) keep one logsumexp per "
                      "row and recover the head you look at from it")
    fixed, problems = ui.view().clamp(model.n_layers, model.n_heads)
    if problems:
        ui.update(layer=fixed.layer, head=fixed.head)
        st.session_state["link_problems"] += problems
    for field, label, count in (("layer", "Layer", model.n_layers), ("head", "Head", model.n_heads)):
        if count > 1:
            ui.bound("slider", field, label, sb, min_value=0, max_value=count - 1)
        else:  # a slider cannot run from 0 to 0 (a one-layer model): the only one, said
            sb.caption(f"{label} 0 (the model has one)")


def input_problem(inp: Input) -> str | None:
    cap = budgets.max_chars()
    if cap and len(inp.text) + len(inp.pair or "") > cap:
        return (f"The text is {len(inp.text) + len(inp.pair or ''):,} characters; this deployment takes up to "
                f"{cap:,}. Shorten it (a few sentences show attention best).")
    return None


def show_link_problems() -> None:
    """What the link asked for that the view could not give, said once a link opens: on that run, and again on the
    run the answer box's evidence asks for when it comes in (the reader has not acted yet, and the notes must not
    vanish under them)."""
    problems = st.session_state.get("link_problems", [])
    again = st.session_state[ui.FOR_EVIDENCE] = st.session_state.pop(verdicts.AGAIN, False)
    if again:
        problems = st.session_state.get("link_problems_shown", []) + problems
    for problem in problems:
        st.warning(ui.safe(problem))
    st.session_state["link_problems_shown"] = problems
    st.session_state["link_problems"] = []


def open_on_the_story(inp: Input) -> None:
    """A text with a question (``STORIES``), newly on screen with this model: open on its query word and
    the head chosen to answer it on half of its controls (never on the sentence alone: its verdict, on the other
    half, is the answer box's), unless the link chose a layer, head or query itself. The choice needs the question's
    evidence, which only the pages with the answer box compute and show (after they have drawn): there the view moves
    to the chosen head when the evidence is in, at once where it is kept
    (:func:`dashboard.core.verdicts.open_on_story_later`); every other page keeps the link's head and waits for
    nothing."""
    key = (inp.model, inp.text.strip())
    if st.session_state.get("story_for") == key:
        return
    st.session_state["story_for"] = key
    if st.session_state.pop("story_off", False):
        return
    v = ui.view()
    here = Input(inp.model, inp.text, inp.pair, v.source, v.backend, inp.truncate)
    try:
        answer = questions.story(here)
        if answer is None:
            return
    except probes.ProbesError:  # the page says what is wrong with the input
        return
    ui.update(query=answer.query)
    # the head moves only where the answer box shows the evidence it was chosen on, whether or not another session
    # has kept that evidence already: a link opens every other page on the same head whatever the cache holds
    verdicts.open_on_story_later(here, questions.Asked(*STORIES[inp.text.strip()]), (answer.layer, answer.head))


def _renders(key: str, context: dict[str, ui.Context]) -> Callable[[], None]:
    """What page ``key`` runs: its view's ``render`` on the context draw_page has made by then."""
    def render() -> None:
        importlib.import_module(PAGES[key].view).render(context["page"])
    return render


def main() -> None:
    start_session()
    inp = sidebar_input()
    context: dict[str, ui.Context] = {}  # the page's context, made by draw_page before the page runs
    pages = {key: st.Page(_renders(key, context), title=page.title, icon=page.icon, url_path=key, default=key == HOME)
             for key, page in PAGES.items()}
    page = st.navigation(list(pages.values()))
    key = page.url_path or HOME
    goto = st.session_state.pop("goto", None)
    if (unnamed := st.session_state.pop("goto_unnamed", None)) and key == HOME:  # (a link to a page's path stays)
        goto = goto or unnamed
    if goto and goto != key:
        st.switch_page(pages[goto])
    ui.update(page=key)
    with page_area(inp.model):
        draw_page(inp, page, key, context)
    ui.write_link()


def page_area(model: str):
    """The main area's one container that the page draws in. A run for another model than the last one's draws in a
    new container after it, the old one replaced by an empty placeholder: the "Loading the model…" message (and then
    the new page) stands alone, not over the old page's title with the old charts still below it. Runs for the same
    model draw in the same container, which keeps the old page on screen while the new one replaces it, element by
    element. (Streamlit keeps a container's elements across runs; only another kind of element at its place clears
    it.)"""
    slot = st.session_state.get("page_slot", 0)
    if st.session_state.get("page_model", model) != model:
        slot += 1
    st.session_state.update(page_model=model, page_slot=slot)
    for _ in range(slot + 1 - WARM_SPOT):  # the warm start's placeholder, if it drew one, is the first of them
        st.empty()
    return st.container()


def draw_page(inp: Input, page, key: str, context: dict) -> None:
    """The model, the sidebar's model controls and the page (its context put in ``context``)."""
    try:
        model = models.model_of(inp)
    except probes.ProbesError as exc:
        show_link_problems()
        st.error(ui.safe(ui.in_app_words(exc)))
        ui.write_link()
        return
    if inp.pair and model.family is not None and not model.family.pairs:  # a decoder reads one text
        st.sidebar.info(f"{model.name} ({model.family.title}) reads one text, not sentence pairs: the second sentence "
                        "is left out. To read both, put them one after the other in Text.")
        inp = Input(inp.model, inp.text, None, inp.source, inp.backend, inp.truncate)
    open_on_the_story(inp)
    sidebar_model(model)
    show_link_problems()
    ui.write_link()  # the link is right even while the page draws
    inp = Input(inp.model, inp.text, inp.pair, ui.view().source, ui.view().backend, inp.truncate)
    info, error = None, input_problem(inp)
    if error is None:
        try:
            info = trace.run_info(inp)
        except probes.ProbesError as exc:
            error = ui.in_app_words(exc)
    # the parity badge's place in the sidebar; it is filled after the page has drawn, so the scratch pass it
    # needs never delays the first chart
    badge = st.sidebar.empty() if info is not None and model.scratch_supported else None
    context["page"] = ui.Context(inp, model, info, error)
    try:
        try:
            page.run()
        except (probes.ProbesError, ValueError) as exc:
            st.error(ui.safe(ui.in_app_words(exc)))
        except Exception as exc:  # the app keeps working; the details go to the server log
            log.exception("page %s failed", key)
            st.error(f"Something went wrong on this page ({type(exc).__name__}: {ui.safe(exc)}). The other pages "
                     "still work; if it happens again, please report it with this page's link.")
        if badge is not None:
            ui.parity_badge(inp, badge)
    finally:  # also when the run is stopped (a closed tab, a rerun): what it freed goes back to the system
        budgets.release_memory()


main()
