"""The model a page reads: which models this deployment offers (its own list, the offline ones, the hub's, those
served on a Ray cluster), loaded once and kept (``st.cache_resource``, at most :data:`MODELS_LOADED` at once: a
model is hundreds of MB), and the :class:`Input` that decides a forward pass.

A model that a server on the Ray cluster of ``PROBES_RAY_ADDRESS`` holds is that server's (:func:`model_of`): its
traces are read from there, and the work that needs its weights runs there (the readers it calls,
``@probes.reader``, go where their model or trace is)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import streamlit as st

import probes

from . import budgets

# models kept loaded at once (a model is hundreds of MB): 2, or the environment's PROBES_MODELS_LOADED (a server
# with the memory for more; the tests keep every model they open)
MODELS_LOADED = max(1, int(os.environ.get("PROBES_MODELS_LOADED", "2") or 2))


@dataclass(frozen=True)
class Input:
    """Everything that decides a forward pass: the cache key of a trace."""

    model: str
    text: str
    pair: str | None
    source: str
    backend: str
    truncate: bool


def allowed_models() -> list[str] | None:
    """``PROBES_MODELS`` (comma-separated): the only models this deployment loads, e.g. to keep a public
    app off multi-GB hub checkpoints. Unset: a public deployment loads the built-in offline models only (a
    visitor cannot make it download any checkpoint), any other deployment anything (None)."""
    names = [name.strip() for name in budgets.setting("PROBES_MODELS").split(",") if name.strip()]
    if not names and budgets.public():
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
    return budgets.setting(CLUSTER)



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
            names.append(probes.check_name(name, allow_local_paths=not budgets.public()))
        except probes.ProbesError:
            pass
    return names


def served_from(inp: Input) -> str:
    """The Ray cluster whose server holds this input's model ("": this process). A trace or an answer made on one is
    kept under it, so that one made here is not taken for the server's (or the other way round) when the cluster
    comes or goes."""
    return cluster_address() if inp.model.strip() in served_models() else ""



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
    name = probes.check_name(inp.model, allow_local_paths=not budgets.public(),
                             offered=None if offered is None else [*offered, *served])
    if name in served:
        return served_model(name, cluster_address())
    return load_model(name, not budgets.public())
