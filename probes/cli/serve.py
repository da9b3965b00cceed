"""``python -m probes serve --model NAME [--ray [ADDRESS]] [--gpus-per-replica N]``: hold a model on a Ray cluster
for the app and the library (:mod:`probes.remote`), until Ctrl-C (or, ``--detach``, until ``--stop``). ``--ray`` means
what it means on every command (alone: the cluster this machine has joined); without it, the server runs on a Ray of
this machine for as long as the command runs."""

from __future__ import annotations

import argparse
import signal
import time

from ..errors import BadOption
from ..models import OFFLINE_DEFAULT, check_name
from .common import MODEL_HELP, gpus, no_threads, quiet_transformers, ray_option, threads

# what a refusal of --ray offers here besides a working address (probes.cluster.check_address)
INSTEAD = "or leave --ray out to serve from a Ray of this machine for as long as the command runs"


def main(args: argparse.Namespace) -> int:
    from .. import cluster, remote

    name = check_name(args.model)
    if args.stop:
        gcs = cluster.join(args.ray or "auto")
        if name not in remote.served(gcs):
            raise BadOption(f"no server of {name} runs on the Ray cluster at {gcs}: nothing to stop")
        remote.stop(name, gcs)
        print(f"stopped the server of {name} on the Ray cluster at {gcs}")
        return 0
    if args.detach and not args.ray:
        raise BadOption("--detach needs --ray [ADDRESS] (a Ray cluster): a server on this command's own Ray stops with "
                        "the command")
    quiet_transformers()
    started = False
    if args.ray:
        gcs = cluster.join(args.ray, instead=INSTEAD)
    else:  # a Ray of this machine's CPUs for as long as this command runs
        started = cluster.start(None)
        gcs = cluster.joined()
    try:
        if name in remote.served(gcs):
            raise BadOption(f"{name} is served on the Ray cluster at {gcs} already: use it (PROBES_RAY_ADDRESS={gcs}), "
                            f"or stop that server first (python -m probes serve --model {name} --ray {gcs} --stop)")
        have = cluster.resources()
        for what, need in (("GPU", args.gpus_per_replica), ("CPU", args.cpus)):
            if need and have.get(what, 0) < need:
                raise BadOption(f"the Ray cluster at {gcs} has {have.get(what, 0):g} {what}(s), fewer than the "
                                f"{need:g} asked for: ask for fewer, or add a node that has them")
        start = time.perf_counter()
        model = remote.serve(name, gcs, gpus=args.gpus_per_replica, cpus=args.cpus, detached=True)
        where = f"{model.facts['device']}, pid {model.facts['pid']}"
        print(f"serving {model.name} ({model.n_layers} layers × {model.n_heads} heads, "
              f"{model.weight_bytes() / 2**20:,.0f} MiB of weights, on {where}; ready in "
              f"{time.perf_counter() - start:.1f} s) on the Ray cluster at {gcs}", flush=True)
        print(f"  the app: PROBES_RAY_ADDRESS={gcs} make app   the library: probes.load({name!r}, ray={gcs!r})",
              flush=True)
        if args.detach:
            print(f"  it runs until stopped: python -m probes serve --model {name} --ray {gcs} --stop", flush=True)
            return 0
        print("  Ctrl-C stops it", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # a TERM stops it like Ctrl-C
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            remote.stop(name, gcs)
            print(f"stopped the server of {name}", flush=True)
        return 0
    finally:
        if started:
            cluster.shutdown()


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="hold a model on a Ray cluster for the app and the library",
                       description="Start a model server (a Ray actor that Ray restarts if its process dies) that "
                       "answers the app's and the library's questions about one model: traces, a head's weights, "
                       "Q/K/V, parity, generation and ablations. Models it serves open in the app with "
                       "PROBES_RAY_ADDRESS, and in a script with probes.load(NAME, ray=ADDRESS).")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    ray_option(p, "hold the model on this Ray cluster (default: a Ray of this machine for as long as the command "
               "runs)")
    p.add_argument("--gpus-per-replica", type=gpus, default=0, help="GPUs the server holds (default 0: CPU)")
    p.add_argument("--cpus", type=threads, default=1, help="CPUs the server holds, and its torch threads (default 1)")
    p.add_argument("--detach", action="store_true", help="leave the server running and return (needs --ray)")
    p.add_argument("--stop", action="store_true", help="stop the server of --model on the cluster --ray names")
    no_threads(p, "the server holds the model in a Ray actor, whose torch threads are its --cpus")
    p.set_defaults(func=main)
