"""Where local and remote meet: what a model and a trace are to their readers (:class:`ModelLike`,
:class:`TraceLike`), where a model runs (:class:`Backend`: here, or a Ray server), and which functions may run
where the model is (:func:`reader`).

A model is a :class:`~probes.models.LocalModel` (its weights in this process) or a
:class:`~probes.remote.RemoteModel` (held by a server on a Ray cluster): siblings, each with a backend that runs
a trace (``run(model, request)``) and calls a reader (``call(fn, args, kwargs)``). Readers are written once, for a
local model, and registered where they are defined::

    @reader
    def logit_lens(model: ModelLike, text: str, ...) -> Lens:
        ...

Called with a remote model or trace among its arguments, a reader runs on that model's server, which holds the
weights and the traces (only what the answer needs crosses the wire); called with local ones, it runs here, as
a plain call. A server runs only registered readers (:func:`registered`): nothing else of this package, and
nothing outside it. This is nnsight's ``remote=True`` and TransformerLens's local and remote bridges, as one
decorator.

The bottom floor: it imports nothing of the package but its errors.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import torch

    from .encoding import Encoding, Piece
    from .tokens import Token


@dataclass(frozen=True)
class Request:
    """Everything that decides a trace: what a backend runs, and the key a server keeps the trace under (and
    recomputes it from, after a restart)."""

    text: str
    pair: str | None = None
    source: str = "hf"
    backend: str = "eager"
    truncate: bool = False
    logits: bool = True
    attention_budget: int | None = None


class Backend(Protocol):
    """Where a model runs: ``local`` is this process (:data:`probes.models.LOCAL`); a Ray server is another."""

    local: bool

    def run(self, model: Any, request: Request) -> TraceLike:
        """The trace of ``request`` on ``model`` (the model this backend holds: each backend takes its own kind)."""
        ...

    def call(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict,
             progress: Callable[..., None] | None = None) -> Any:
        """The registered reader ``name`` (``fn`` itself) on ``args`` and ``kwargs``, where the model is.
        ``progress``: the reader's own progress callback, which stays here (it draws a bar, or stops the work, in
        this process): each call the reader makes of it where it runs is made of ``progress`` here, with the same
        arguments, as it happens, so a bar counts a served model's work as it counts a local one's. An exception
        ``progress`` raises ends the call here, as it would a local run."""
        ...


@runtime_checkable
class ModelLike(Protocol):
    """What every reader, command and page may ask of a model, local or served."""

    name: str  # what the user asked for
    location: str  # where its weights were read from (a folder, a file, a hub id, ray://...)
    family: Any  # its record (probes.families.Family), or None: an architecture seen in the HF view only
    tokenizer: Any
    config: Any

    @property
    def backend(self) -> Backend: ...

    @property
    def home(self) -> Backend:  # the same backend, under the name a trace says it by
        ...

    @property
    def family_name(self) -> str: ...

    @property
    def n_layers(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    @property
    def n_kv_heads(self) -> int: ...

    @property
    def d_head(self) -> int: ...

    @property
    def is_causal(self) -> bool: ...

    @property
    def has_lm_head(self) -> bool: ...

    @property
    def predicts_tokens(self) -> bool: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def scratch_problem(self) -> str | None: ...

    @property
    def scratch_supported(self) -> bool: ...

    def weight_bytes(self, dtype: torch.dtype | None = None) -> int: ...

    def fingerprint(self) -> str: ...

    def tokenizer_fingerprint(self) -> str: ...

    def encode(self, texts: str | list[str], pairs: str | list[str | None] | None = None,
               truncate: bool = False) -> Encoding: ...

    def batch(self, pieces: list[Piece], texts: list[str], pairs: list[str | None] | None = None,
              truncated_from: list[int | None] | None = None) -> Encoding: ...


@runtime_checkable
class TraceLike(Protocol):
    """What every reader may ask of a trace, held here (:class:`~probes.trace.Trace`) or by a server
    (:class:`~probes.remote.RemoteTrace`): the same answers either way."""

    source: str
    model: str
    tokens: list[list[Token]]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    is_causal: bool
    scales: list[float] | None
    windows: list[int | None] | None
    softcaps: list[float | None] | None  # each layer's logit soft-cap (Gemma 2), or None
    n_kv_heads: int | None
    backend: str  # the attention kernel that ran (eager, sdpa:..., flash): not where it is held
    note: str

    @property
    def home(self) -> Backend | None:  # where it is held: None (or a local backend) here; a server's backend there
        ...

    @property
    def lazy(self) -> bool: ...

    @property
    def n_layers(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def group(self) -> int: ...

    @property
    def hidden_states(self) -> list[torch.Tensor]: ...

    @property
    def logits(self) -> torch.Tensor | None: ...

    @property
    def nbytes(self) -> int: ...

    def window(self, layer: int) -> int | None: ...

    def rotary_of(self, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None: ...

    def kv_head(self, layer: int, head: int) -> int: ...

    def real_tokens(self, item: int = 0) -> list[Token]: ...

    def token_strings(self, item: int = 0) -> list[str]: ...

    def attention(self, layer: int, head: int | None = None, item: int = 0, rows: Any = None) -> torch.Tensor: ...

    def qkv(self, layer: int, head: int, item: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def layer_qkv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def head_summary(self, layer: int, item: int = 0, block: int = ...) -> dict[str, torch.Tensor]: ...

    def all_attention(self, item: int = 0) -> torch.Tensor: ...

    def layer_attention(self, layer: int) -> torch.Tensor: ...


# -- readers: functions that run where the model is -------------------------------------------------

READERS: dict[str, Callable[..., Any]] = {}  # "module:qualname" -> the function, as written (runs here)
R = TypeVar("R")


def home(values: Sequence[Any]) -> Backend | None:
    """The backend of the first model or trace among ``values`` that does not run here (None: all run here). A
    trace says where it is held by ``home``; a model by ``backend``."""
    for value in values:
        where = getattr(value, "home", None)
        if where is not None and not where.local:
            return where
    return None


def reader(fn: Callable[..., R]) -> Callable[..., R]:
    """Register ``fn`` as a reader: callable where its model is. With a remote model or trace among its arguments
    the call goes to that model's backend (:meth:`Backend.call`), which runs the registered function on the
    server's own model and traces; otherwise it is ``fn`` itself, here. ``fn``'s annotations describe its body,
    which runs where the weights are (a ``LocalModel``, a ``Trace``); the reader takes their stand-ins too (any
    ``ModelLike``, ``TraceLike``), so its arguments are not checked against them; its result type is kept."""
    name = f"{fn.__module__}:{fn.__qualname__}"
    if "<" in fn.__qualname__:
        raise TypeError(f"{name}: only module-level functions (or a class's methods) can be readers")
    READERS[name] = fn
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def where_the_model_is(*args: Any, **kwargs: Any) -> Any:
        backend = home(args) or home(tuple(kwargs.values()))
        if backend is None:
            return fn(*args, **kwargs)
        # a progress callback stays here (it draws a bar in this process): not sent, however it was passed, but
        # handed to the backend, which makes here the calls the reader makes of it there
        bound = signature.bind_partial(*args, **kwargs)
        progress = bound.arguments.pop("progress", None)
        return backend.call(name, fn, bound.args, bound.kwargs, progress)

    where_the_model_is.reader_name = name  # type: ignore[attr-defined]
    return where_the_model_is


def registered(name: str) -> Callable[..., Any]:
    """The reader registered as ``module:qualname`` (its module imported first, which registers it); a
    :class:`~probes.errors.ProbesError` for anything else: a server runs no other code."""
    from .errors import ProbesError

    module, _, qualname = name.partition(":")
    refused = ProbesError(f"{name} is not one of the library's readers: a model server runs only those "
                          "(functions marked @probes.seam.reader)")
    if not (module == "probes" or module.startswith("probes.")) or not qualname:
        raise refused
    if name not in READERS:
        try:
            importlib.import_module(module)
        except ImportError:
            raise refused from None
    if name not in READERS:
        raise refused
    return READERS[name]
