"""Models served from a Ray cluster: one actor holds the model and its traces; the app and the library ask it
for only what they draw.

``python -m probes serve --model NAME [--ray ADDRESS]`` starts a :class:`ModelServer` (a named Ray actor,
restarted by Ray if its process dies); ``probes.load(NAME, ray=ADDRESS)`` returns a :class:`RemoteModel` that
speaks to it, and ``probes.run(remote_model, text)`` a :class:`RemoteTrace`. The lazy Trace already keeps
the hidden states and recomputes any head on demand, so a client asks the server for one head's ``[n, n]``
weights (or one layer's rows, one head's q, k and v, a head summary) and nothing of size layers × heads × L²
crosses the wire. Work that needs the model itself (parity, generation, ablation grids, attributions) runs on
the server: a reader (:func:`probes.seam.reader`) called with a :class:`RemoteModel` or :class:`RemoteTrace` goes
to the model's :class:`RayBackend`, which sends the reader's registered name and its plain arguments; the server
runs only registered readers (:func:`probes.seam.registered`). A reader's progress callback stays here; the server
sends back each call the reader makes of it as it happens (:meth:`ModelServer.watched`), so a bar counts a served
model's work as it counts a local one's, and a callback that raises (a page nobody watches) stops the work there.

A trace on the server is keyed by its :class:`Request` (text, pair, source, backend, truncation, logits,
budget), never by an opaque id: a restarted actor, which has lost its traces, recomputes the one asked for,
so a client keeps working across a restart. A call that was running when the actor died raises
:class:`~probes.errors.ServerLost` (one line: what happened, what to do).

The answers are the same numbers as a local run: the server runs the same code on the same weights (a test
compares every head, q, k, v and hidden state bit for bit, on minilm and smollm2); its torch threads are set
(``threads``) like a local process's, since a matrix product's rounding may depend on how it is split.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cluster import join
from .errors import ModelUnavailable, ProbesError, ServerLost
from .models import LocalModel, ModelBase
from .seam import Request, registered
from .tokens import Token
from .trace import ROW_BLOCK, TokensAndRules, Trace

if TYPE_CHECKING:
    import torch

NAMESPACE = "probes"  # the Ray namespace the servers' actors are named in
PREFIX = "model:"  # an actor named model:NAME serves NAME
SERVER_TRACE_BYTES = 2**31  # the traces a server keeps at once (least recently used dropped first; newest kept)
SERVER_TRACES = 32


# -- the server ------------------------------------------------------------------------------------

class ModelServer:
    """A Ray actor holding one model and the traces it made (byte-bounded, least recently used first)."""

    def __init__(self, name: str, allow_local_paths: bool = True, device: str = "cpu", threads: int = 1):
        import torch

        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        torch.set_num_threads(max(1, threads))
        from . import models

        self.problem: ProbesError | None = None
        self.model: LocalModel | None = None
        try:
            self.model = models.load(name, allow_local_paths=allow_local_paths, device=device)
        except ProbesError as exc:  # said by describe(), to the one who started it: a failed constructor says less
            self.problem = exc
        self.traces: OrderedDict[Request, Trace] = OrderedDict()
        self.started = time.time()

    def describe(self) -> dict:
        """What a client needs to be the model's stand-in: its name, record, config and tokenizer (the text is
        tokenised where it is typed) and the figures that depend on the weights (and the tokenizer's files, which
        only the server can read: its fingerprint)."""
        if self.problem is not None:
            raise self.problem
        m = self.loaded()
        return dict(name=m.name, location=m.location, family=m.family, config=m.config, tokenizer=m.tokenizer,
                    fingerprint=m.fingerprint(), tokenizer_fingerprint=m.tokenizer_fingerprint(),
                    is_causal=m.is_causal, has_lm_head=m.has_lm_head, predicts_tokens=m.predicts_tokens,
                    dtype=str(m.dtype).replace("torch.", ""), device=str(m.device),
                    weight_bytes=m.weight_bytes(), scratch_problem=m.scratch_problem, pid=os.getpid(),
                    started=self.started)

    def loaded(self) -> LocalModel:
        """The model, which :meth:`describe` has said loaded (a client never gets further when it did not)."""
        if self.model is None:
            raise self.problem or ProbesError("the server holds no model")
        return self.model

    def _trace(self, request: Request) -> Trace:
        from . import runner

        t = self.traces.get(request)
        if t is None:
            t = runner.trace(self.loaded(), request.text, request.pair, source=request.source,
                             backend=request.backend, truncate=request.truncate, logits=request.logits,
                             attention_budget=request.attention_budget)
            self.traces[request] = t
        self.traces.move_to_end(request)
        while len(self.traces) > 1 and (len(self.traces) > SERVER_TRACES or
                                        sum(x.nbytes for x in self.traces.values()) > SERVER_TRACE_BYTES):
            self.traces.popitem(last=False)
        return t

    def trace(self, request: Request) -> dict:
        """Run (or find) the trace of ``request``; send what is small: tokens, mask, the rule of each layer."""
        t = self._trace(request)
        return dict(source=t.source, model=t.model, tokens=t.tokens, input_ids=t.input_ids,
                    attention_mask=t.attention_mask, is_causal=t.is_causal, scales=t.scales, windows=t.windows,
                    softcaps=t.softcaps, n_kv_heads=t.n_kv_heads, backend=t.backend, note=t.note, lazy=t.lazy,
                    n_layers=t.n_layers, n_heads=t.n_heads, has_logits=t.logits is not None,
                    has_qkv=t.q is not None or t.qkv_of is not None)

    def read(self, request: Request, what: str, args: tuple = (), kwargs: dict | None = None):
        """One of the trace's readers (:data:`READS`) or fields (:data:`FIELDS`), on the trace of ``request``."""
        t = self._trace(request)
        if what in FIELDS:
            return getattr(t, what)
        if what not in READS:
            raise ValueError(f"{what!r} is not a reader of a trace: ask for one of {', '.join(READS + FIELDS)}")
        return getattr(t, what)(*args, **(kwargs or {}))

    def compute(self, name: str, args: tuple, kwargs: dict):
        """``name`` (module:function, one of this package's readers) on this server's model and traces: the
        arguments :data:`MODEL` and :class:`Request` s stand for them."""
        fn = registered(name)
        def held(a):
            return self.loaded() if isinstance(a, ServerModel) else (self._trace(a) if isinstance(a, Request) else a)

        return fn(*[held(a) for a in args], **{k: held(v) for k, v in kwargs.items()})

    def watched(self, name: str, args: tuple, kwargs: dict):
        """:meth:`compute`, with the reader's progress sent back as it goes (a Ray streaming generator): each call
        the reader makes of its ``progress`` callback is yielded as ``("progress", arguments)``, then its answer as
        ``("result", answer)``. The reader runs in a thread of its own while this yields; when the client stops
        listening (its own callback raised: a page that nobody watches any more), the generator is closed and the
        reader's next progress call raises :class:`Unwatched`, so the work stops a step later, as a local run's
        would."""
        import queue
        import threading

        said: queue.SimpleQueue = queue.SimpleQueue()
        unwatched = threading.Event()
        outcome: dict = {}

        def progress(*args) -> None:
            if unwatched.is_set():
                raise Unwatched("the client stopped listening")
            said.put(("progress", args))

        def work() -> None:
            try:
                outcome["result"] = self.compute(name, args, {**kwargs, "progress": progress})
            except BaseException as exc:  # noqa: BLE001 - raised by the generator below, which Ray sends the client
                outcome["error"] = exc
            finally:
                said.put(None)

        thread = threading.Thread(target=work, name=f"reader {name}", daemon=True)
        thread.start()
        try:
            while (item := said.get()) is not None:
                yield item
        finally:  # GeneratorExit when the client cancelled: the reader stops at its next step
            unwatched.set()
            thread.join()
        if "error" in outcome:
            raise outcome["error"]
        yield "result", outcome["result"]

    def pid(self) -> int:
        return os.getpid()


