"""Models served from a Ray cluster (probes.remote): traces from the server equal local ones bit for bit (minilm,
smollm2), a server whose process dies is one line and then works again, a server runs only the library's readers,
and ``python -m probes serve`` starts and stops one that another process uses."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray  # the [ray] extra, which the README's install includes
import torch

import probes
from probes import cluster as ray_cluster, generation, parity, remote
from probes.cli import main
from probes.effects import ablation, importance
from probes.errors import ModelUnavailable, ProbesError, RayUnavailable, ServerLost

# one local Ray at a time (make test's workers); bitwise: its numeric tests compare a served model with this process's,
# exactly, so the numeric re-run (other CPU kernels: both sides change alike) leaves them out
pytestmark = [pytest.mark.bitwise, pytest.mark.xdist_group("ray")]

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry"


@pytest.fixture(scope="module")
def cluster():
    started = ray_cluster.start(None, cpus=2)
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def served_minilm(cluster):
    model = remote.serve("minilm", cluster, detached=False)
    yield model
    remote.stop("minilm", cluster)


def same_trace(remote_trace, local_trace, model) -> None:
    """Every number a page or a reader asks a trace for, equal bit for bit."""
    assert remote_trace.token_strings() == local_trace.token_strings()
    assert torch.equal(remote_trace.input_ids, local_trace.input_ids)
    assert remote_trace.lazy == local_trace.lazy
    for a, b in zip(remote_trace.hidden_states, local_trace.hidden_states, strict=True):
        assert torch.equal(a, b)
    if local_trace.logits is not None:
        assert torch.equal(remote_trace.logits, local_trace.logits)
    for layer in range(model.n_layers):
        assert torch.equal(remote_trace.attention(layer), local_trace.attention(layer))  # every head, every row
        for head in range(model.n_heads):
            assert torch.equal(remote_trace.attention(layer, head, rows=slice(2, 5)),
                               local_trace.attention(layer, head, rows=slice(2, 5)))
            for a, b in zip(remote_trace.qkv(layer, head), local_trace.qkv(layer, head), strict=True):
                assert torch.equal(a, b)
    summary, expected = remote_trace.head_summary(1), local_trace.head_summary(1)
    assert all(torch.equal(summary[k], expected[k]) for k in expected)


@pytest.mark.numeric  # the server's floats against this process's, exactly
def test_minilm_traces_from_the_server_equal_local_ones_bit_for_bit(served_minilm, minilm, one_thread):
    assert isinstance(served_minilm, probes.ModelLike) and served_minilm.fingerprint() == minilm.fingerprint()
    assert isinstance(served_minilm, remote.RemoteModel)  # what remote.serve gives: its facts came from the server
    # the tokenizer's, as the server worked it out (its files are there): a checkpoint's fingerprint covers it
    assert served_minilm.facts["tokenizer_fingerprint"] == minilm.tokenizer_fingerprint()
    for source, backend, budget in (("hf", "eager", None), ("scratch", "eager", None), ("scratch", "sdpa", 0)):
        got = probes.run(served_minilm, TEXT, source=source, backend=backend, attention_budget=budget)
        same_trace(got, probes.run(minilm, TEXT, source=source, backend=backend, attention_budget=budget), minilm)
    assert got.lazy  # the budget of 0 bytes: the server kept a logsumexp per row, and answered from it


@pytest.mark.numeric  # the server's floats against this process's, exactly
def test_smollm2_traces_from_the_server_equal_local_ones_bit_for_bit(cluster, smollm2, one_thread):
    served = probes.load("smollm2", ray="auto") if "smollm2" in remote.served(cluster) else \
        remote.serve("smollm2", cluster, detached=False)
    try:
        assert served.n_kv_heads == 3 and served.has_lm_head  # grouped-query, with logits: what minilm does not test
        got = probes.run(served, TEXT, source="scratch")
        same_trace(got, probes.run(smollm2, TEXT, source="scratch"), smollm2)
        assert got.kv_head(0, 7) == 2  # query head 7 reads key/value head 2, as docs/scale-out.md's local example says
        there, here = (generation.generate(m, "The cat sat", 4) for m in (served, smollm2))
        assert there.new_ids == here.new_ids
        assert all(torch.equal(a, b) for a, b in zip(there.rows, here.rows, strict=True))
    finally:
        remote.stop("smollm2", cluster)


def test_a_head_change_sends_only_that_head(served_minilm):
    t = probes.run(served_minilm, TEXT)
    before = served_minilm.wire.received
    weights = t.attention(3, 4)
    n = len(t.token_strings())
    assert weights.shape == (n, n)
    assert served_minilm.wire.received - before < n * n * 4 + 2_000  # the n×n floats and the call's own framing


@pytest.mark.numeric  # the server's floats against this process's, exactly
def test_work_that_needs_the_weights_runs_on_the_server(served_minilm, minilm, one_thread):
    here = parity.compare(probes.run(minilm, TEXT), probes.run(minilm, TEXT, source="scratch"))
    there = parity.compare(probes.run(served_minilm, TEXT), probes.run(served_minilm, TEXT, source="scratch"))
    assert there.passed and there.attention_max_abs_diff == here.attention_max_abs_diff
    grid = ablation.ablate_each(served_minilm, "the cat sat", how="zero", position=1)
    assert grid.equals(ablation.ablate_each(minilm, "the cat sat", how="zero", position=1))


class Bar:
    """A tqdm-like bar that keeps what it was told."""

    def __init__(self, total: int, name: str):
        self.total, self.closed = total, 0
        self.counts: list[int] = []

    def update(self, n: int) -> None:
        self.counts.append(n)

    def close(self) -> None:
        self.closed += 1


class Stop(Exception):
    """What a page's progress callback raises to stop the work (nobody watches it any more)."""


