"""Which precision a computation runs in: the one helper every reader uses instead of ``.float()``.

Readers (the Trace's recovered probabilities, the probes, the effects) compute in at least fp32: half
precision is widened, fp32 stays fp32, and a float64 pass (the proof that two computations are the same
function, :meth:`probes.models.LocalModel.cast`) stays float64 all the way, so its figures are not rounded
back to fp32's 1e-7 on the way out.
"""

from __future__ import annotations

import torch

FLOAT64_MAX_BYTES = 4 * 2**30  # the largest float64 copy of a model a proof makes (SmolLM2's is 1 GiB)


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; anything narrower computes in fp32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def upcast(x: torch.Tensor) -> torch.Tensor:
    """``x`` in :func:`working_dtype` (itself when it is already there)."""
    return x.to(working_dtype(x.dtype))
