"""The cost of looking at every head: Hugging Face's materialised attention against our lazy Trace.

Hugging Face eager returns every head's probabilities, layers × heads × L² numbers; the lazy Trace
(``sdpa`` backend) keeps one logsumexp per query row, layers × heads × L, and recovers any head's
L×L on demand as P = exp(q·kᵀ·scale − lse). :func:`measure` times both live on short random inputs
and reads the bytes off the tensors each Trace holds; :func:`load_benchmark` reads the long-input
runs of ``benchmarks/long_inputs.py``; :func:`quadratic_fit` gives the c of c·L² to draw beside them.
All three return (or take) tidy rows: ``tokens, path, seconds, attention_bytes``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from . import runner
from .errors import BadData, InputTooLong
from .models import Encoding, LocalModel
from .scratch import generate as g
from .trace import Trace

if TYPE_CHECKING:
    from .seam import ModelLike

HF = "Hugging Face eager"
LAZY = "lazy (sdpa + logsumexp)"
SEED = 0


def _random_encoding(model: LocalModel, n: int) -> Encoding:
    """One sequence of ``n`` random token ids from the model's vocabulary (a fixed seed)."""
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(SEED))
    return Encoding(ids, torch.ones_like(ids), None, [[]], ["random"], [None], [None])


def _median_seconds(model: LocalModel, fn: Callable[[], Trace], repeats: int) -> tuple[float, Trace]:
    """Median wall time of ``fn`` over ``repeats`` runs after one warm-up, and the last Trace."""
    trace = fn()  # warm-up: first-call set-up of the kernels is not what we measure
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        trace = fn()
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), trace


def measure(model: LocalModel, lengths: Sequence[int], repeats: int = 3) -> pd.DataFrame:
    """Time both paths on random inputs of each length and read the bytes their attention takes:

    * ``Hugging Face eager``: the forward pass with every attention probability
      (``attention_bytes``: the ``attn`` tensors, layers × heads × L² × 4 in fp32);
    * ``lazy (sdpa + logsumexp)``: our from-scratch forward with the ``sdpa`` backend, plus recovering
      one head's full L×L (layer 0, head 0) from it (``attention_bytes``: the ``lse`` tensors,
      layers × heads × L × 4).

    ``seconds`` is the median of ``repeats`` runs after one warm-up. Lengths beyond the model's context
    window raise :class:`~probes.errors.InputTooLong` before anything runs."""
    for n in lengths:
        if n > model.max_tokens:
            raise InputTooLong(n, model.max_tokens, model.name)

    def lazy(enc: Encoding) -> Trace:
        trace = runner.forward(model, enc, "scratch", "sdpa")
        trace.attention(0, 0)  # one head's L×L, recovered from q, k and the logsumexp
        return trace

    rows = []
    for n in lengths:
        enc = _random_encoding(model, n)
        seconds, trace = _median_seconds(model, partial(runner.forward, model, enc, "hf"), repeats)
        rows.append(dict(tokens=n, path=HF, seconds=seconds, attention_bytes=sum(a.nbytes for a in trace.attn or ())))
        seconds, trace = _median_seconds(model, partial(lazy, enc), repeats)
        rows.append(dict(tokens=n, path=LAZY, seconds=seconds, attention_bytes=sum(s.nbytes for s in trace.lse or ())))
    return pd.DataFrame(rows, columns=["tokens", "path", "seconds", "attention_bytes"])


def quadratic_fit(tokens: Sequence[float], values: Sequence[float]) -> float:
    """The c of values ≈ c·L², by least squares through the origin: c = Σ L²·y / Σ L⁴."""
    x = np.asarray(tokens, dtype=float) ** 2
    y = np.asarray(values, dtype=float)
    if x.size == 0 or x.shape != y.shape:
        raise ValueError(f"need as many values as token counts, at least one (got {x.size} and {y.size})")
    return float(x @ y / (x @ x))