@pytest.mark.numeric  # the server's floats against this process's, exactly
def test_the_progress_of_work_on_the_server_is_counted_here_as_it_goes_once(served_minilm, minilm, one_thread,
                                                                              tmp_path):
    data = tmp_path / "texts.txt"
    data.write_text("The cat sat on the mat.\nShe said that he would come back.\nThe dog ran.\nIt rained.\n"
                    "Birds sing.\n")
    tables, bars = [], []

    def make_bar(total, name):
        bars.append(Bar(total, name))
        return bars[-1]

    for i, model in enumerate((served_minilm, minilm)):
        tables.append(importance.profile_importance(
            model, str(data), None, tmp_path / f"importance-{i}.csv", batch_size=2,
            checkpoint_every=3, ablation=False, progress_factory=make_bar))
    # the command's bar: each batch as the server finishes it (chunks of 3: batches of 2 and 1), as a local run
    # counts, and no chunk counted again once it returns
    assert [(b.total, b.counts, b.closed) for b in bars] == [(5, [0, 2, 1, 2], 1)] * 2
    assert tables[0]["score"].equals(tables[1]["score"])
    # a page's progress(done, total): every call the reader makes there, here, in order
    there, here = [], []
    grid = ablation.ablate_each(served_minilm, "the cat sat", how="zero", position=1,
                                progress=lambda *a: there.append(a))
    assert grid.equals(ablation.ablate_each(minilm, "the cat sat", how="zero", position=1,
                                            progress=lambda *a: here.append(a)))
    assert there == here and there[-1] == (72, 72) and len(there) == len(set(there))


def test_a_progress_callback_that_raises_stops_the_work_on_the_server(served_minilm):
    told = []

    def stop_at_3(done, total):
        told.append(done)
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        ablation.ablate_each(served_minilm, "the cat sat", how="zero", position=1, progress=stop_at_3)
    assert told[-1] == 3  # raised here as in a local run; the server's work cancelled, and the server still answers
    assert probes.run(served_minilm, "the cat sat").token_strings() == ["[CLS]", "the", "cat", "sat", "[SEP]"]


def test_a_server_runs_only_the_library_readers(served_minilm):
    # registered where they are defined (@probes.reader), whatever their module: nothing else of the package runs
    for name in ("os:system", "probes.parity:os.system", "probes.effects.ablation:torch.load",
                 "probes.parity:attention_tolerance", "probes.models:load", "probes.nowhere:f", "probes.parity:"):
        with pytest.raises(probes.ProbesError, match="not one of the library's readers"):
            served_minilm.ask("compute", name, ("true",), {})
    with pytest.raises(ValueError, match="not a reader of a trace"):
        served_minilm.ask("read", remote.Request(TEXT), "__dict__")


def test_a_text_the_model_cannot_read_is_the_servers_own_one_line_error(served_minilm):
    with pytest.raises(probes.InputTooLong, match="shorten it"):
        probes.run(served_minilm, "word " * 600)


