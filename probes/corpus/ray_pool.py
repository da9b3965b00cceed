"""Checkpointed chunks on a pool of Ray actors: the corpus chunks (``profile --corpus``) and the labelled probes'
chunks (``profile --probe``).

Each chunk is a job (any picklable object with an ``index`` and ``__call__(model)``: a
:class:`~probes.corpus.run.CorpusJob` holds its chunk's texts (a :class:`~probes.corpus.ray_data.DatasetCorpus`,
what ``--ray`` reads), or the corpus path and where the chunk starts; a :class:`~probes.heads.profile.ProbeJob`
holds its probe's name and its items). An executor keeps a pool of ``workers`` actors (:class:`ChunkWorker`), each
of which loads the model once and keeps it, from its first chunks to the end of the run: both halves of an evidence
run and every probe of ``--probe all`` run on the same workers (a pipeline a call, as Ray Data's actor pools are,
started and loaded the workers again each time, a model's load on every node of a cluster: docs/corpus.md, "On
Ray", says what that cost). Each actor has two chunks in hand, so the next is there when one ends; results come back
to the driver as they finish, in any order; the driver (``probes.corpus.run``, ``probes.heads.profile``) checkpoints
each one and counts it on the progress bar. An actor that dies (its process, or its node) is restarted by Ray, and the
chunks it held run again on it (``max_restarts``, ``max_task_retries``); every start of a chunk is counted by a
small actor on the driver's node (:class:`Attempts`), so a chunk that ran again is said (``notify``), and the
executor yields each chunk once, by its index, so a retried chunk is never counted twice.

On a cluster (``address``), a chunk carries its texts or items, so no node needs a shared file system; this
package must be installed on the nodes (their image, or a ``runtime_env``); the outputs are written by the
driver, on the machine that runs the command.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

WAIT_FOR_WORKERS_S = 600


class Attempts:
    """A Ray actor (no CPU, on the driver's node): how many times each chunk has been started, by the executor's
    call and the chunk's index (each call numbers its chunks from 0: an evidence run's second half is a call of its
    own). A chunk started a second time ran again because the worker running it was lost."""

    def __init__(self):
        self.started: dict[tuple[int, int], int] = {}

    def start(self, key: tuple[int, int]) -> int:
        self.started[key] = self.started.get(key, 0) + 1
        return self.started[key]


class ChunkWorker:
    """A Ray actor: loads the model once, then runs job after job on it (:meth:`work`), telling ``attempts`` (an
    :class:`Attempts` actor), if given, each chunk it starts. A model it cannot load is said by :meth:`ready` as the
    error itself (an error in an actor's constructor would reach the driver as an actor that died)."""

    def __init__(self, model: str, allow_local_paths: bool, device: str, threads: int, attempts=None):
        import time

        start = time.perf_counter()
        self.model: Any = None
        self.error: Exception | None = None
        try:
            import torch

            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            torch.set_num_threads(threads)
            from ..models import load

            self.model = load(model, allow_local_paths=allow_local_paths, device=device)
        except Exception as exc:  # noqa: BLE001 - said by ready(), as itself
            self.error = exc
        self.attempts = attempts
        self.load_seconds = time.perf_counter() - start  # imports and the model: what each worker pays once

    def ready(self) -> int:
        """This worker's process id, once its model is loaded; the load's own error, if it failed."""
        if self.error is not None:
            raise self.error
        return os.getpid()

    def attempt(self, call: int, index: int) -> int:
        """Which start of the executor's call ``call``'s chunk ``index`` this is (1: the first); 0 when no
        :class:`Attempts` answers."""
        import ray

        if self.attempts is None:
            return 0
        try:
            return ray.get(self.attempts.start.remote((call, index)), timeout=30)
        except ray.exceptions.RayError:  # the counter is lost (its node with it): nothing is claimed
            return 0

    def work(self, job, call: int) -> dict:
        """One job (of the executor's call ``call``) on the model: its result, with what the driver's ``stats`` and
        notes are made of."""
        import resource
        import time

        import ray

        start = time.perf_counter()
        attempt = self.attempt(call, job.index)
        result = job(self.model)
        return {"index": job.index, "result": result, "attempt": attempt, "pid": os.getpid(),
                "busy_seconds": time.perf_counter() - start, "load_seconds": self.load_seconds,
                "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # (Linux reports KiB)
                "node": ray.get_runtime_context().get_node_id()}


IN_HAND = 2  # chunks sent to each worker at a time: the next is there when one ends
_POOLS: weakref.WeakSet = weakref.WeakSet()  # every executor's pool not dropped yet (close_all)


def close_all() -> None:
    """Stop the workers of every executor of this process (a test's teardown: an executor a failed test's traceback
    still holds would keep its workers, and their CPUs, from the next test)."""
    for pool in list(_POOLS):
        pool.close()


class _Pool:
    """The actors of one executor, for one model at a time (another model's chunks replace them): started at the
    first chunks, grown when a later call has more chunks than workers, stopped by :meth:`close`."""

    def __init__(self, cpus_per_worker: int, gpus_per_worker: float, allow_local_paths: bool):
        self.cpus, self.gpus, self.allow_local_paths = cpus_per_worker, gpus_per_worker, allow_local_paths
        self.model: str | None = None
        self.actors: list = []
        self.attempts: Any = None
        self.job: Any = None  # the Ray driver they were started by: after a new ray.init, they are gone
        self.calls = 0  # the executor's calls so far: each call's chunks are counted apart (Attempts)
        _POOLS.add(self)

    def workers(self, model: str, wanted: int) -> list:
        """At least ``wanted`` workers holding ``model``, each loaded (every one up before any chunk is sent, so the
        chunks are spread over all of them)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        job = ray.get_runtime_context().get_job_id()
        if job != self.job:  # Ray was shut down and started again: the workers went with the old driver
            self.actors, self.attempts, self.model, self.job = [], None, None, job
        if model != self.model:
            self.close()
            self.model = model
        if self.attempts is None:  # on the driver's node, which lives as long as the run (soft affinity may place
            # it on a worker's node)
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self.attempts = ray.remote(num_cpus=0)(Attempts).options(scheduling_strategy=here).remote()
        # a worker that dies is started again and the chunks it held are sent to it again, as often as it takes
        worker: Any = ray.remote(max_restarts=-1, max_task_retries=-1)(ChunkWorker).options(
            num_cpus=self.cpus, num_gpus=self.gpus or None)
        new = [worker.remote(model, self.allow_local_paths, "cuda" if self.gpus else "cpu", self.cpus, self.attempts)
               for _ in range(wanted - len(self.actors))]
        self.actors += new
        if new:
            ready = [actor.ready.remote() for actor in new]
            up, _ = ray.wait(ready, num_returns=len(ready), timeout=WAIT_FOR_WORKERS_S)
            try:
                ray.get(up)  # a model a worker cannot load: its own error
            except Exception:
                self.close()
                raise
            if len(up) < len(ready):
                from ..errors import RayUnavailable

                total = ray.cluster_resources()
                self.close()
                raise RayUnavailable(
                    f"Ray could not start {len(ready)} worker(s) of {self.cpus} CPU(s)"
                    + (f" and {self.gpus} GPU(s)" if self.gpus else "")
                    + f" each in {WAIT_FOR_WORKERS_S} s (the cluster has {total.get('CPU', 0):g} CPU(s)"
                    + (f", {total.get('GPU', 0):g} GPU(s)" if self.gpus else "")
                    + "): ask for fewer (--workers, --cpus-per-worker, --gpus-per-worker) or add nodes")
        return self.actors

    def close(self) -> None:
        """Stop the workers and the counter (their CPUs are free again)."""
        held, self.actors, self.attempts, self.model = [*self.actors, self.attempts], [], None, None
        ray = sys.modules.get("ray")  # (at exit, or after ray.shutdown(): nothing of Ray's left to stop)
        if ray is None or not ray.is_initialized():
            return
        for actor in held:
            if actor is not None:
                try:
                    ray.kill(actor)
                except Exception:  # noqa: BLE001 - the actor is gone already
                    pass


def executor(workers: int, cpus_per_worker: int = 1, gpus_per_worker: float = 0, allow_local_paths: bool = True,
             stats: dict | None = None, notify: Callable[[str], None] | None = None):
    """An executor for :func:`probes.corpus.run.profile_corpus` and :func:`probes.heads.profile.profile`: the
    jobs on a pool of up to ``workers`` Ray actors (Ray must be started: :func:`probes.cluster.start`), kept from
    one call to the next until ``executor.close()`` (or until the executor is dropped), each job's result yielded
    once as ``(index, result)``. ``stats`` (a dict), if given, receives by worker process id its peak memory
    (``peak_bytes``), the seconds it took to start (``load_seconds``: imports and the model), the seconds it
    spent on chunks (``busy_seconds``) and its node's id (``node``); and by chunk index, which start of
    it gave the result (``attempts``: 1 the first, 0 unknown). ``notify(message)`` is told of each chunk
    that ran again because its worker (or the worker's node) was lost."""
    pool = _Pool(cpus_per_worker, gpus_per_worker, allow_local_paths)

    def execute(model, jobs) -> Iterator[tuple[int, object]]:
        if not jobs:
            return
        import ray

        actors = pool.workers(model.name, min(workers, len(jobs)))
        pool.calls += 1
        call = pool.calls
        labels = {job.index: getattr(job, "label", "") for job in jobs}
        waiting, held = deque(jobs), {}  # held: a chunk's result (its object ref) -> the worker running it

        def send(actor) -> None:
            if waiting:
                held[actor.work.remote(waiting.popleft(), call)] = actor

        for _ in range(IN_HAND):
            for actor in actors:
                send(actor)
        seen: set[int] = set()
        try:
            while held:
                (ref,), _ = ray.wait(list(held), num_returns=1)
                send(held.pop(ref))
                row = ray.get(ref)  # a job's own error is raised here as itself
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
                yield index, row["result"]
        finally:
            for ref in held:  # a run stopped part way (an error, Ctrl-C): the chunks still queued are dropped
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - finished meanwhile, or Ray is gone
                    pass

    execute.close = pool.close  # type: ignore[attr-defined]
    weakref.finalize(execute, pool.close)  # an executor dropped without close(): its workers stop with it
    return execute
