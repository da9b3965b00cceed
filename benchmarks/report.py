"""What every benchmark does with its table, and how it times contenders against each other.

Where results go: every benchmark writes under ``out_folder(args.out)``, the folder ``--out`` names, or else a new
temporary folder (printed, so a person can find the files). So a run never overwrites the committed results in
``benchmarks/results`` unless ``--out benchmarks/results`` is given; the side files a run makes (per-run JSON,
logs, intermediate tables) go under that folder or a temporary one too, never into the repository.

How contenders are timed: ``alternate`` runs them round by round (each round every contender once, in an order
rotated by one from the last), never all of one contender first, so a drift in the machine's load (a shared
machine: other people's jobs start and stop) hits them alike instead of showing up as a ratio between them.
``ratios`` gives each round's ratio against a reference contender and ``summary`` their median, min and max.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

PREFIX = "probes-bench-"
RESULTS = Path(__file__).resolve().parent / "results"  # the committed results: read (a saved 'before:'), never default
K = TypeVar("K")  # what names a contender: a string, or any key (compose.py times torch dtypes)


def out_folder(out: Path | None) -> Path:
    """The folder a benchmark writes under: ``out`` (made if missing) when given, or else a new empty temporary
    folder outside the repository, whose path is printed."""
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        return out
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    print(f"results go to {folder} (--out benchmarks/results writes the committed ones)", flush=True)
    return folder


def publish(text: str, out: Path | None, name: str) -> Path:
    """Print ``text`` and write it to ``out_folder(out) / name``; the path written."""
    print(text)
    path = out_folder(out) / name
    path.write_text(text.rstrip("\n") + "\n")
    print(f"wrote {path}", flush=True)
    return path


def section(text: str, label: str) -> list[str]:
    """The lines of the block that starts with ``label:`` in a saved result (up to a blank line), or []."""
    lines = text.splitlines()
    begin = next((i for i, line in enumerate(lines) if line.startswith(f"{label}:")), None)
    if begin is None:
        return []
    end = next((i for i in range(begin, len(lines)) if not lines[i].strip()), len(lines))
    return lines[begin:end]


@dataclass
class Rounds(Generic[K]):
    """What ``alternate`` measured: each contender's seconds, one per round in round order, the order each
    round ran them in, and each contender's result from the last round (whatever it returned)."""

    seconds: dict[K, list[float]]
    orders: list[list[K]] = field(default_factory=list)
    results: dict[K, Any] = field(default_factory=dict)

    def median(self, name: K) -> float:
        """The median of ``name``'s seconds over the rounds."""
        return statistics.median(self.seconds[name])


# Callable[..., object], not Callable[[], object]: a contender is called with no argument, but callers bind their loop
# variables as lambda defaults (lambda model=model: ...), which mypy cannot check against a () -> object
# (python/mypy#15459).
def alternate(contenders: dict[K, Callable[..., object]], rounds: int,
              clock: Callable[[], float] = time.perf_counter) -> Rounds[K]:
    """Run every contender once a round for ``rounds`` rounds, round ``r`` in the contenders' order rotated by
    ``r`` (A, B, C, then B, C, A, then C, A, B ...): each contender's wall seconds per round, never two rounds of
    one before every other's first, so that load drift on a shared machine hits them alike. Warm-ups are the
    caller's (run each once before, untimed, where a first call pays for lazy set-up)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    names = list(contenders)
    got: Rounds[K] = Rounds(seconds={name: [] for name in names})
    for r in range(rounds):
        shift = r % len(names) if names else 0
        order = names[shift:] + names[:shift]
        got.orders.append(order)
        for name in order:
            start = clock()
            got.results[name] = contenders[name]()
            got.seconds[name].append(clock() - start)
    return got


def ratios(seconds: dict[K, list[float]], reference: K) -> dict[K, list[float]]:
    """Each contender's seconds over the reference contender's, round by round (the same round's pair: the
    two ran next to each other, under the same load)."""
    base = seconds[reference]
    return {name: [s / b for s, b in zip(times, base, strict=True)] for name, times in seconds.items()}


def summary(per_round: list[float]) -> str:
    """Per-round ratios in one cell: the median, then min–max and every round's ratio when there are several,
    e.g. ``1.20× (1.10–1.40×: 1.10 / 1.20 / 1.40)``."""
    if not per_round:
        return "–"
    median = statistics.median(per_round)
    if len(per_round) == 1:
        return f"{median:.2f}×"
    each = " / ".join(f"{x:.2f}" for x in per_round)
    return f"{median:.2f}× ({min(per_round):.2f}–{max(per_round):.2f}×: {each})"
