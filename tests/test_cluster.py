"""Joining Ray (probes.cluster), the one way every backend gets onto a cluster: an address is checked before
ray.init (a port that answers but is not a Ray head's GCS is refused at once), and a local Ray's workers run at
the driver's priority."""

import os

import pytest
import ray  # the [ray] extra, which the README's install includes: missing, this fails rather than skips

from probes import cluster

pytestmark = pytest.mark.xdist_group("ray")  # one local Ray at a time (make test's workers)


@pytest.fixture(scope="module")
def local_ray():
    started = cluster.start(None, cpus=2)
    yield
    if started:
        cluster.shutdown()


def test_the_address_check_takes_a_real_head_and_refuses_its_raylet(local_ray):
    """Issue 40: before ray.init, the address is asked the GCS's first call (one gRPC call, grpcio's): a real
    head's GCS answers it; the raylet's port, another gRPC server of the same node, says UNIMPLEMENTED and is
    refused at once (ray.init retried it for tens of seconds, printing a line of C++ warnings a second)."""
    from probes.errors import RayUnavailable

    gcs = ray.get_runtime_context().gcs_address
    assert cluster.check_address(gcs) == gcs
    node = ray.nodes()[0]
    raylet = f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}"
    with pytest.raises(RayUnavailable, match=f"{raylet} accepts connections but is not a Ray head's GCS port"):
        cluster.check_address(raylet)


def test_the_cluster_joined_is_named_and_counted(local_ray):
    assert cluster.join("auto") == cluster.joined() == ray.get_runtime_context().gcs_address
    assert cluster.resources()["CPU"] == 2
    assert cluster.start("auto") is False  # joined already: nothing started, nothing to shut down


NICENESS = """
import os, sys, ray
from probes import cluster
cluster.start(None, cpus=1)
print(ray.get(ray.remote(lambda: os.nice(0)).remote()))
"""


@pytest.mark.parametrize("asked, seen", [(None, "0"), ("15", "15")])
def test_a_local_rays_workers_run_at_the_drivers_priority_unless_told(asked, seen):
    # Ray's own default is 15: beside any busy process its workers got ~3 % of a CPU; a niceness given is kept
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    if asked is not None:
        env["RAY_worker_niceness"] = asked
    out = subprocess.run([sys.executable, "-c", NICENESS], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == seen
