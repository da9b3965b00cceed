"""Work the app computes once for every session, on a thread of its own: a question's evidence
(:mod:`dashboard.core.questions`), a tour finding's work (the Start page). A run that asks for it while it is
computed waits for the same computation, a run that ends while it waits (a click) can leave it going for the next,
and the last few results are kept for every session. Nothing here draws; what stops a computation when its waiter
goes is the caller's rule (``stops``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

Progress = Callable[[int, int], None]


class Stopped(Exception):
    """The computation was stopped (a Cancel, or nobody waits any more): nothing of it is kept."""


class Job:
    """One computation on its own thread: every run that asks for it waits on this one, and its items run so far,
    for their progress bars."""

    def __init__(self) -> None:
        self.done, self.total, self.waiting, self.stop = 0, 0, 0, False
        self.finished = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def step(self, done: int, total: int) -> None:
        """The computation's progress callback: it ends the library's loop at its next item once stopped."""
        if self.stop:
            raise Stopped
        self.done, self.total = done, total


class SharedWork:
    """Computations by key, each run once on a daemon thread named ``name`` however many runs ask for it while it
    runs, and the last ``keep`` results (the least recently asked dropped first)."""

    def __init__(self, name: str, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"SharedWork {name!r} keeps {keep} results: keep at least 1")
        self.name, self.keep = name, keep
        self._lock = threading.Lock()
        self._running: dict[Hashable, Job] = {}
        self._kept: OrderedDict[Hashable, Any] = OrderedDict()

    def __contains__(self, key: Hashable) -> bool:
        """Whether the key's result is kept (a page draws no progress bar then)."""
        with self._lock:
            return key in self._kept

    def kept(self, key: Hashable, touch: bool = False) -> Any:
        """The key's result if it is kept, else None: nothing is computed. ``touch``: it is now the most recently
        asked (the last to be dropped)."""
        with self._lock:
            if touch and key in self._kept:
                self._kept.move_to_end(key)
            return self._kept.get(key)

    def running(self, key: Hashable) -> Job | None:
        """The job computing the key now, unless it was stopped (a stopped one ends at its next item)."""
        with self._lock:
            job = self._running.get(key)
        return None if job is None or job.stop else job

    def stop(self, key: Hashable) -> None:
        """Stop computing the key, if it is computed (a Cancel button): nothing of it is kept."""
        with self._lock:
            job = self._running.get(key)
        if job is not None:
            job.stop = True

    def start(self, key: Hashable, compute: Callable[[Progress], Any]) -> Job:
        """Start ``compute(progress)`` for the key on its own thread; the job already computing it (or one holding
        its kept result) when there is one. ``compute`` reads nothing of the run that starts it: gather what it
        needs (the app's cached models, an upload) before."""
        with self._lock:
            if (job := self._running.get(key)) is not None and not job.stop:  # another run started it meanwhile
                return job
            job = Job()
            if key in self._kept:  # (finished since the caller looked)
                job.result = self._kept[key]
                job.finished.set()
                return job
            self._running[key] = job

        def work() -> None:
            try:
                result = compute(job.step)
                with self._lock:
                    self._kept[key] = result
                    self._kept.move_to_end(key)
                    while len(self._kept) > self.keep:
                        self._kept.popitem(last=False)
                job.result = result
            except Exception as exc:  # noqa: BLE001 - raised in every run that waits on it (a stop: nothing kept)
                job.error = exc
            finally:
                with self._lock:
                    if self._running.get(key) is job:
                        del self._running[key]
                job.finished.set()

        threading.Thread(target=work, name=self.name, daemon=True).start()
        return job

    def wait(self, job: Job, progress: Progress | None = None,
             stops: Callable[[BaseException], bool] | None = None) -> Any:
        """The job's result once it is finished (its error raised here, in every run that waits on it), with
        ``progress(done, total)`` meanwhile. An exception in the wait (``progress``'s own: a click, a closed tab, a
        time bound) is raised; it stops the job too when ``stops(exc)`` is true and no other run waits on it (with
        no ``stops``, the job always goes on for the next run)."""
        with self._lock:
            job.waiting += 1
        try:
            while not job.finished.wait(0.1):
                if progress is not None:
                    progress(job.done, job.total)
        except BaseException as exc:
            if stops is not None and stops(exc):
                with self._lock:
                    if job.waiting == 1:
                        job.stop = True
            raise
        finally:
            with self._lock:
                job.waiting -= 1
        if job.error is not None:
            raise job.error
        return job.result

    def get(self, key: Hashable, start: Callable[[], Job], progress: Progress | None = None,
            stops: Callable[[BaseException], bool] | None = None) -> Any:
        """The key's result: kept (now the most recently asked), else computed, waiting for the job that computes
        it (``start()`` starts one, in this run, where none is running: see :meth:`start`); ``progress`` and
        ``stops`` as in :meth:`wait`."""
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        return self.wait(self.running(key) or start(), progress, stops)
