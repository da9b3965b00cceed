"""The corpus chunks on a local Ray (2 workers): the same table and examples as one process, a resumed run
that recomputes nothing done, and a worker killed mid-run whose chunk is retried and counted once; and a labelled
probe's run (``--probe``) begun on one process and finished on Ray, or the other way round."""

import os
import signal

import pandas as pd
import pytest
import ray  # the [ray] extra, which the README's install includes: missing, this fails rather than skips

from probes import cluster
from probes.corpus import ray_pool, run as corpus_run
from probes.corpus.reader import Corpus
from probes.parity import attention_tolerance

# every test compares the tables of a Ray run and of one process; one local Ray at a time (make test's workers)
pytestmark = [pytest.mark.numeric, pytest.mark.bitwise, pytest.mark.xdist_group("ray")]

TEXTS = [f"Text {i}: the cat sat on mat {i}, and then it slept because it was tired." for i in range(24)]
# fp32 (a worker loads the model by its name): the chunks batch the same windows, but a worker sums with its own
# thread count; a probability then moves by parity's attention tolerance for rows of 32 keys (window=32),
# relative to itself (an error in exp's argument), so a statistic Σ_j w_j·a_ij ≥ 0 (w: 1, |i − j|, −log a_ij)
# by that tolerance times (1 + the statistic), and so does its mean over the queries
TOLERANCE = attention_tolerance(32)


@pytest.fixture(scope="module")
def local_ray():
    started = cluster.start(None, cpus=2)
    yield
    if started:
        ray.shutdown()


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(TEXTS) + "\n")
    return Corpus(str(path))


class Bar:
    """A progress bar that records what it was told (and may act on the first chunk)."""

    def __init__(self, total, name, on_first=None):
        self.total, self.done, self.on_first = total, 0, on_first

    def update(self, n):
        if self.done == 0 and n and self.on_first:
            self.on_first()
        self.done += n

    def close(self):
        pass


def bars_into(bars: list[Bar], on_first=None):
    """A ``progress_factory`` that makes each bar asked for (told ``on_first``) and keeps it in ``bars``."""

    def make(total, name):
        bars.append(Bar(total, name, on_first))
        return bars[-1]

    return make


def _same(a: pd.DataFrame, b: pd.DataFrame):
    keys = ["model", "label", "layer", "head"]
    a, b = a.set_index(keys).sort_index(), b.set_index(keys).sort_index()
    assert a.index.equals(b.index) and (a["n"] == b["n"]).all()
    assert ((a["score"] - b["score"]).abs().fillna(0) <= TOLERANCE * (1 + a["score"].abs())).all()


def test_ray_with_two_workers_gives_the_single_process_result(local_ray, corpus, tmp_path, minilm):
    single, ex_single = corpus_run.profile_corpus([minilm], corpus, tmp_path / "one.csv", window=32, chunk_size=4)
    bars: list[Bar] = []
    stats: dict[str, dict] = {}
    on_ray, ex_ray = corpus_run.profile_corpus(
        [minilm], corpus, tmp_path / "ray.csv", window=32, chunk_size=4, executor=ray_pool.executor(2, stats=stats),
        progress_factory=bars_into(bars))
    _same(single, on_ray)
    assert ex_single.drop(columns="weight").equals(ex_ray.drop(columns="weight"))
    assert (ex_single["weight"] - ex_ray["weight"]).abs().max() <= TOLERANCE  # probabilities
    assert (bars[0].total, bars[0].done) == (6, 6)  # chunks, counted across the workers
    assert len(stats["peak_bytes"]) == 2  # two actors did the work
    assert all(peak > 100 * 2**20 for peak in stats["peak_bytes"].values())  # each holds its own model


def test_a_ray_run_resumes_from_the_chunks_already_written(local_ray, corpus, tmp_path, minilm):
    out = tmp_path / "t.csv"

    def first_two(model, jobs):
        yield from corpus_run.in_process(model, jobs[:2])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        corpus_run.profile_corpus([minilm], corpus, out, window=32, chunk_size=4, executor=first_two)
    ran: list[int] = []
    pool = ray_pool.executor(2)

    def counting(model, jobs):
        ran.extend(job.index for job in jobs)
        yield from pool(model, jobs)

    resumed, _ = corpus_run.profile_corpus([minilm], corpus, out, window=32, chunk_size=4, executor=counting)
    assert ran == [2, 3, 4, 5]
    fresh, _ = corpus_run.profile_corpus([minilm], corpus, tmp_path / "fresh.csv", window=32, chunk_size=4)
    _same(resumed, fresh)


def test_a_killed_worker_is_replaced_and_no_chunk_is_lost_or_counted_twice(local_ray, corpus, tmp_path, minilm):
    stats: dict[str, dict] = {}
    killed: list[int] = []

    def kill_one():
        pid = next(iter(stats["peak_bytes"]))
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    bars: list[Bar] = []
    on_ray, _ = corpus_run.profile_corpus(
        [minilm], corpus, tmp_path / "t.csv", window=32, chunk_size=2, executor=ray_pool.executor(2, stats=stats),
        progress_factory=bars_into(bars, kill_one))
    assert killed and (bars[0].total, bars[0].done) == (12, 12)
    single, _ = corpus_run.profile_corpus([minilm], corpus, tmp_path / "one.csv", window=32, chunk_size=2)
    _same(single, on_ray)
    n = on_ray[on_ray.label == "entropy"]["n"].iloc[0]
    assert n == single[single.label == "entropy"]["n"].iloc[0]  # every query once: nothing lost, nothing twice


