"""The corpus chunks as a Ray Data pipeline over an actor pool.

Each chunk is one row of a Ray dataset (its :class:`~probes.corpus.run.CorpusJob`, pickled: the corpus path
and where the chunk starts, not its texts); ``map_batches`` hands the rows one at a time to a pool of
``workers`` actors (:class:`ChunkWorker`), each of which loads the model once and keeps it. Results stream
back to the driver as they finish, in any order; the driver (``probes.corpus.run``) checkpoints each one
and counts it on the progress bar. An actor that dies is restarted and its chunk retried by Ray Data (its
actor pools restart actors and retry their tasks by default); the driver writes a chunk once, by its index,
so a retried chunk is never counted twice.

On a cluster (``address``), every node reads the corpus at the same path (a shared file system, or the
same file copied to each node), and this package must be installed on the nodes (their image, or a
``runtime_env``); the outputs are written by the driver, on the machine that runs the command.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import RayUnavailable


WAIT_FOR_WORKERS_S = 600


class ChunkWorker:
    """A Ray actor: loads the model once, then runs chunk after chunk on it."""

    def __init__(self, model: str, allow_local_paths: bool, device: str, threads: int):
        import time

        start = time.perf_counter()
        import torch

        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        torch.set_num_threads(threads)
        from ..models import load

        self.model = load(model, allow_local_paths=allow_local_paths, device=device)
        self.load_seconds = time.perf_counter() - start  # imports and the model: what each worker pays once

    def __call__(self, batch: dict) -> dict:
        import resource
        import time

        indices, results, busy = [], [], []
        for raw in batch["job"]:
            start = time.perf_counter()
            job = pickle.loads(raw)
            results.append(pickle.dumps(job(self.model)))
            indices.append(job.index)
            busy.append(time.perf_counter() - start)
        n = len(indices)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux reports KiB)
        return {"index": indices, "result": results, "peak_bytes": [peak] * n, "pid": [os.getpid()] * n,
                "busy_seconds": busy, "load_seconds": [self.load_seconds] * n}


CONNECT_TIMEOUT_S = 3.0  # a head's GCS port answers at once; more is a firewall or no cluster
HTTP2_OPENING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # preface, SETTINGS
_OR_NOT = "give --ray alone to start a local Ray for this run, or leave --ray out to run on this process"
_WHAT_TO_DO = f"give the address of a running Ray head (HOST:6379, which `ray start --head` prints), {_OR_NOT}"


def check_address(address: str) -> str:
    """The GCS address (``host:port``) that ``address`` (``auto`` or ``host:port``; ``ray://`` is refused)
    names, once it has answered a plain TCP connect and HTTP/2's opening (as a GCS, a gRPC server, does) within
    :data:`CONNECT_TIMEOUT_S`; :class:`~probes.errors.RayUnavailable` (what was tried, what to do) otherwise.
    Ray itself would wait on an address that does not answer until killed."""
    import socket

    source, gcs = f"--ray {address}", address
    if address == "auto":  # what ray.init("auto") would join: RAY_ADDRESS, else the Ray last started here
        env = os.environ.get("RAY_ADDRESS", "")
        if env and env != "auto":
            source, gcs = f"--ray auto (RAY_ADDRESS={env})", env
        else:
            # where `ray start` notes the cluster it started ($RAY_TMPDIR/ray, /tmp/ray by default), as ray.init reads it
            noted = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray" / "ray_current_cluster"
            try:
                gcs = noted.read_text().strip().splitlines()[0]
            except (OSError, IndexError):
                raise RayUnavailable("--ray auto: no running Ray cluster was found on this machine; start one with "
                                     f"`ray start --head`, {_OR_NOT}") from None
            source = f"--ray auto (the Ray found on this machine, at {gcs})"  # ray start's note
    if gcs.startswith("ray://"):
        # Ray Data's pipelines do not run through Ray Client (Ray 2.60: "'Worker' object has no attribute
        # 'core_worker'" once the pool starts), so ray:// is refused whether or not ray[client] is installed
        raise RayUnavailable(f"{source}: Ray Data does not run through Ray Client (ray:// addresses); run the "
                             "command on a node of the cluster with --ray auto, or give the head's plain address "
                             "(--ray HEAD:6379)")
    host, _, port = gcs.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not host or not port.isdigit():
        raise RayUnavailable(f"{source}: give the Ray head's address as HOST:PORT (its GCS port, 6379 unless "
                             "changed), or auto on a node of the cluster")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S) as connection:
            if not os.environ.get("RAY_USE_TLS"):
                # a GCS is a gRPC server: to HTTP/2's opening it answers with its settings at once (a port that
                # accepts and stays silent, or is not HTTP/2, would keep ray.init waiting until killed)
                connection.sendall(HTTP2_OPENING)
                if connection.recv(9)[3:4] != b"\x04":  # a frame header: 3 bytes of length, then its type
                    raise RayUnavailable(f"{source}: {host}:{port} accepts connections but is not a Ray head's "
                                         f"GCS port: {_WHAT_TO_DO}")
    except OSError as e:
        why = (f"no answer within {CONNECT_TIMEOUT_S:g} s" if isinstance(e, TimeoutError)
               else (e.strerror or str(e) or type(e).__name__).lower())
        raise RayUnavailable(f"{source}: nothing answers at {host}:{port} ({why}): {_WHAT_TO_DO}") from None
    return gcs


def start(address: str | None, cpus: int | None = None) -> bool:
    """Connect to the Ray cluster at ``address``, or start a local one (``cpus`` of this machine's CPUs);
    True when this call started it (and so should shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    import logging

    for name in ("ray", "ray.data"):  # the command speaks for itself: Ray's own info lines only on errors
        logging.getLogger(name).setLevel(logging.ERROR)
    # Ray's C++ side logs an error line for every Ray Data actor ("constructor arguments in the object store
    # and max_restarts > 0", ray-project/ray#53727: Ray Data's own arguments; restarts work, tested); fatal
    # only, it says one line instead, that it set the level
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    if address:
        gcs = check_address(address)  # before ray.init, which waits on an address that does not answer
        try:
            ray.init(address=gcs, **options)
        except (ConnectionError, TimeoutError) as e:  # a gRPC server that would not take this driver
            raise RayUnavailable(f"--ray {address}: could not join the Ray cluster at {gcs} "
                                 f"({str(e).splitlines()[0] if str(e) else type(e).__name__}): {_WHAT_TO_DO}") from None
    else:  # "local": a new Ray for this run, even where RAY_ADDRESS names a cluster
        ray.init(address="local", num_cpus=cpus or os.cpu_count(), **options)
    import ray.data

    for name in ("ray", "ray.data"):  # again: importing ray.data sets its own level
        logging.getLogger(name).setLevel(logging.ERROR)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # the command has its own bar, counting chunks
    ctx.print_on_execution_start = False
    return True


def executor(workers: int, cpus_per_worker: int = 1, gpus_per_worker: float = 0, allow_local_paths: bool = True,
             stats: dict | None = None):
    """An executor for :func:`probes.corpus.run.profile_corpus`: the jobs on a pool of ``workers`` Ray
    actors (Ray must be started: :func:`start`). ``stats`` (a dict), if given, receives by worker process id
    its peak memory (``peak_bytes``), the seconds it took to start (``load_seconds``: imports and the model)
    and the seconds it spent on chunks (``busy_seconds``)."""

    def run(model, jobs) -> Iterator[tuple[int, tuple]]:
        if not jobs:
            return
        import ray.data

        device = "cuda" if gpus_per_worker else "cpu"
        # the pool starts work once every worker has loaded its model, so the chunks are spread over all of them
        # (otherwise the first worker up takes every chunk of a short run while the others still load); a
        # cluster that cannot place them all fails after this long with Ray's own message
        ray.data.DataContext.get_current().wait_for_min_actors_s = WAIT_FOR_WORKERS_S
        rows = [{"job": pickle.dumps(job)} for job in jobs]
        ds = ray.data.from_items(rows, override_num_blocks=len(rows))  # one chunk a block: streamed one by one
        ds = ds.map_batches(
            ChunkWorker, batch_size=1, batch_format="numpy",
            fn_constructor_kwargs=dict(model=model.name, allow_local_paths=allow_local_paths, device=device,
                                       threads=cpus_per_worker),
            compute=ray.data.ActorPoolStrategy(size=min(workers, len(jobs)), max_tasks_in_flight_per_actor=2),
            num_cpus=cpus_per_worker, num_gpus=gpus_per_worker or None)
        for row in ds.iter_rows():
            if stats is not None:
                pid = int(row["pid"])
                stats.setdefault("peak_bytes", {})[pid] = int(row["peak_bytes"])
                stats.setdefault("load_seconds", {})[pid] = float(row["load_seconds"])
                busy = stats.setdefault("busy_seconds", {})
                busy[pid] = busy.get(pid, 0.0) + float(row["busy_seconds"])
            yield int(row["index"]), pickle.loads(row["result"])

    return run
