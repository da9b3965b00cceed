"""probes: load GPT-2, BERT and Llama-style models beside our own from-scratch forward pass, and compare
their attention."""

import warnings
from typing import TYPE_CHECKING

from . import models
from .errors import (
    EmptyInput,
    InputTooLong,
    ModelUnavailable,
    OutOfRange,
    ProbesError,
    UnsafeCheckpoint,
    UnsupportedModel,
)
from .models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT, Encoding, LocalModel, check_name
from .seam import ModelLike, Request, TraceLike, reader
from .trace import Trace

__all__ = [
    "EmptyInput", "Encoding", "InputTooLong", "KNOWN_HUB_MODELS", "LocalModel", "ModelLike",
    "ModelUnavailable", "OFFLINE_DEFAULT", "OutOfRange", "ProbesError", "Request", "Trace", "TraceLike",
    "UnsafeCheckpoint", "UnsupportedModel", "check_name", "load", "reader", "run",
]


def run(model: ModelLike, text: str, pair: str | None = None, source: str = "hf", truncate: bool = False,
        backend: str = "eager", attention_budget: int | None = None, logits: bool = True) -> TraceLike:
    """Encode ``text`` (and ``pair``) and return the Trace of the Hugging Face (``source="hf"``) or the
    from-scratch (``source="scratch"``, attention ``backend`` eager | sdpa | flash) forward pass.
    ``attention_budget`` (bytes): keep every probability only up to that size, else a lazy Trace.
    ``logits=False`` leaves the logits out (tokens × vocabulary numbers). The model's backend runs it: here (a
    :class:`Trace`), or on the server that holds a served model (a :class:`probes.remote.RemoteTrace`, whose
    numbers are the server's)."""
    return model.backend.run(model, Request(text, pair, source, backend, truncate, logits, attention_budget))


def load(name: str = OFFLINE_DEFAULT, *, allow_local_paths: bool = True, device: str | None = None,
         ray: str | None = None) -> ModelLike:
    """Load a model (:func:`probes.models.load`): a short name (``minilm``), a hub id or a local folder. With
    ``ray`` (a Ray head's ``HOST:PORT``, or ``"auto"``: the cluster this process is connected to, else the one
    RAY_ADDRESS or ``ray start`` names), the model a server on that cluster holds (``python -m probes serve``):
    a :class:`probes.remote.RemoteModel`, whose traces (:func:`run`) read each head from the server, with the
    same numbers as a local model's."""
    if ray:
        from .remote import connect

        return connect(name, ray)
    return models.load(name, allow_local_paths=allow_local_paths, device=device)


if not TYPE_CHECKING:  # the type checker does not know the old name: code that still uses it is an error there
    def __getattr__(name: str):
        """``probes.Model``, deprecated: :class:`LocalModel` (the same class)."""
        if name == "Model":
            warnings.warn("probes.Model is deprecated: use probes.LocalModel (the same class: a model whose weights "
                          "are in this process), or probes.ModelLike where a served model does as well",
                          DeprecationWarning, stacklevel=2)
            return LocalModel
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
