"""Corpus and probe runs over a multi-node Ray on this machine (``ray.cluster_utils.Cluster``: a head with no CPU
for work and two worker nodes of one CPU, each its own processes): the same tables and top examples as one
process, a worker node killed mid-run, and a driver killed and rerun."""

import os
import signal
import sys
import time

import pandas as pd
import pytest
import ray
from processes import killed_after_chunks
from ray import cloudpickle
from ray.cluster_utils import Cluster

import probes
from probes import cli, cluster as ray_cluster
from probes.corpus import ray_pool, run as corpus_run
from probes.corpus.reader import Corpus
from probes.evidence.probes import profile as judged_profile
from probes.heads.profile import profile

# one Ray at a time (make test's workers); every test compares a Ray run with one process: exactly (both run the
# same chunks in the same batches on one thread, so their sums run in one order)
pytestmark = [pytest.mark.numeric, pytest.mark.bitwise, pytest.mark.xdist_group("ray")]

SENTENCES = [f"The cat {i} sat on the mat, and the dog watched it from the door." for i in range(30)]


# a node is declared dead after this many missed health checks this far apart: 1 s instead of Ray's 15 s (3 s x 5),
# which the node-kill test spent waiting before Ray restarted the lost worker (a setting of the cluster, not of this
# code: what is proven is that no chunk is lost or counted twice whenever the loss is seen)
NODE_DEATH_SEEN = {"health_check_period_ms": 250, "health_check_failure_threshold": 4}


@pytest.fixture(scope="module")
def cluster():
    """A head (no CPU: it schedules, the workers work) and two worker nodes; this module's driver joins it."""
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": NODE_DEATH_SEEN})
    try:
        nodes = [made.add_node(num_cpus=1) for _ in range(2)]
        made.wait_for_nodes()
        assert ray_cluster.start(made.address)  # the command's own way in: check_address, then ray.init
        yield made, nodes
    finally:
        ray.shutdown()
        made.shutdown()


@pytest.fixture(scope="module")
def gpt2(gpt2_dir):
    return probes.load(str(gpt2_dir))  # a worker loads it by this name (the folder): the same weights


@pytest.fixture()
def data(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("\n".join(SENTENCES) + "\n")
    return path


FEW = 10  # texts of the driver-kill test: a chunk each (the rerun's chunks are most of its time)


class Bar:
    """A progress bar that records what it was told, and may act once the first chunk is in."""

    def __init__(self, total, on_first=None):
        self.total, self.done, self.on_first = total, 0, on_first

    def update(self, n):
        self.done += n
        if n and self.on_first:
            self.on_first, act = None, self.on_first
            act()

    def close(self):
        pass


def bars_into(bars: list[Bar], on_first=None):
    """A ``progress_factory`` that makes each bar asked for (told ``on_first``) and keeps it in ``bars``."""

    def make(total, name):
        bars.append(Bar(total, on_first))
        return bars[-1]

    return make


class Slow:
    """A job that takes half a second longer (sent by value: the workers do not import the tests). With ``hold`` (a
    folder), a chunk beyond each worker's first (``index >= HELD_FROM``) marks its start (``started-<index>``, after the
    worker counted it) and waits on its first run until the file ``released`` is there: the node killed once both
    are marked is in the middle of a chunk whose start was counted, however early or late the driver sees the first
    chunk (on a busy machine the kill came before the worker had counted its next chunk, or after it had finished
    its chunks in hand, and nothing was said to run again). A chunk run again does not wait (its mark is there)."""

    def __init__(self, job, hold: str | None = None):
        self.job, self.index, self.label, self.hold = job, job.index, job.label, hold

    def __call__(self, model):
        if self.hold is not None:
            mark = os.path.join(self.hold, f"started-{self.index}")
            first = not os.path.exists(mark)
            open(mark, "a").close()
            released = os.path.join(self.hold, "released")
            waited = 0.0
            while first and self.index >= HELD_FROM and not os.path.exists(released) and waited < HOLD_AT_MOST_S:
                time.sleep(0.05)
                waited += 0.05
        time.sleep(0.5)
        return self.job(model)


HELD_FROM = 2  # the chunks of the second round (each of the two workers is sent chunks 0/1, then 2/3: ray_pool.IN_HAND)
HOLD_AT_MOST_S = 120.0  # a guard against a hang, should the test never release them


def slowly(pool, hold=None):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return lambda model, jobs: pool(model, [Slow(job, None if hold is None else str(hold)) for job in jobs])


def _probe_run(model, data, out, every=5, **kw):
    return profile(model, ["positional"], str(data), None, out, batch_size=1, checkpoint_every=every, **kw)


def test_a_corpus_run_over_two_nodes_equals_one_process(cluster, gpt2, data, tmp_path, one_thread):
    """(A probe run over two nodes: the node-kill test below, whose run is the same table as one process's.)"""
    _, nodes = cluster
    corpus = Corpus(str(data))
    single, ex_single = corpus_run.profile_corpus([gpt2], corpus, tmp_path / "one.csv", window=32, chunk_size=5)
    stats: dict[str, dict] = {}
    bars: list[Bar] = []
    on_ray, ex_ray = corpus_run.profile_corpus(
        [gpt2], corpus, tmp_path / "ray.csv", window=32, chunk_size=5, executor=ray_pool.executor(2, stats=stats),
        progress_factory=bars_into(bars))
    assert set(stats["node"].values()) == {n.node_id for n in nodes}  # both worker nodes did chunks
    assert (bars[0].total, bars[0].done) == (6, 6)
    pd.testing.assert_frame_equal(on_ray, single, check_exact=True)  # max |Δ| = 0
    pd.testing.assert_frame_equal(ex_ray, ex_single, check_exact=True)


def test_a_driver_killed_mid_run_resumes_from_its_checkpoints(cluster, gpt2, data, tmp_path, one_thread, capsys):
    made, _ = cluster
    data.write_text("\n".join(SENTENCES[:FEW]) + "\n")
    out = tmp_path / "t.csv"
    args = [sys.executable, "-m", "probes", "profile", "--model", str(gpt2.name), "--probe", "positional", "--data",
            str(data), "--batch-size", "1", "--checkpoint-every", "1", "--out", str(out), "--ray", made.address,
            "--workers", "1"]  # one worker a run: what is proven is the resume (two workers: the other tests here),
    # and each worker starts torch and the model, the most of this test's time on a busy 2-core machine
    done = killed_after_chunks(args, out, 3, timeout=600)
    assert 3 <= done < FEW and not out.exists()
    capsys.readouterr()
    # the same command again, here: a new driver of this module's cluster (one that joined already: the command
    # neither joins nor shuts it down), reading only what the killed one left on disk; a process of its own would
    # add its imports (seconds of CPU) and prove nothing more
    assert cli.main(args[3:]) == 0
    said = capsys.readouterr().err
    assert "Traceback" not in said, said
    assert f"positional: resuming from {tmp_path / 't.csv.partial'}" in said
    assert f"of {FEW // 2} chunks done already" in said  # (each half of the texts is checkpointed on its own)
    single = judged_profile(gpt2, ["positional"], str(data), None, tmp_path / "one.csv", batch_size=1,
                            checkpoint_every=1)  # what the command writes: the table with held-out verdicts
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(tmp_path / "one.csv"), check_exact=True)
    assert len(single) == len(pd.read_csv(out))


