"""The model families: one record per family, and the registry that finds them.

A :class:`Family` says everything the rest of the library needs to know about an architecture:
which ``config.model_type`` values it covers and which Hugging Face class loads it, how the Hugging
Face view captures each layer's q, k and v, the from-scratch network, the attention-scale rule,
whether it is causal, whether it takes token types and sentence pairs, how many key/value heads
it has, its head width, its position scheme and sliding window, and which config options its
from-scratch network implements or refuses.

Each record lives beside its network in ``probes/scratch/<file>.py`` (a module-level ``FAMILIES``
tuple); this module collects them. Adding a family is one file with its record: nothing else names
it. Architectures no record covers still load, in the Hugging Face view only.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import torch


class Capture:
    """Each layer's q, k and v, split into heads (``[B, H, L, d]``, k and v ``[B, H_kv, L, d]``), as a
    Hugging Face forward pass computes them, gathered by forward hooks; for rotary models q and k
    are the rotated ones (what the scores are made of), and ``rotary`` holds the (cos, sin) tables
    the model used (``[1 or B, L, d]``)."""

    def __init__(self):
        self.q: list[torch.Tensor] = []
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.rotary: tuple[torch.Tensor, torch.Tensor] | None = None
        self.hooks: list = []

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks = []


@dataclass(frozen=True)
class Family:
    name: str  # short name, e.g. "llama"
    title: str  # for people, e.g. "Llama"
    model_types: tuple[str, ...]  # the config.model_type values it covers
    hf_class: Callable[[object], str]  # config -> name of the transformers class that loads it
    network: Callable  # (state_dict, config, name) -> the from-scratch network
    check: Callable[[object, str], None]  # raises UnsupportedModel naming an option the network lacks
    capture: Callable[[torch.nn.Module, object, Capture], None]  # registers the q/k/v hooks on the HF module
    scale: Callable[[object, int], float]  # (config, layer) -> what q·kᵀ is multiplied by
    causal: Callable[[object], bool] = lambda config: True
    kv_heads: Callable[[object], int] = lambda config: config.num_attention_heads
    head_dim: Callable[[object], int] = lambda config: config.hidden_size // config.num_attention_heads
    window: Callable[[object, int], int | None] = lambda config, layer: None  # sliding window of a layer
    token_types: bool = False  # takes token_type_ids (BERT segments)
    pairs: bool = False  # takes a second sentence
    positions: str = "absolute"  # "absolute" (learned table) or "rotary"
    refuse_at_load: Callable[[object, str], None] | None = None  # options even the HF view gets wrong
    # why Hugging Face's code for this config cannot run in float64 (None: it can), for the float64 proof
    float64_refused: Callable[[object], str | None] = lambda config: None
    implemented: str = ""  # README: the config options the network implements
    refused: str = ""  # README: the ones it refuses by name
    examples: tuple[str, ...] = field(default=())  # hub ids, for the model menu and README


@cache
def families() -> tuple[Family, ...]:
    """Every family, from the ``FAMILIES`` record of each module in ``probes/scratch``."""
    from . import scratch

    found: list[Family] = []
    for info in sorted(pkgutil.iter_modules(scratch.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{scratch.__name__}.{info.name}")
        found += getattr(module, "FAMILIES", ())
    types = [t for f in found for t in f.model_types]
    if len(types) != len(set(types)):
        raise RuntimeError(f"two family records claim the same model_type: {sorted(types)}")
    return tuple(sorted(found, key=lambda f: f.name))


def family_of(config) -> Family | None:
    """The family covering this config's ``model_type``, or None (Hugging Face view only)."""
    kind = getattr(config, "model_type", None)
    return next((f for f in families() if kind in f.model_types), None)


def coverage() -> str:
    """One line for people: which families the from-scratch path covers."""
    titles = [f.title for f in families()]
    return "the from-scratch path covers " + ", ".join(titles[:-1]) + " and " + titles[-1]


def markdown_table() -> str:
    """The README's table of what the from-scratch path covers, written from the records (a test keeps the
    README equal to it)."""
    lines = ["| family | `model_type` | positions | implemented | refused (`UnsupportedModel`, naming the option) |",
             "|---|---|---|---|---|"]
    for f in families():
        types = ", ".join(f"`{t}`" for t in f.model_types)
        lines.append(f"| {f.title} | {types} | {f.positions} | {f.implemented} | {f.refused} |")
    return "\n".join(lines)
