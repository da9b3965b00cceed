"""How this process's freed memory goes back to the system (glibc's allocator; elsewhere nothing is changed).

torch allocates a tensor's storage with ``malloc``. glibc serves a large request with its own ``mmap`` (returned
to the system when freed) only above a threshold, and that threshold moves: each time a mapped block is freed it
rises to that block's size, up to 32 MiB. After the first large tensor is freed, every tensor up to 32 MiB (a
layer's attention scores, a slice of logits) comes from the heap instead, where freed blocks stay with the
process, and the many short-lived blocks of a long computation scatter there. With a threshold fixed at 256 KiB
(:data:`MMAP_THRESHOLD`; a layer's hidden state of a 2,000-character text on SmolLM2 is 1 MB, so 1 MiB leaves those
scattered), two traces of that text and path patching of 6 senders peak lower above the loaded model and hand
back what they freed, at the price of page faults (fresh memory for each large tensor): more time on such long
texts, none on sentences (``benchmarks/allocator.py`` measures both; docs/head-probes.md has its figures).

:func:`steady` fixes the threshold (:data:`MMAP_THRESHOLD`, or the environment variable ``PROBES_MMAP_THRESHOLD``
in bytes; ``0`` leaves glibc's moving threshold alone: faster on long texts, more memory). The app and
``python -m probes`` call it as they start; a program of one's own that runs long computations can call it too.
:func:`release` hands back what the heap holds free (``malloc_trim``): the app calls it after each run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

from .errors import BadOption

MMAP_THRESHOLD = 2**18  # bytes (256 KiB): larger blocks are mapped on their own, and unmapped when freed
M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
ENV = "PROBES_MMAP_THRESHOLD"


@functools.cache
def _glibc():
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        for needed in ("gnu_get_libc_version", "mallopt", "malloc_trim"):  # glibc alone has the first
            getattr(libc, needed)
    except (OSError, AttributeError, TypeError):
        return None
    return libc


def threshold_setting() -> int | None:
    """The threshold asked for: ``PROBES_MMAP_THRESHOLD`` when set (bytes, ASCII digits; 0: leave glibc's), else
    :data:`MMAP_THRESHOLD`. A malformed value is refused in one line (:class:`~probes.errors.BadOption`)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return MMAP_THRESHOLD
    if not (raw.isascii() and raw.isdigit()):
        raise BadOption(f"{ENV}={raw!r} is not a number of bytes: give one in digits (0 leaves glibc's threshold)")
    return int(raw) or None


@functools.cache
def steady() -> bool:
    """Fix glibc's mmap threshold for this process (once; later calls return the first answer). True when it was
    set; False where the C library is not glibc or the setting is 0."""
    threshold = threshold_setting()
    libc = _glibc()
    if threshold is None or libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(min(threshold, 2**31 - 1))))


def release() -> None:
    """Hand what the heap holds free back to the system (``malloc_trim``; nothing where there is no glibc)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
