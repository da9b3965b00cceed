"""probes: load GPT-2, BERT and Llama-style models beside our own from-scratch forward pass, and compare
their attention."""

from . import runner
from .errors import (EmptyInput, InputTooLong, ModelUnavailable, ProbesError, UnsafeCheckpoint,
                     UnsupportedModel)
from .models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT, Encoding, Model, check_name, load
from .trace import Trace

__all__ = [
    "EmptyInput", "Encoding", "InputTooLong", "KNOWN_HUB_MODELS", "Model", "ModelUnavailable",
    "OFFLINE_DEFAULT", "ProbesError", "Trace", "UnsafeCheckpoint", "UnsupportedModel", "check_name", "load", "run",
]


def run(model: Model, text: str, pair: str | None = None, source: str = "hf", truncate: bool = False,
        backend: str = "eager", attention_budget: int | None = None, logits: bool = True) -> Trace:
    """Encode ``text`` (and ``pair``) and return the Trace of the Hugging Face (``source="hf"``) or the
    from-scratch (``source="scratch"``, attention ``backend`` eager | sdpa | flash) forward pass.
    ``attention_budget`` (bytes): keep every probability only up to that size, else a lazy Trace.
    ``logits=False`` leaves the logits out (tokens × vocabulary numbers)."""
    return runner.run(model, text, pair, source=source, backend=backend, truncate=truncate, logits=logits,
                      attention_budget=attention_budget)
