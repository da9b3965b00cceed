"""Texts in, Traces out: the one runner every reader goes through (``probes.run``, parity, the head
probes, the app), where the model's weights are.

Its words: :func:`forward` is one forward pass of an encoded batch, :func:`trace` the Trace of texts (encoded, then
one forward pass), :func:`batches` the Traces of many texts, a batch at a time. (``probes.run(model, text)`` is the
user's verb, on a local or a served model: a local model's backend calls :func:`trace`.)

Two producers stand side by side with one signature, ``forward(model, enc, backend, logits)``:
``"hf"`` (:func:`probes.hf.forward`, the reference) and ``"scratch"`` (:func:`probes.scratch.forward`).
``"auto"`` picks the from-scratch pass where the model's family has one and Hugging Face's otherwise,
which is what the probes read.

"Source" means this one thing everywhere: the producer that computes attention, ``hf`` or ``scratch``
(``runner.SOURCES``; the CLI's and the app's source switch; ``Trace.source`` names it with the backend that
ran, e.g. ``scratch/sdpa``). Where weights were read from is ``model.location``; who set the thread count is
``threads.Choice.set_by``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator

from . import hf, scratch
from .trace import Trace

PRODUCERS = {"hf": hf.forward, "scratch": scratch.forward}
SOURCES = tuple(PRODUCERS)


def resolve_source(model, source: str) -> str:
    if source == "auto":
        return "scratch" if model.scratch_supported else "hf"
    if source not in PRODUCERS:
        raise ValueError(f"unknown source {source!r}: choose one of {', '.join(SOURCES)} or auto")
    return source


def forward(model, enc, source: str = "hf", backend: str = "eager", logits: bool = True,
            attention_budget: int | None = None) -> Trace:
    """The Trace of one encoded batch from the producer ``source`` (the backend applies to the scratch
    pass; Hugging Face's reference is always eager). ``attention_budget`` (bytes, default: none): a pass
    whose probabilities of every head would take more keeps a logsumexp per row instead (a lazy Trace;
    its note says so), so a view of a long text does not hold layers × heads × L² numbers."""
    source = resolve_source(model, source)
    return PRODUCERS[source](model, enc, backend=backend if source == "scratch" else "eager", logits=logits,
                             attention_budget=attention_budget)


def trace(model, texts: str | list[str], pairs: str | list[str | None] | None = None, source: str = "hf",
          backend: str = "eager", truncate: bool = False, logits: bool = True,
          attention_budget: int | None = None) -> Trace:
    """Encode one text (or a batch, with optional second sentences) and return its Trace."""
    return forward(model, model.encode(texts, pairs, truncate=truncate), source, backend, logits, attention_budget)


def run(model, texts: str | list[str], pairs: str | list[str | None] | None = None, source: str = "hf",
        backend: str = "eager", truncate: bool = False, logits: bool = True,
        attention_budget: int | None = None) -> Trace:
    """Deprecated: :func:`trace` (the same arguments, the same Trace); ``run`` is :func:`probes.run`'s word."""
    warnings.warn("probes.runner.run is deprecated: use probes.runner.trace (the same arguments), or probes.run for "
                  "one text on a local or a served model", DeprecationWarning, stacklevel=2)
    return trace(model, texts, pairs, source, backend, truncate, logits, attention_budget)


def batches(model, texts: Iterable[str], batch_size: int = 16, source: str = "auto", backend: str = "eager",
            progress: Callable[[int], None] | None = None, logits: bool = False,
            attention_budget: int | None = None) -> Iterator[Trace]:
    """Traces of ``texts`` in batches of ``batch_size``, each text cut to the context window (what the
    probes read). ``progress(n)`` is called with the number of texts done after each batch; ``attention_budget``
    as in :func:`trace` (a batch whose probabilities would take more gives a lazy Trace)."""
    texts = list(texts)
    for start in range(0, len(texts), batch_size):
        batch = texts[start:start + batch_size]
        yield trace(model, batch, source=source, backend=backend, truncate=True, logits=logits,
                    attention_budget=attention_budget)
        if progress is not None:
            progress(len(batch))


def too_long(model, texts: Iterable[str]) -> int:
    """How many of ``texts`` are longer than the model's context window (special tokens included): the ones
    :func:`batches` cuts to their first ``model.max_tokens`` tokens, which a reader says it did."""
    limit = model.max_tokens
    texts = [t for t in texts if t.strip()]
    if not texts:
        return 0
    ids = model.tokenizer(texts, truncation=True, max_length=limit + 1)["input_ids"]  # one more: enough to know
    return sum(len(row) > limit for row in ids)


def note_cuts(name: str, model, data: str, texts: Iterable[str], notify) -> None:
    """Tell ``notify`` (when there is one) how many of ``texts`` :func:`batches` will cut to the context window."""
    n = too_long(model, texts) if notify else 0
    if n:
        notify(f"{name}: {n} item(s) of {data} are longer than {model.name}'s context window of {model.max_tokens} "
               f"tokens: each is cut to its first {model.max_tokens}")


def items(traces: Iterable[Trace]) -> Iterator[tuple[Trace, int]]:
    """Each batch item of each Trace in turn, as (trace, item): one per text, in order."""
    for trace in traces:
        for item in range(trace.batch_size):
            yield trace, item
