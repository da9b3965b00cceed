"""What a deployment allows: its settings (``PROBES_PUBLIC``, ``PROBES_MAX_CHARS``…), the budgets of a public
deployment in bytes and seconds, and the watch that stops long work nobody waits for. Every page's long work asks
these; nothing here draws."""

from __future__ import annotations

import os
import time
from typing import TypedDict

import streamlit as st
from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

import probes

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

# token rows (copies × tokens) per pass of the long loops a page runs (path patching's senders, the ablation grid's
# heads): a Cancel, a closed tab or the public bound stops the work within one pass (the grid's passes were a whole
# layer's heads before, seconds apart on a busy machine); on a CPU bigger passes are no faster. Both measured:
# docs/benchmarks.md, `cancel.py`
STEP_ROWS = 256


class Batched(TypedDict, total=False):
    """The texts a pass traces at once, where a deployment bounds them (else the library's default)."""

    batch_size: int


class Budgeted(Batched, total=False):
    """...and the bytes of probabilities a trace of them keeps."""

    attention_budget: int


def release_memory() -> None:
    """Hand what this process has freed back to the system (:func:`probes.memory.release`). Every script run calls
    it as it ends: glibc keeps freed memory in each thread's arena, and each session runs in a thread of its own,
    so without it the server's resident memory stays at the highest any run reached (docs/deploy.md says how much
    a probe run left behind)."""
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