READS = ("attention", "qkv", "layer_qkv", "head_summary", "all_attention", "layer_attention")
FIELDS = ("hidden_states", "logits", "rotary", "lse")


class Unwatched(Exception):
    """Raised on a server, in a reader's progress callback, once the client that asked for the progress has stopped
    listening: the reader's work stops there."""


@dataclass(frozen=True)
class ServerModel:
    """What :func:`compute` sends in place of a :class:`RemoteModel`: the server's own model."""


MODEL = ServerModel()


# -- the client ------------------------------------------------------------------------------------

@dataclass
class Wire:
    """What crossed the wire, as pickled (Ray adds its own framing, a few hundred bytes a call); with
    ``PROBES_WIRE_LOG`` set, each call is also a line of that file (bytes sent, bytes received)."""

    calls: int = 0
    sent: int = 0
    received: int = 0

    def count(self, sent: object, received: object, progress: Sequence = ()) -> None:
        """One call: its arguments, its answer, and the progress items that came before the answer (each sent
        alone)."""
        from ray import cloudpickle  # what Ray serialises with (functions of records by value, tensors as buffers)

        out = len(cloudpickle.dumps(sent, protocol=5))
        back = sum(len(cloudpickle.dumps(x, protocol=5)) for x in [received, *progress])
        self.calls += 1
        self.sent += out
        self.received += back
        if log := os.environ.get("PROBES_WIRE_LOG"):  # a benchmark reads what an app's server sent, call by call
            with open(log, "a") as f:
                f.write(f"{out} {back}\n")


