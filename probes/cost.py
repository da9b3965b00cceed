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
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from . import runner
from .errors import BadData, InputTooLong
from .models import Encoding, Model
from .trace import Trace

HF = "Hugging Face eager"
LAZY = "lazy (sdpa + logsumexp)"
SEED = 0


def _random_encoding(model: Model, n: int) -> Encoding:
    """One sequence of ``n`` random token ids from the model's vocabulary (a fixed seed)."""
    ids = torch.randint(0, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(SEED))
    return Encoding(ids, torch.ones_like(ids), None, [[]], ["random"], [None], [None])


def _median_seconds(model: Model, fn: Callable[[], Trace], repeats: int) -> tuple[float, Trace]:
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


def measure(model: Model, lengths: Sequence[int], repeats: int = 3) -> pd.DataFrame:
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
        seconds, trace = _median_seconds(model, lambda: runner.forward(model, enc, "hf"), repeats)
        rows.append(dict(tokens=n, path=HF, seconds=seconds, attention_bytes=sum(a.nbytes for a in trace.attn)))
        seconds, trace = _median_seconds(model, lambda: lazy(enc), repeats)
        rows.append(dict(tokens=n, path=LAZY, seconds=seconds, attention_bytes=sum(s.nbytes for s in trace.lse)))
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
