"""probes: load GPT-2 and BERT beside our own from-scratch forward pass, and compare their attention."""

from .errors import (EmptyInput, InputTooLong, ModelUnavailable, ProbesError, UnsafeCheckpoint,
                     UnsupportedModel)
from .models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT, Encoding, Model, load
from .trace import Trace

__all__ = [
    "EmptyInput", "Encoding", "InputTooLong", "KNOWN_HUB_MODELS", "Model", "ModelUnavailable",
    "OFFLINE_DEFAULT", "ProbesError", "Trace", "UnsafeCheckpoint", "UnsupportedModel", "load", "run",
]


def run(model: Model, text: str, pair: str | None = None, source: str = "hf", truncate: bool = False,
        backend: str = "eager") -> Trace:
    """Encode ``text`` (and ``pair``) and return the Trace of the Hugging Face (``source="hf"``) or the
    from-scratch (``source="scratch"``, attention ``backend`` eager | sdpa | flash) forward pass."""
    enc = model.encode(text, pair, truncate=truncate)
    if source == "hf":
        return model.hf_trace(enc)
    if source == "scratch":
        from . import scratch

        return scratch.forward(model, enc, backend=backend)
    raise ValueError(f"unknown source {source!r}: choose 'hf' or 'scratch'")