def test_a_probe_run_begun_on_one_process_finishes_on_ray_and_the_other_way_round(local_ray, tmp_path, gpt2_dir,
                                                                                   monkeypatch, one_thread):
    # one_thread: as each Ray worker, so the same sums in the same order, so the same numbers
    import probes
    from probes.heads import profile as heads_profile

    model = probes.load(str(gpt2_dir))  # a worker loads it by this name (the folder): the same weights
    data = tmp_path / "s.txt"
    data.write_text("".join(f"The cat {i} sat on the mat, and the dog watched it.\n" for i in range(12)))

    def run(out, **kw):
        return heads_profile.profile(model, ["positional"], str(data), None, out, batch_size=1, checkpoint_every=2,
                                     **kw)

    fresh = run(tmp_path / "fresh.csv")
    pool = ray_pool.executor(2)
    ran: list[int] = []
    notes: list[str] = []

    def counting(model, jobs):
        ran.extend(job.index for job in jobs)
        yield from pool(model, jobs)

    # begun here: the third chunk is interrupted; finished on Ray, which runs only the four chunks left
    chunk, calls = heads_profile.run_chunk, []

    def two_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return chunk(*args, **kwargs)

    monkeypatch.setattr(heads_profile, "run_chunk", two_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "a.csv")
    monkeypatch.setattr(heads_profile, "run_chunk", chunk)
    finished_on_ray = run(tmp_path / "a.csv", executor=counting, notify=notes.append)
    assert sorted(ran) == [2, 3, 4, 5]
    assert any("positional: resuming from" in n and "2 of 6 chunks done already" in n for n in notes)
    pd.testing.assert_frame_equal(finished_on_ray, fresh, check_exact=True)  # max |Δ| = 0

    # begun on Ray: interrupted after three chunks; finished here
    def three(model, jobs):
        done = 0
        for index, part in pool(model, jobs):
            yield index, part
            done += 1
            if done == 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b.csv", executor=three)
    assert len(list(tmp_path.glob("b.csv.partial/*/chunk-*.csv"))) == 3
    pd.testing.assert_frame_equal(run(tmp_path / "b.csv"), fresh, check_exact=True)


def _jobs():
    """Two small chunks of a probe (a job class the workers import: the package's own)."""
    from probes.heads.profile import ProbeJob

    return [ProbeJob("positional", i, [["The", "cat", str(i), "sat."]]) for i in range(2)]


def test_one_executor_keeps_its_workers_from_call_to_call(local_ray, tmp_path, minilm):
    """An evidence run scores its two halves one after the other (the second watches the heads the first chose),
    and --probe all each probe: one executor's calls run on the same workers, which load the model once (a Ray
    Data pipeline a call started and loaded them again: `--workers 1` reported 2 worker processes)."""
    from probes.evidence.probes import profile as judged_profile

    data = tmp_path / "s.txt"
    data.write_text("".join(f"The cat {i} sat on the mat, and the dog watched it.\n" for i in range(8)))
    stats: dict[str, dict] = {}
    calls: list[int] = []
    notes: list[str] = []
    pool = ray_pool.executor(1, stats=stats, notify=notes.append)

    def counting(model, jobs):
        calls.append(len(jobs))
        yield from pool(model, jobs)

    on_ray = judged_profile(minilm, ["positional", "patterns"], str(data), None, tmp_path / "ray.csv", batch_size=2,
                            checkpoint_every=2, executor=counting)
    here = judged_profile(minilm, ["positional", "patterns"], str(data), None, tmp_path / "one.csv", batch_size=2,
                          checkpoint_every=2)
    assert calls == [2, 2, 2, 2]  # two probes, two halves each
    assert len(stats["load_seconds"]) == 1  # one worker process did every chunk
    # each call numbers its chunks from 0: a chunk of the second half is not a second start of the first's
    assert notes == [] and set(stats["attempts"].values()) == {1}
    _same(on_ray, here)


def _cpus_free(expected: float = 2) -> float:
    """The module's Ray's free CPUs once they are back to ``expected`` (a killed actor's CPUs come back within a
    moment; 30 s at most)."""
    import time

    deadline = time.monotonic() + 30
    while (free := ray.available_resources().get("CPU", 0)) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return free


def test_a_model_the_workers_cannot_load_is_its_own_error_and_frees_them(local_ray, tmp_path):
    """A model the driver loaded that a worker cannot (a folder the worker's node lacks, a hub name offline): the
    load's own error, not an actor that died; the pool's CPUs are free again for the next run."""
    from probes.errors import ModelUnavailable

    missing = tmp_path / "gone"
    missing.mkdir()
    elsewhere = type("Named", (), {"name": str(missing)})()  # what the executor reads of the driver's model
    with pytest.raises(ModelUnavailable, match="gone"):
        list(ray_pool.executor(2)(elsewhere, _jobs()))
    assert _cpus_free() == 2


def test_workers_a_cluster_cannot_place_are_one_line_after_the_wait(local_ray, monkeypatch, minilm):
    """More CPUs a worker than the cluster has: refused with what to ask for once the wait for workers is over (600 s;
    1 s here), and no worker is left waiting for a place."""
    from probes.errors import RayUnavailable

    monkeypatch.setattr(ray_pool, "WAIT_FOR_WORKERS_S", 1)
    with pytest.raises(RayUnavailable, match=r"could not start 2 worker\(s\) of 2 CPU\(s\) each in 1 s \(the "
                                             r"cluster has 2 CPU\(s\)\): ask for fewer"):
        list(ray_pool.executor(2, cpus_per_worker=2)(minilm, _jobs()))
    assert _cpus_free() == 2  # the one placed is stopped, the other no longer waits for a place