def test_a_model_nobody_serves_and_a_cluster_nobody_runs_are_one_line(served_minilm, cluster):
    with pytest.raises(ModelUnavailable, match=r"holds 'gpt2' \(served there: minilm\): start one with "
                                               r"`python -m probes serve --model gpt2"):
        probes.load("gpt2", ray=cluster)
    # a process that has joined no Ray: refused before ray.init (which would retry a dead address for long), so the
    # check is that ray.init is never called, not how long the refusal took; the timeout only guards against a hang
    code = ("import probes, ray, sys\nray.init = lambda *a, **k: sys.exit('ray.init was called')\ntry:\n"
            "    probes.load('minilm', ray='127.0.0.1:9')\n"
            "except probes.ProbesError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.stdout.startswith(RayUnavailable.__name__) and "nothing answers at 127.0.0.1:9" in out.stdout, (
        out.stdout + out.stderr)


@pytest.mark.numeric  # the server's floats against this process's, exactly
def test_a_server_whose_process_dies_is_one_line_then_works_again(served_minilm, one_thread):
    t = probes.run(served_minilm, TEXT)
    expected = t.attention(2, 5)
    pid = served_minilm.facts["pid"]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ServerLost) as lost:
        t.attention(2, 5)
    assert str(lost.value).count("\n") == 0 and "try again in a few seconds" in str(lost.value)
    deadline = time.monotonic() + 600  # a guard against a hang: loading the model again is slow on a busy machine
    while True:  # Ray restarts the actor, which loads the model again
        try:
            again = t.attention(2, 5)  # the same trace: the new server recomputes it from its request
            break
        except ServerLost:
            assert time.monotonic() < deadline, "the server did not come back within 600 s"
            time.sleep(0.5)
    assert torch.equal(again, expected)
    assert ray.get(served_minilm.handle.pid.remote()) != pid


def test_a_server_stopped_and_started_again_is_found_by_its_name(cluster):
    first = remote.serve("minilm", cluster, detached=False) if "minilm" not in remote.served(cluster) else \
        probes.load("minilm", ray=cluster)
    remote.stop("minilm", cluster)
    with pytest.raises(ServerLost, match=r"was stopped: start it again \(python -m probes serve --model minilm"):
        probes.run(first, "the cat sat")
    assert isinstance(first, remote.RemoteModel)  # served or connected to: either way a RemoteModel
    second = remote.serve("minilm", cluster, detached=False)  # a new actor under the same name
    assert probes.run(first, "the cat sat").token_strings() == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert ray.get(first.handle.pid.remote()) == second.facts["pid"]
    remote.stop("minilm", cluster)


def test_the_serve_command_holds_a_model_for_another_process(cluster, tmp_path, capsys):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "probes", "serve", "--model", "minilm", "--ray", cluster]
    # the command's timeout guards against a hang, not a speed: on a busy machine an import alone takes minutes
    if "minilm" in remote.served(cluster):
        remote.stop("minilm", cluster)
    # started by a process of its own, which returns: the server outlives it
    up = subprocess.run(cli + ["--detach"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert up.returncode == 0, up.stderr
    assert "serving minilm (6 layers × 12 heads" in up.stdout and f"PROBES_RAY_ADDRESS={cluster}" in up.stdout

    def command(*args: str) -> tuple[int, str, str]:
        """The command run here, a driver of the same cluster as any other process is (a process of its own for
        each of the refusals below was its imports again, seconds of CPU each, and nothing more proven)."""
        capsys.readouterr()
        code = main(["serve", "--model", *args])
        said = capsys.readouterr()
        return code, said.out, said.err

    try:
        assert "minilm" in remote.served(cluster)
        code, _, err = command("gpt2", "--ray", cluster, "--gpus-per-replica", "1")
        assert code == 2 and err.strip().splitlines()[-1] == (
            f"error: the Ray cluster at {cluster} has 0 GPU(s), fewer than the 1 asked for: ask for fewer, or add a "
            "node that has them")
        code, _, err = command("gpt2", "--ray", cluster, "--detach")  # the hub is offline: the server cannot load it
        assert code == 2 and err.strip().splitlines()[-1].startswith("error: ")
        assert "Traceback" not in err and "gpt2" not in remote.served(cluster)  # no server left behind
        code, _, err = command("minilm", "--ray", cluster, "--detach")
        assert code == 2 and err.strip().splitlines()[-1].startswith(
            "error: minilm is served on the Ray cluster") and "Traceback" not in err
        model = probes.load("minilm", ray=cluster)  # the detached server outlives the command that started it
        assert probes.run(model, "the cat sat").token_strings() == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    finally:
        code, out, _ = command("minilm", "--ray", cluster, "--stop")
    assert code == 0 and "stopped the server of minilm" in out
    assert "minilm" not in remote.served(cluster)
    with pytest.raises(ProbesError):
        probes.load("minilm", ray=cluster)
