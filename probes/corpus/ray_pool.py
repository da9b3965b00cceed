"""Checkpointed chunks as a Ray Data pipeline over an actor pool: the corpus chunks (``profile --corpus``) and
the labelled probes' chunks (``profile --probe``).

Each chunk is one row of a Ray dataset: its job, pickled (any object with an ``index`` and ``__call__(model)``:
a :class:`~probes.corpus.run.CorpusJob` holds its chunk's texts (a :class:`~probes.corpus.ray_data.DatasetCorpus`,
what ``--ray`` reads), or the corpus path and where the chunk starts; a
:class:`~probes.heads.profile.ProbeJob` holds its probe's name and its items); ``map_batches`` hands the rows
one at a time to a pool of ``workers`` actors (:class:`ChunkWorker`), each of which loads the model once and
keeps it. Results stream back to the driver as they finish, in any order; the driver (``probes.corpus.run``,
``probes.heads.profile``) checkpoints each one and counts it on the progress bar. An actor that dies (its
process, or its node) is restarted and its chunk retried by Ray Data (its actor pools restart actors and retry
their tasks by default); every start of a chunk is counted by a small actor on the driver's node
(:class:`Attempts`), so a chunk that ran again is said (``notify``), and the executor yields each chunk once,
by its index, so a retried chunk is never counted twice.

On a cluster (``address``), a chunk carries its texts or items, so no node needs a shared file system; this
package must be installed on the nodes (their image, or a ``runtime_env``); the outputs are written by the
driver, on the machine that runs the command.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from typing import Any

WAIT_FOR_WORKERS_S = 600


class Attempts:
    """A Ray actor (no CPU, on the driver's node): how many times each chunk has been started. A chunk started
    a second time ran again because the worker running it was lost."""

    def __init__(self):
        self.started: dict[int, int] = {}

    def start(self, index: int) -> int:
        self.started[index] = self.started.get(index, 0) + 1
        return self.started[index]


class ChunkWorker:
    """A Ray actor: loads the model once, then runs job after job on it (each job pickled: an ``index`` and
    ``__call__(model)``), telling ``attempts`` (an :class:`Attempts` actor), if given, each chunk it starts."""

    def __init__(self, model: str, allow_local_paths: bool, device: str, threads: int, attempts=None):
        import time

        start = time.perf_counter()
        import torch

        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        torch.set_num_threads(threads)
        from ..models import load

        self.model = load(model, allow_local_paths=allow_local_paths, device=device)
        self.attempts = attempts
        self.load_seconds = time.perf_counter() - start  # imports and the model: what each worker pays once

    def attempt(self, index: int) -> int:
        """Which start of chunk ``index`` this is (1: the first); 0 when no :class:`Attempts` answers."""
        import ray

        if self.attempts is None:
            return 0
        try:
            return ray.get(self.attempts.start.remote(index), timeout=30)
        except ray.exceptions.RayError:  # the counter is lost (its node with it): nothing is claimed
            return 0

    def __call__(self, batch: dict) -> dict:
        import resource
        import time

        import ray

        indices, results, busy, attempts = [], [], [], []
        for raw in batch["job"]:
            start = time.perf_counter()
            job = pickle.loads(raw)
            attempts.append(self.attempt(job.index))
            results.append(pickle.dumps(job(self.model)))
            indices.append(job.index)
            busy.append(time.perf_counter() - start)
        n = len(indices)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux reports KiB)
        node = ray.get_runtime_context().get_node_id()
        return {"index": indices, "result": results, "peak_bytes": [peak] * n, "pid": [os.getpid()] * n,
                "busy_seconds": busy, "load_seconds": [self.load_seconds] * n, "attempt": attempts,
                "node": [node] * n}


def executor(workers: int, cpus_per_worker: int = 1, gpus_per_worker: float = 0, allow_local_paths: bool = True,
             stats: dict | None = None, notify: Callable[[str], None] | None = None):
    """An executor for :func:`probes.corpus.run.profile_corpus` and :func:`probes.heads.profile.profile`: the
    jobs on a pool of ``workers`` Ray actors (Ray must be started: :func:`probes.cluster.start`), each job's result
    yielded once
    as ``(index, result)``. ``stats`` (a dict), if given, receives by worker process id its peak memory
    (``peak_bytes``), the seconds it took to start (``load_seconds``: imports and the model), the seconds it
    spent on chunks (``busy_seconds``) and its node's id (``node``); and by chunk index, which start of
    it gave the result (``attempts``: 1 the first, 0 unknown). ``notify(message)`` is told of each chunk
    that ran again because its worker (or the worker's node) was lost."""

    def run(model, jobs) -> Iterator[tuple[int, object]]:
        if not jobs:
            return
        import ray
        import ray.data
        from ray import cloudpickle
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        device = "cuda" if gpus_per_worker else "cpu"
        # the pool starts work once every worker has loaded its model, so the chunks are spread over all of them
        # (otherwise the first worker up takes every chunk of a short run while the others still load); a
        # cluster that cannot place them all fails after this long with Ray's own message
        ray.data.DataContext.get_current().wait_for_min_actors_s = WAIT_FOR_WORKERS_S
        # on the driver's node, which lives as long as the run (soft affinity may place it on a worker's node)
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        attempts: Any = ray.remote(num_cpus=0)(Attempts).options(scheduling_strategy=here).remote()
        labels = {job.index: getattr(job, "label", "") for job in jobs}
        # cloudpickle (Ray's): a job's class travels by value where asked to (register_pickle_by_value: a class
        # made in a notebook or a test), by reference (the installed package) otherwise, and plain pickle reads it
        rows = [{"job": cloudpickle.dumps(job)} for job in jobs]
        items = ray.data.from_items(rows, override_num_blocks=len(rows))  # one chunk a block: streamed one by one
        ds = items.map_batches(
            ChunkWorker, batch_size=1, batch_format="numpy",
            fn_constructor_kwargs=dict(model=model.name, allow_local_paths=allow_local_paths, device=device,
                                       threads=cpus_per_worker, attempts=attempts),
            compute=ray.data.ActorPoolStrategy(size=min(workers, len(jobs)), max_tasks_in_flight_per_actor=2),
            num_cpus=cpus_per_worker, num_gpus=gpus_per_worker or None)
        seen: set[int] = set()
        try:
            for row in ds.iter_rows():
                index = int(row["index"])
                what = f"chunk {index}" + (f" ({labels[index]})" if labels.get(index) else "")
                if index in seen:  # a retried task that had finished already: counted once
                    if notify:
                        notify(f"Ray: {what} finished twice after its worker was lost (counted once)")
                    continue
                seen.add(index)
                if int(row["attempt"]) > 1 and notify:
                    notify(f"Ray: {what} ran again after its worker was lost (counted once)")
                if stats is not None:
                    pid = int(row["pid"])
                    stats.setdefault("peak_bytes", {})[pid] = int(row["peak_bytes"])
                    stats.setdefault("load_seconds", {})[pid] = float(row["load_seconds"])
                    stats.setdefault("node", {})[pid] = str(row["node"])
                    stats.setdefault("attempts", {})[index] = int(row["attempt"])
                    busy = stats.setdefault("busy_seconds", {})
                    busy[pid] = busy.get(pid, 0.0) + float(row["busy_seconds"])
                yield index, pickle.loads(row["result"])
        finally:
            ray.kill(attempts)

    return run