def test_a_worker_node_killed_mid_run_loses_no_chunk_and_counts_none_twice(cluster, gpt2, data, tmp_path,
                                                                           one_thread, monkeypatch):
    from probes import jobs  # where every checkpoint file is written

    made, nodes = cluster
    single = _probe_run(gpt2, data, tmp_path / "one.csv", every=3)
    stats: dict[str, dict] = {}
    notes: list[str] = []
    killed: list = []  # the worker node killed (its Node)
    bars: list[Bar] = []
    written: list[str] = []  # the name of each file written, once a write
    write = jobs.write_file

    def counted(path, data):
        written.append(path.name)
        return write(path, data)

    monkeypatch.setattr(jobs, "write_file", counted)

    def kill_a_node():  # the node that sent the first chunk back, while it runs its next one
        waited = 0.0  # until both workers are in their held chunk (its start counted: Slow marks it after that)
        while not all((hold / f"started-{i}").exists() for i in range(HELD_FROM, 2 * HELD_FROM)):
            assert waited < HOLD_AT_MOST_S, "the workers never started their second chunks"
            time.sleep(0.05)
            waited += 0.05
        node = next(iter(stats["node"].values()))
        victim = next(n for n in nodes if n.node_id == node)
        for pid in [pid for pid, where in stats["node"].items() if where == node]:
            os.kill(pid, signal.SIGKILL)  # a machine that dies takes its processes at once (remove_node alone lets
            # a worker finish the chunk in hand before it notices that its node is gone)
        made.remove_node(victim, allow_graceful=False)
        killed.append(victim)
        made.add_node(num_cpus=1)  # the cluster's replacement, where Ray restarts the lost worker
        (hold / "released").touch()  # the other worker's held chunk goes on

    hold = tmp_path / "hold"
    hold.mkdir()
    out = tmp_path / "ray.csv"
    on_ray = _probe_run(gpt2, data, out, every=3, notify=notes.append,
                        executor=slowly(ray_pool.executor(2, stats=stats, notify=notes.append), hold),
                        progress_factory=bars_into(bars, kill_a_node))
    assert killed and len(set(stats["node"].values())) >= 2  # the probe's chunks ran on more than one node
    assert (bars[0].total, bars[0].done) == (30, 30)  # every item counted once
    chunks = sorted(name for name in written if name.startswith("chunk-"))
    assert chunks == [f"chunk-{i:05d}.csv" for i in range(10)]  # each chunk's file written once
    pd.testing.assert_frame_equal(on_ray, single, check_exact=True)
    retried = [n for n in notes if n.startswith("Ray: chunk ")]
    assert retried and all("(positional) ran again after its worker was lost (counted once)" in n for n in retried)
