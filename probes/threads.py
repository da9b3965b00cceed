"""How many threads torch's CPU kernels use (intra-op threads), chosen for the machine and the work.

torch starts one intra-op thread per core of the machine, and its threads (OpenMP: GNU libgomp in the
PyPI CPU build) busy-wait for the next parallel region instead of sleeping. On a machine where other
processes keep cores busy, those threads cannot all run at once: each parallel region then waits for a
thread that is not scheduled while the others spin, and a run's time grows with the CPU time its threads waste
(``benchmarks/profile_speed.py`` measures it, with torch's default and with this choice, quiet and beside a busy
process; docs/benchmarks.md has its figures). So the number of threads is chosen from

* **the CPUs this process may use**: its affinity (``os.sched_getaffinity``: a taskset's or a
  container's share, not the machine's), capped by a cgroup CPU quota (``/sys/fs/cgroup/cpu.max``);
* **how many of them other work keeps busy now**: the busy time of those CPUs in ``/proc/stat`` over
  a quarter of a second, less this process's own CPU time. Not the load average: it is a one-minute
  moving average (a process started a few seconds ago barely shows in it, one that stopped still does)
  and it counts this process too. Where ``/proc/stat`` cannot be read (macOS), the load average is the
  fallback. A CPU counts as taken when other work keeps it busy more than a quarter of the time
  (:data:`SLACK`: the shell, a sampler, a browser tab are noise);
* **the kind of work** (:data:`KINDS`):

  - ``profile``: a batch job (``python -m probes profile``, a benchmark): every free CPU;
  - ``batch``: the same rule for the other commands whose work is whole passes over a text (``parity``, ``why``,
    ``ablate``, ``compose``, ``patch``, ``claim``, ``kv`` a layer at a time): every free CPU;
  - ``stream``: work a token at a time (``generate``, ``kv --method stream``): 1 thread. Each step multiplies one
    row by the weights, too little work to share, and each step opens dozens of parallel regions whose threads spin
    between them; beside other work those regions wait for threads that are not scheduled;
  - ``app``: Streamlit runs each session's script in its own thread, and each such thread gets its own
    team of OpenMP threads: half the free CPUs (at least 1, at most :data:`APP_MAX`), so that two
    sessions computing at once do not oversubscribe the machine (a sentence-long forward pass gains
    little from more threads anyway);
  - ``worker``: a Ray actor shares its machine with the pool's other actors, which is where the
    parallelism comes from: 1 thread, unless Ray gave it more (Ray sets ``OMP_NUM_THREADS`` to an
    actor's ``num_cpus``);

* **an override**, first found of: an explicit number (``--threads N`` of every ``python -m probes``
  command), the environment variable ``PROBES_THREADS``, ``OMP_NUM_THREADS`` (the usual OpenMP knob;
  read only when it is a plain whole number). An override is used as given.

:func:`choose` makes the decision from those inputs (a pure function: the tests give it machines);
:func:`apply` measures this machine (once per process), decides and sets ``torch.set_num_threads``.

The choice is made when the work starts: work that starts beside it later still meets threads that
spin. For long runs on a shared machine, ``OMP_WAIT_POLICY=PASSIVE`` in the environment (read when
torch is imported, so set it before) makes idle threads sleep: beside other work, a run on more threads than the
free CPUs then costs about the CPU time of one thread, not several times it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import BadOption

KINDS = ("profile", "batch", "stream", "app", "worker")
ENV = "PROBES_THREADS"
SLACK = 0.25  # other work below a quarter of a CPU leaves it free
APP_MAX = 4  # threads per app session at most
SAMPLE_S = 0.25  # how long /proc/stat is watched


@dataclass(frozen=True)
class Choice:
    """How many threads, and why."""

    threads: int
    kind: str
    cpus: int  # CPUs this process may use
    busy: float | None  # CPUs' worth of other work seen (None: not measured)
    set_by: str  # "--threads", "PROBES_THREADS", "OMP_NUM_THREADS" or "auto"

    def describe(self) -> str:
        """One line for people, e.g. ``torch threads: 1 (profile; 2 CPUs, 1.0 busy with other work)``."""
        if self.set_by != "auto":
            return f"torch threads: {self.threads} ({self.set_by})"
        busy = "" if self.busy is None else f", {self.busy:.1f} busy with other work"
        return f"torch threads: {self.threads} ({self.kind}; {self.cpus} CPUs{busy})"


def parse_threads(text: str, name: str = ENV) -> int:
    """A thread count given as text: a whole number of 1 or more, else ``BadOption`` naming ``name``."""
    try:
        if not text.isascii():  # int() takes '٣' (3): a count here is ASCII digits
            raise ValueError(text)
        value = int(text.strip())
    except ValueError:
        raise BadOption(f"{name}={text!r}: give a whole number of threads, 1 or more (or unset it to let "
                        "probes choose from the free CPUs)") from None
    if value < 1:
        raise BadOption(f"{name}={value}: give 1 or more threads (or unset it to let probes choose from the "
                        "free CPUs)")
    return value


def override(env: Mapping[str, str], threads: int | None = None) -> tuple[int, str] | None:
    """The thread count someone asked for, and where: ``threads`` (``--threads``), ``PROBES_THREADS``
    (a bad value is an error), ``OMP_NUM_THREADS`` (ignored unless a plain whole number ≥ 1)."""
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise BadOption(f"--threads {threads!r}: give a whole number of threads, 1 or more")
        return threads, "--threads"
    if env.get(ENV, "").strip():
        return parse_threads(env[ENV]), ENV
    omp = env.get("OMP_NUM_THREADS", "").strip()
    if omp.isascii() and omp.isdigit() and int(omp) >= 1:  # ('²'.isdigit() is True, and int('²') fails)
        return int(omp), "OMP_NUM_THREADS"
    return None


def choose(kind: str, cpus: int, busy: float | None, env: Mapping[str, str] | None = None,
           threads: int | None = None) -> Choice:
    """The thread count for ``kind`` of work on ``cpus`` CPUs of which other work keeps ``busy`` busy
    (None: unknown, taken as none), unless ``threads`` or the environment ``env`` says otherwise."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of work {kind!r}: choose one of {', '.join(KINDS)}")
    if cpus < 1:
        raise ValueError(f"cpus must be 1 or more, got {cpus}")
    asked = override(env if env is not None else {}, threads)
    if asked is not None:
        return Choice(asked[0], kind, cpus, busy, asked[1])
    taken = math.ceil(max(0.0, (busy or 0.0) - SLACK))  # CPUs other work keeps busy
    free = max(1, cpus - taken)
    n = {"profile": free, "batch": free, "stream": 1, "app": min(max(1, free // 2), APP_MAX), "worker": 1}[kind]
    return Choice(n, kind, cpus, busy, "auto")


# -- measuring this machine ---------------------------------------------------------------------------

def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, capped by a cgroup (v2) CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        n = os.cpu_count() or 1
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


def _cpu_ticks(cpus: set[int] | None) -> tuple[int, int] | None:
    """(busy, total) clock ticks of the given CPUs (all when None) since boot, from /proc/stat."""
    try:
        lines = open("/proc/stat").read().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = (int(f) for f in fields[:8])
        busy += user + nice + system + irq + softirq + steal
        total += user + nice + system + idle + iowait + irq + softirq + steal
    return (busy, total) if total else None


def busy_cpus(seconds: float = SAMPLE_S) -> float | None:
    """CPUs' worth of work other than this process's on the CPUs it may use, over the next ``seconds``
    (the one-minute load average where /proc/stat cannot be read; None when neither can)."""
    try:
        mine = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        mine = None
    before, own0, t0 = _cpu_ticks(mine), os.times(), time.monotonic()
    if before is None:
        try:
            return os.getloadavg()[0]
        except (AttributeError, OSError):
            return None
    time.sleep(seconds)
    after, own1, t1 = _cpu_ticks(mine), os.times(), time.monotonic()
    if after is None:  # /proc/stat readable a moment ago, not now
        return None
    busy, total = after[0] - before[0], after[1] - before[1]
    n = len(mine) if mine else (os.cpu_count() or 1)
    if total <= 0:
        return None
    own = (own1.user + own1.system - own0.user - own0.system) / max(t1 - t0, 1e-9)
    return max(0.0, n * busy / total - own)


_seen: dict[str, float | None] = {}  # the other work measured by the first apply() of this process


def apply(kind: str, threads: int | None = None, env: Mapping[str, str] | None = None) -> Choice:
    """Choose the thread count for ``kind`` of work on this machine (see the module's docstring) and set
    it with ``torch.set_num_threads``. The machine is watched once per process (a quarter of a second,
    and not at all when an override decides), so the app may call this on every rerun. ``BadOption``
    for a bad ``threads`` or ``PROBES_THREADS``."""
    env = os.environ if env is None else env
    busy = None
    if override(env, threads) is None:
        if "busy" not in _seen:
            _seen["busy"] = busy_cpus()
        busy = _seen["busy"]
    choice = choose(kind, usable_cpus(), busy, env, threads)
    import torch

    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    return choice
