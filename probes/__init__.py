"""probes: load GPT-2, BERT and Llama-style models beside our own from-scratch forward pass, and compare
their attention."""

from . import models, runner
from .errors import (EmptyInput, InputTooLong, ModelUnavailable, OutOfRange, ProbesError, UnsafeCheckpoint,
                     UnsupportedModel)
from .models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT, Encoding, Model, check_name
from .trace import Trace

__all__ = [
    "EmptyInput", "Encoding", "InputTooLong", "KNOWN_HUB_MODELS", "Model", "ModelUnavailable",
    "OFFLINE_DEFAULT", "OutOfRange", "ProbesError", "Trace", "UnsafeCheckpoint", "UnsupportedModel", "check_name", "load", "run",
]


def run(model: Model, text: str, pair: str | None = None, source: str = "hf", truncate: bool = False,
        backend: str = "eager", attention_budget: int | None = None, logits: bool = True) -> Trace:
    """Encode ``text`` (and ``pair``) and return the Trace of the Hugging Face (``source="hf"``) or the
    from-scratch (``source="scratch"``, attention ``backend`` eager | sdpa | flash) forward pass.
    ``attention_budget`` (bytes): keep every probability only up to that size, else a lazy Trace.
    ``logits=False`` leaves the logits out (tokens × vocabulary numbers)."""
    if getattr(model, "handle", None) is not None:  # a model served from a Ray cluster: a RemoteTrace
        from .remote import Request

        return model.run(Request(text, pair, source, backend, truncate, logits, attention_budget))
    return runner.run(model, text, pair, source=source, backend=backend, truncate=truncate, logits=logits,
                      attention_budget=attention_budget)


def load(name: str = OFFLINE_DEFAULT, *, allow_local_paths: bool = True, device: str | None = None,
         ray: str | None = None) -> Model:
    """Load a model (:func:`probes.models.load`): a short name (``minilm``), a hub id or a local folder. With
    ``ray`` (a Ray head's ``HOST:PORT``, or ``"auto"``: the cluster this process is connected to, else the one
    RAY_ADDRESS or ``ray start`` names), the model a server on that cluster holds (``python -m probes serve``):
    a :class:`probes.remote.RemoteModel`, whose traces (:func:`run`) read each head from the server, with the
    same numbers as a local model's."""
    if ray:
        from .remote import connect

        return connect(name, ray)
    return models.load(name, allow_local_paths=allow_local_paths, device=device)