def load_benchmark(path: str | Path) -> pd.DataFrame:
    """The runs of ``benchmarks/long_inputs.py`` (its ``long_inputs.json``: one object per length with
    ``attention_bytes`` = layers × heads × L² × 4 and ``hf_``/``lazy_`` ``seconds`` and ``peak``) as tidy
    rows ``tokens, path, seconds, attention_bytes, peak_bytes``. A path that was not run at a length (its
    seconds are null) is left out; the lazy path's attention bytes are the logsumexp's, L times fewer."""
    path = Path(path)
    try:
        runs = json.loads(path.read_text())
        rows = []
        for run in runs:
            n = run["tokens"]
            for prefix, name, attention_bytes in (("hf", HF, run["attention_bytes"]),
                                                  ("lazy", LAZY, run["attention_bytes"] // n)):
                if run[f"{prefix}_seconds"] is not None:
                    rows.append(dict(tokens=n, path=name, seconds=run[f"{prefix}_seconds"],
                                     attention_bytes=attention_bytes, peak_bytes=run[f"{prefix}_peak"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadData(f"{path.name}: not a long_inputs.py result ({type(exc).__name__}: {exc}); "
                      "rerun benchmarks/long_inputs.py --out to write it again") from exc
    return pd.DataFrame(rows, columns=["tokens", "path", "seconds", "attention_bytes", "peak_bytes"])


# -- generation: the KV cache ----------------------------------------------------------------------

CACHED = "KV cache (one new token)"
RECOMPUTE = "recompute the whole prefix"


def kv_cache_bytes(model: ModelLike, tokens: int, grouped: bool = True) -> int:
    """What the KV cache of ``model`` holds after ``tokens`` tokens: 2 × layers × kv_heads × d_head × tokens
    × 4 bytes (fp32), summed per layer so a sliding-window layer counts only its window. ``grouped=False``:
    as if every query head had its own key/value head (what grouped-query attention saves)."""
    heads = model.n_kv_heads if grouped else model.n_heads
    return sum(g.cache_bytes(1, heads, model.d_head, min(tokens, w) if w else tokens) for w in g.windows_of(model))


def measure_decoding(model: LocalModel, contexts: Sequence[int], steps: int = 16, repeats: int = 3) -> pd.DataFrame:
    """Time per new token at each context length, on random tokens, both ways a decoder can write:

    * ``KV cache``: after a prefill of ``context`` tokens, ``steps`` steps of one token each (median);
    * ``recompute``: the whole prefix of ``context`` tokens through the network again for one token
      (median of ``repeats`` after a warm-up), what a decoder without a cache does every step;

    with the bytes the cache held at that context, measured on its tensors (``cache_bytes``) and by the
    formula (``formula_bytes``). Tidy rows: ``tokens, path, seconds_per_token, cache_bytes, formula_bytes``."""
    net = g.decoder(model)
    for n in contexts:
        if n + steps > model.max_tokens:
            raise InputTooLong(n + steps, model.max_tokens, model.name)
    rows = []
    with torch.inference_mode():
        for n in contexts:
            prompt = _random_encoding(model, n).input_ids.to(model.device)
            cache = g.new_cache(model, n + steps)
            g.cached_pass(net, cache, prompt)  # the prefill (also the warm-up)
            measured = cache.nbytes
            times = []
            for token in prompt[0, :steps]:
                t0 = time.perf_counter()
                g.cached_pass(net, cache, token.view(1, 1))
                times.append(time.perf_counter() - t0)
            rows.append(dict(tokens=n, path=CACHED, seconds_per_token=statistics.median(times), cache_bytes=measured,
                             formula_bytes=kv_cache_bytes(model, n)))
            times = []
            for _ in range(repeats + 1):
                t0 = time.perf_counter()
                g.cached_pass(net, g.new_cache(model, n), prompt)
                times.append(time.perf_counter() - t0)
            rows.append(dict(tokens=n, path=RECOMPUTE, seconds_per_token=statistics.median(times[1:]),
                             cache_bytes=None, formula_bytes=None))  # no cache kept
    return pd.DataFrame(rows, columns=["tokens", "path", "seconds_per_token", "cache_bytes", "formula_bytes"])


def load_decoding(path: str | Path) -> pd.DataFrame:
    """The rows ``benchmarks/generate.py`` saved (``generate.json``): ``tokens, path, seconds_per_token,
    cache_bytes, formula_bytes``."""
    path = Path(path)
    try:
        frame = pd.DataFrame(json.loads(path.read_text())["rows"])
        frame = frame[["tokens", "path", "seconds_per_token", "cache_bytes", "formula_bytes"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadData(f"{path.name}: not a generate.py result ({type(exc).__name__}: {exc}); rerun "
                      "benchmarks/generate.py to write it again") from exc
    return frame