@dataclass
class RayBackend:
    """A model server on a Ray cluster, as a backend (:class:`probes.seam.Backend`): a trace runs there and stays
    there (:class:`RemoteTrace` reads it), and a reader (:func:`probes.seam.reader`) runs there on the server's own
    model and traces, which its :class:`RemoteModel` and :class:`RemoteTrace` arguments stand for."""

    name: str  # the model it serves
    address: str  # the cluster's
    handle: Any = field(default=None, repr=False)  # the actor's
    wire: Wire = field(default_factory=Wire, repr=False)
    local = False

    def ask(self, method: str, *args, progress=None):
        """Call the server; a dead actor is one line (:class:`ServerLost`), and Ray restarts it for the next call.
        A server stopped and started again (a new actor under the same name) is found again by its name.
        ``progress``: ``method`` is a generator of progress and then the answer (:meth:`ModelServer.watched`); each
        progress item is a call of ``progress`` here, as it comes. A call that reported progress is not retried (its
        progress would be counted twice); where ``progress`` raises, the server's work is cancelled."""
        import ray
        from ray import exceptions

        told: list = []  # the progress items passed on
        for attempt in (0, 1):
            try:
                if progress is None:
                    result = ray.get(getattr(self.handle, method).remote(*args))
                else:
                    result = self._listen(getattr(self.handle, method).remote(*args), progress, told)
                break
            except exceptions.ActorUnavailableError:  # restarting: its new process loads the model
                raise self._restarting() from None
            except exceptions.RayActorError:  # dead, or restarting: the actor that has the name now, if any
                try:
                    self.handle = ray.get_actor(PREFIX + self.name, namespace=NAMESPACE)
                except ValueError:
                    raise ServerLost(f"the server of {self.name} on the Ray cluster at {self.address} was stopped: "
                                     f"start it again (python -m probes serve --model {self.name} --ray "
                                     f"{self.address})") from None
                if attempt or told:
                    raise self._restarting() from None
            except exceptions.RayTaskError as exc:  # the server's own error, e.g. an InputTooLong: raised as itself
                cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else None
                raise (cause or ProbesError(str(exc).splitlines()[-1])) from None
        self.wire.count(args, result, told)
        return result

    def _listen(self, stream, progress, told: list):
        """The answer at the end of ``stream`` (a :meth:`ModelServer.watched` call), each progress item before it
        passed to ``progress`` and kept in ``told``. ``stream`` is cancelled where ``progress`` raises."""
        import ray

        result = None
        for ref in stream:
            item = ray.get(ref)
            kind, value = item
            if kind != "progress":
                result = value
                continue
            told.append(item)
            try:
                progress(*value)
            except BaseException:
                ray.cancel(stream)  # closes the server's generator: its reader stops at its next step
                raise
        return result

    def _restarting(self) -> ServerLost:
        return ServerLost(f"the server of {self.name} on the Ray cluster at {self.address} stopped answering (its "
                          "process died); Ray is restarting it: try again in a few seconds")

    def run(self, model: RemoteModel, request: Request) -> RemoteTrace:
        facts = self.ask("trace", request)
        return RemoteTrace(model, request, **facts)

    def call(self, name: str, fn, args: tuple, kwargs: dict, progress=None):
        """The reader ``name`` on the server: a :class:`RemoteModel` argument stands for the server's model, a
        :class:`RemoteTrace` for its trace (sent as its :class:`Request`). ``progress`` (the reader's callback, which
        :func:`probes.seam.reader` has kept here) is called here as the reader calls its own there."""
        sent = (name, tuple(_sent(a) for a in args), {k: _sent(v) for k, v in kwargs.items()})
        if progress is None:
            return self.ask("compute", *sent)
        return self.ask("watched", *sent, progress=progress)


