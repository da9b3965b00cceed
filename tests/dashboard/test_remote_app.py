"""The app with a Ray cluster (PROBES_RAY_ADDRESS): the models a server there holds are marked "on the cluster" in
the Model menu and drawn with the same numbers as a local run; a server killed mid-session is one line on the page,
and the page works again once Ray has restarted it; a cluster that does not answer is one warning, and the app
works locally."""

from __future__ import annotations

import time

import numpy as np
import pytest
import ray  # the [ray] extra, which the README's install includes: missing, this fails rather than skips
from apptest import model_options, open_app, rerun, rows, texts, titles

import probes
from probes import remote

# one local Ray at a time (make test's workers); the head weights are compared exactly
pytestmark = [pytest.mark.numeric, pytest.mark.bitwise, pytest.mark.xdist_group("ray")]

# a text per test: the pages' cached figures are keyed by the text, not by where the model is (the same numbers)
TEXT = "Xiaoming gave the apple to Xiaohong because she was hungry"
LOCAL = "The cat sat on the mat because it was tired"
KILLED = "The dog chased the ball until it was too tired to run"
NOWHERE = "127.0.0.1:1"  # nothing listens there


def _where(at) -> list[float]:
    """The Explore page's "Where 'query' looks" bars: the query token's weights over the keys, in order."""
    title = next(t for t in titles(at) if t and t.startswith("Where '"))
    bars = {r["key_pos"]: r["weight"] for r in rows(at, title)}
    return [bars[k] for k in sorted(bars)]


def test_a_cluster_that_does_not_answer_is_one_warning_and_the_app_works_locally(monkeypatch):
    assert not ray.is_initialized()  # first in this file: the cluster fixture below has not joined one yet
    monkeypatch.setenv("PROBES_RAY_ADDRESS", NOWHERE)
    at = open_app(page="explore", model="minilm", text=LOCAL, layer=1, head=2, query=3)
    warning = texts(at.sidebar.warning)
    assert len(at.sidebar.warning) == 1 and NOWHERE in warning and "models load here instead" in warning
    assert not any("on the cluster" in option for option in model_options(at))
    assert not at.error and not at.exception
    assert "Layer 1, head 2" in titles(at)  # the page drew, from the model loaded here
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster():
    """A local Ray (2 CPUs) with a server of minilm on it; shut down after this file's tests."""
    ray.init(address="local", num_cpus=2, namespace=remote.NAMESPACE, include_dashboard=False, log_to_driver=False)
    try:
        served = remote.serve("minilm", detached=False)
        yield ray.get_runtime_context().gcs_address, served
    finally:
        ray.shutdown()


def test_a_served_model_is_marked_on_the_cluster_and_draws_the_same_weights(cluster, monkeypatch, minilm):
    address, served = cluster
    monkeypatch.setenv("PROBES_RAY_ADDRESS", address)
    monkeypatch.setenv("PROBES_MODELS", "smollm2")  # minilm is not offered here: only the cluster's server has it
    at = open_app(page="explore", model="minilm", text=TEXT, layer=1, head=2, query=3)
    assert not at.error and not at.sidebar.warning
    assert "minilm · on the cluster" in model_options(at) and "smollm2" in model_options(at)
    assert 'marked "on the cluster" run on the Ray cluster at' in texts(at.sidebar.caption)
    reference = probes.run(minilm, TEXT).attention(1, 2).numpy()
    assert np.array_equal(_where(at), reference[3])  # the server's weights, exactly a local run's
    at.slider(key="w_head").set_value(4)
    rerun(at)
    assert np.array_equal(_where(at), probes.run(minilm, TEXT).attention(1, 4).numpy()[3])
    assert not at.error
    from dashboard.core import models

    app_model = models.served_model("minilm", address)  # the app's own stand-in of the served model (cached)
    assert isinstance(app_model, remote.RemoteModel) and app_model.wire.calls > 0  # what it drew came from there


def _wait(handle, dead: bool, seconds: float = 600) -> None:
    """Until the server's actor answers (``dead=False``), or no longer does (``dead=True``); a failure after ``seconds``
    (a guard against a hang, not a speed bound: a restarted server loads its model again, slowly on a busy machine)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ray.get(handle.pid.remote(), timeout=5)
            if not dead:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            if dead:
                return
        time.sleep(0.2)
    raise AssertionError(f"the server did not {'die' if dead else 'come back'} in {seconds:g} s")


def test_a_killed_server_is_one_line_then_the_page_works_again(cluster, monkeypatch, minilm):
    address, served = cluster
    monkeypatch.setenv("PROBES_RAY_ADDRESS", address)
    at = open_app(page="explore", model="minilm", text=KILLED, layer=0, head=1, query=4)
    other = open_app(page="explore", model="minilm", text=KILLED, layer=3, head=0, query=2)  # another visitor
    assert not at.error and not other.error
    before = ray.get(served.handle.pid.remote())
    ray.kill(served.handle, no_restart=False)
    _wait(served.handle, dead=True)
    at.slider(key="w_head").set_value(5)  # a head not drawn yet: the page asks the server
    rerun(at)
    said = texts(at.error)
    assert len(at.error) == 1 and said.startswith(f"the server of minilm on the Ray cluster at {address}"), said
    assert "try again" in said and "\n" not in said and "Traceback" not in said and not at.exception
    rerun(other)  # the other visitor's page, as it was
    assert not other.error and np.array_equal(_where(other), probes.run(minilm, KILLED).attention(3, 0).numpy()[2])
    _wait(served.handle, dead=False)  # Ray restarted the server (a new process, which loaded the model again)
    assert ray.get(served.handle.pid.remote()) != before
    rerun(at)  # nothing of the failed run was kept: the page asks again, and the trace is made again there
    assert not at.error
    assert np.array_equal(_where(at), probes.run(minilm, KILLED).attention(0, 5).numpy()[4])


def test_the_parity_page_compares_the_servers_traces_there(cluster, monkeypatch, minilm):
    from dashboard.core import models, trace
    from dashboard.core.parity import parity_report
    from probes import parity

    address, _ = cluster
    monkeypatch.setenv("PROBES_RAY_ADDRESS", address)
    text = "Parity on the server: the same figures as here"
    at = open_app(page="parity", model="minilm", text=text)
    assert not at.error and not at.exception
    inp = models.Input("minilm", text, None, "hf", "eager", False)
    assert isinstance(trace.trace(inp), remote.RemoteTrace)  # the page's traces are the server's
    report = parity_report(inp)  # as the page made it (cached): compared on the server
    local = parity.compare(probes.run(minilm, text), probes.run(minilm, text, source="scratch"))
    assert report.passed and report.attention_max_abs_diff == local.attention_max_abs_diff
