"""Work computed once for every session on its own thread (a question's evidence, a tour finding's work): runs that
ask for it at once share one computation and its progress, its error reaches each of them, a stopped computation
keeps nothing, a run that ends while it waits leaves it going unless the caller's rule says otherwise, and the last
few results are kept. Real threads; every wait is on an Event."""

from __future__ import annotations

import threading

import pytest

from dashboard.core.shared_work import SharedWork, Stopped


class Gated:
    """A computation that reports its first item, then holds until released, then reports its last and returns its
    key; it counts how many times it ran."""

    def __init__(self, result: object = "result") -> None:
        self.result, self.runs = result, 0
        self.threads: list[str] = []
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, step) -> object:
        self.runs += 1
        self.threads.append(threading.current_thread().name)
        step(1, 2)
        self.started.set()
        assert self.release.wait(60)
        step(2, 2)  # (a stopped job raises Stopped here)
        return self.result


class Click(Exception):
    """Stands for Streamlit's rerun: a run that ends so that the next run waits for the same work."""


class Gone(Exception):
    """Stands for a closed tab or a time bound: nobody waits any more."""


def _stops(exc: BaseException) -> bool:
    return not isinstance(exc, Click)


def _in_thread(target) -> tuple[threading.Thread, list]:
    got: list = []

    def run() -> None:
        try:
            got.append(target())
        except Exception as exc:  # noqa: BLE001 - what the waiter got
            got.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, got


def test_two_runs_asking_for_one_key_share_one_computation():
    work, compute, another = SharedWork("test-work", 4), Gated({"heads": 12}), Gated("another")
    first, got_first = _in_thread(lambda: work.get("k", lambda: work.start("k", compute)))
    assert compute.started.wait(60)
    second, got_second = _in_thread(lambda: work.get("k", lambda: work.start("k", another)))
    job = work.running("k")
    assert job is not None and work.start("k", another) is job  # a second start while it runs: the same job
    compute.release.set()
    first.join(60)
    second.join(60)
    assert got_first == got_second == [{"heads": 12}]
    assert (compute.runs, another.runs) == (1, 0) and compute.threads == ["test-work"]
    assert "k" in work and work.kept("k") == {"heads": 12}
    assert work.get("k", lambda: pytest.fail("kept: nothing is started")) == {"heads": 12}


def test_progress_reaches_the_waiting_run():
    work, compute = SharedWork("test-work", 4), Gated()
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if (done, total) == (1, 2):
            compute.release.set()  # the run has seen the first item: let the work finish

    assert work.get("k", lambda: work.start("k", compute), progress) == "result"
    assert (1, 2) in seen and set(seen) <= {(0, 0), (1, 2), (2, 2)}


def test_a_stopped_computation_keeps_nothing_and_the_next_start_computes_anew():
    work, compute = SharedWork("test-work", 4), Gated()
    job = work.start("k", compute)
    assert compute.started.wait(60)
    work.stop("k")  # a Cancel button
    assert work.running("k") is None  # (it ends at its next item: a run asking now starts the key anew)
    compute.release.set()
    with pytest.raises(Stopped):
        work.wait(job)
    assert "k" not in work and work.kept("k") is None
    again = Gated("again")
    again.release.set()
    assert work.get("k", lambda: work.start("k", again)) == "again"
    assert (compute.runs, again.runs) == (1, 1) and work.kept("k") == "again"


def test_an_error_reaches_every_run_waiting_and_nothing_is_kept():
    work, started, release = SharedWork("test-work", 4), threading.Event(), threading.Event()

    def failing(step) -> object:
        started.set()
        assert release.wait(60)
        raise ValueError("no such head: 13.0")

    job = work.start("k", failing)
    assert started.wait(60)
    waiters = [_in_thread(lambda: work.wait(job)) for _ in range(2)]
    release.set()
    for thread, _ in waiters:
        thread.join(60)
    for _, got in waiters:
        assert len(got) == 1 and isinstance(got[0], ValueError) and str(got[0]) == "no such head: 13.0"
    assert "k" not in work


def test_the_oldest_result_is_dropped_past_the_bound_and_asking_for_one_keeps_it_longer():
    work = SharedWork("test-work", 2)

    def computed(key: str) -> str:
        return work.get(key, lambda: work.start(key, lambda step: f"result of {key}"))

    computed("a")
    computed("b")
    assert work.kept("a", touch=True) == "result of a"  # asked again: now the most recent
    computed("c")
    assert ("a" in work, "b" in work, "c" in work) == (True, False, True)
    computed("d")
    assert [key for key in "abcd" if key in work] == ["c", "d"]


def _left(work: SharedWork, compute: Gated, why: type[Exception]):
    """The work started, then its only waiting run ended by ``why`` (raised from its progress callback)."""

    def ended(done: int, total: int) -> None:
        raise why

    job = work.start("k", compute)
    assert compute.started.wait(60)
    with pytest.raises(why):
        work.wait(job, ended, stops=_stops)
    compute.release.set()
    return job


def test_a_run_that_ends_by_a_click_leaves_the_work_going_for_the_next_run():
    work, compute = SharedWork("test-work", 4), Gated()
    _left(work, compute, Click)
    assert work.get("k", lambda: work.start("k", Gated("another")), stops=_stops) == "result"  # the next run
    assert compute.runs == 1


def test_the_only_run_waiting_stops_the_work_when_the_callers_rule_says_so():
    work = SharedWork("test-work", 4)
    job = _left(work, Gated(), Gone)
    with pytest.raises(Stopped):
        work.wait(job)
    assert "k" not in work


def test_a_run_that_goes_leaves_the_work_going_while_another_run_waits_for_it():
    work, compute, waiting = SharedWork("test-work", 4), Gated(), threading.Event()

    def patient(done: int, total: int) -> None:
        waiting.set()

    def gone(done: int, total: int) -> None:
        raise Gone

    job = work.start("k", compute)
    other, got = _in_thread(lambda: work.wait(job, patient, stops=_stops))
    assert waiting.wait(60)
    with pytest.raises(Gone):
        work.wait(job, gone, stops=_stops)
    compute.release.set()
    other.join(60)
    assert got == ["result"] and work.kept("k") == "result"


def test_a_store_that_keeps_nothing_is_refused():
    with pytest.raises(ValueError, match="keep at least 1"):
        SharedWork("test-work", 0)
