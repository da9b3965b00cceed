"""Every tolerance the tests use, with the reason for its size. A test that compares floating results takes
its tolerance from here and carries the ``numeric`` marker (``tests/test_numeric_contract.py`` checks both), so
CI can run those tests again under another CPU's kernels (``ATEN_CPU_CAPABILITY=default``, one thread).

Two kinds of agreement:

* **float64**: two computations of the same function in float64 agree to ~1e-15 on any CPU (each rounding is
  2.2e-16 relative). :data:`F64` = 1e-10 leaves 10⁴ of room for long sums and is still 10³ under one fp32
  rounding (1.2e-7), so any step that went through fp32 fails it. Proofs compare here.
* **fp32**: results that reach the same number by sums in another order (another kernel, vector width, thread
  count, batch composition or padding) differ by rounding: at most eps × (the number of terms summed) ×
  (their magnitude), :func:`fp32`. A test names the length and the scale it relies on.
"""

from __future__ import annotations

import torch

EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7: one fp32 rounding, relative
EPS64 = torch.finfo(torch.float64).eps  # 2.2e-16
F64 = 1e-10  # float64 agreement (see above)


def fp32(terms: int, scale: float = 1.0) -> float:
    """The worst fp32 rounding of a result built from ``terms`` terms of magnitude ≤ ``scale`` (or a chain of that
    many roundings), summed in any order: eps × terms × scale."""
    return EPS32 * terms * scale


def f64(terms: int, scale: float = 1.0) -> float:
    """The same for float64 (eps 2.2e-16), never under :data:`F64`'s sense: use it for long float64 sums of large
    numbers, where a plain 1e-10 would not be relative."""
    return max(F64, EPS64 * terms * scale)


def rounded(step: float) -> float:
    """A figure printed to the nearest ``step`` (the docs' "0.36" is to the nearest 0.01) is within step / 2."""
    return step / 2