def _sent(value):
    """What stands for ``value`` on the wire: the server's own model, a trace's request, or the value itself."""
    if isinstance(value, RemoteModel):
        return MODEL
    if isinstance(value, RemoteTrace):
        return value.request
    return value


@dataclass
class RemoteModel(ModelBase):
    """A model held by a :class:`ModelServer`: the tokenizer, config and record are here (texts are tokenised
    where they are typed), the weights are there, with everything that reads them. Its :attr:`backend` runs its
    traces (:func:`probes.run` gives a :class:`RemoteTrace`) and its readers there; what depends on the weights
    (the fingerprint, the byte counts, whether the from-scratch path runs it) came with its description."""

    backend: RayBackend = field(default=None, repr=False)  # type: ignore[assignment]  # connect() gives it
    facts: dict = field(default_factory=dict, repr=False)

    @property
    def handle(self):
        """The server's actor handle."""
        return self.backend.handle

    @property
    def address(self) -> str:
        """The address of the cluster the server runs on."""
        return self.backend.address

    @property
    def wire(self) -> Wire:
        """What crossed the wire to and from the server."""
        return self.backend.wire

    def ask(self, method: str, *args):
        """A call of the server's :class:`ModelServer` method ``method`` (:meth:`RayBackend.ask`)."""
        return self.backend.ask(method, *args)

    def fingerprint(self) -> str:
        return self.facts["fingerprint"]

    def tokenizer_fingerprint(self) -> str:
        """The server's own (its tokenizer's files are there); one worked out from the tokenizer it sent, for a
        server that does not say."""
        return self.facts.get("tokenizer_fingerprint") or super().tokenizer_fingerprint()

    @property
    def is_causal(self) -> bool:
        return self.facts["is_causal"]

    @property
    def has_lm_head(self) -> bool:
        return self.facts["has_lm_head"]

    @property
    def predicts_tokens(self) -> bool:
        return self.facts["predicts_tokens"]

    @property
    def device(self):
        import torch

        return torch.device(self.facts["device"])

    @property
    def dtype(self):
        import torch

        return getattr(torch, self.facts["dtype"])

    def weight_bytes(self, dtype=None) -> int:
        return self.facts["weight_bytes"] // self.dtype.itemsize * (dtype or self.dtype).itemsize

    @property
    def scratch_problem(self) -> str | None:
        return self.facts["scratch_problem"]


