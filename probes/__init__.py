"""probes: load GPT-2 and BERT beside our own from-scratch forward pass, and compare their attention."""

from .errors import (EmptyInput, InputTooLong, ModelUnavailable, ProbesError, UnsafeCheckpoint,
                     UnsupportedModel)
from .models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT, Encoding, Model, load
from .trace import Trace

__all__ = [
    "EmptyInput", "Encoding", "InputTooLong", "KNOWN_HUB_MODELS", "Model", "ModelUnavailable",
    "OFFLINE_DEFAULT", "ProbesError", "Trace", "UnsafeCheckpoint", "UnsupportedModel", "load",
]