class RemoteTrace(TokensAndRules):
    """A trace held by the server: tokens and mask here, every number read from there, one call per question.
    What it answers from its tokens, mask and layer rules is :class:`~probes.trace.TokensAndRules`'s, as a local
    :class:`~probes.trace.Trace`'s; the rest are the server's Trace's answers."""

    # the facts the server sends (ModelServer.trace), set in __init__
    source: str
    model: str
    tokens: list[list[Token]]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    is_causal: bool
    scales: list[float] | None
    windows: list[int | None] | None
    softcaps: list[float | None] | None
    n_kv_heads: int | None
    backend: str
    note: str
    lazy: bool
    n_layers: int
    n_heads: int
    has_logits: bool
    has_qkv: bool

    def __init__(self, served: RemoteModel, request: Request, **facts):
        self.remote, self.request = served, request  # facts: the server's Trace's tokens, mask, rules (and model name)
        self.__dict__.update(facts)
        self.lse = None
        self._fields: dict = {}

    @property
    def home(self) -> RayBackend:
        """Where it is held: its model's server (where :func:`probes.seam.reader` sends a reader)."""
        return self.remote.backend

    def _read(self, what: str, *args, **kwargs):
        return self.remote.ask("read", self.request, what, args, kwargs)

    def _field(self, name: str):
        if name not in self._fields:
            self._fields[name] = self._read(name)
        return self._fields[name]

    @property
    def hidden_states(self):
        return self._field("hidden_states")

    @property
    def logits(self):
        return self._field("logits") if self.has_logits else None

    @property
    def rotary(self):
        return self._field("rotary")

    @property
    def nbytes(self) -> int:
        return sum(t.untyped_storage().nbytes() for t in (self.input_ids, self.attention_mask))

    def attention(self, layer: int, head: int | None = None, item: int = 0, rows=None):
        return self._read("attention", layer, head, item, rows)

    def qkv(self, layer: int, head: int, item: int = 0):
        return self._read("qkv", layer, head, item)

    def layer_qkv(self, layer: int):
        return self._read("layer_qkv", layer)

    def head_summary(self, layer: int, item: int = 0, block: int = ROW_BLOCK):
        return self._read("head_summary", layer, item, block)

    def all_attention(self, item: int = 0):
        return self._read("all_attention", item)

    def layer_attention(self, layer: int):
        return self._read("layer_attention", layer)


# -- joining a cluster, finding and starting servers ----------------------------------------------

def served(address: str = "auto") -> list[str]:
    """The models that servers on the cluster at ``address`` hold."""
    join(address)
    from ray import util

    return sorted(a["name"][len(PREFIX):] for a in util.list_named_actors(all_namespaces=True)
                  if a.get("namespace") == NAMESPACE and a["name"].startswith(PREFIX))


def connect(name: str, address: str = "auto", handle=None) -> RemoteModel:
    """The model ``name`` as served on the Ray cluster at ``address`` (:func:`probes.load` with ``ray=``);
    ``handle``: the actor's, where this process started it."""
    import ray

    gcs = join(address)
    try:
        handle = handle or ray.get_actor(PREFIX + name, namespace=NAMESPACE)
    except ValueError:
        others = ", ".join(served(address)) or "none"
        raise ModelUnavailable(f"no server on the Ray cluster at {gcs} holds {name!r} (served there: {others}): "
                               f"start one with `python -m probes serve --model {name} --ray {gcs}`") from None
    backend = RayBackend(name, gcs, handle)
    facts = backend.ask("describe")
    backend.wire = Wire()  # the description is the model's stand-in, not a question: counted from here on
    return RemoteModel(name=facts["name"], location=f"ray://{gcs}/{name}", family=facts["family"],
                       tokenizer=facts["tokenizer"], config=facts["config"], backend=backend, facts=facts)


def serve(name: str, address: str = "auto", gpus: float = 0, cpus: int = 1, allow_local_paths: bool = True,
          detached: bool = True):
    """Start the server of ``name`` on the Ray cluster at ``address`` (a named actor that Ray restarts when its
    process dies) and wait until its model is loaded; returns the connected :class:`RemoteModel`. A model that
    cannot be loaded is its one-line error, and no actor is left behind."""
    import ray

    join(address)
    actor: Any = ray.remote(ModelServer).options(
        name=PREFIX + name, namespace=NAMESPACE, lifetime="detached" if detached else None, max_restarts=-1,
        num_cpus=cpus, num_gpus=gpus or None, get_if_exists=True)
    handle: Any = actor.remote(name, allow_local_paths, "cuda" if gpus else "cpu", cpus)
    try:
        return connect(name, address, handle)  # this handle keeps an actor that is not detached alive
    except ProbesError:
        ray.kill(handle, no_restart=True)
        raise


def stop(name: str, address: str = "auto") -> None:
    """Stop the server of ``name`` (no restart)."""
    import ray

    join(address)
    try:
        held: Any = ray.get_actor(PREFIX + name, namespace=NAMESPACE)
        ray.kill(held, no_restart=True)
    except ValueError:
        pass
