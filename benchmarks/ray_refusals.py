"""Ray addresses that cannot be joined: how long the refusal takes and what reaches the terminal (issue 40).

Each case is an address that ``--ray`` may be given; for each, in a fresh process:

* **joining**: ``cluster.start(ADDRESS)`` alone (the same call ``profile --ray``, ``serve --ray`` and
  ``probes.load(..., ray=)`` make), timed from the call to its refusal (or its join), after the imports;
* **command**: ``python -m probes profile --corpus F --model minilm --out X --ray ADDRESS`` end to end (Python's
  start and the imports included), for the refusals;
* **stderr lines**: what the command printed on stderr (goal: the one ``error:`` line, none of Ray's C++ warnings).

The cases: nothing listening; a port that accepts and stays silent; a web server (HTTP/1.1); a gRPC server that
is not a GCS (a real raylet's port: it answers the GCS's first call UNIMPLEMENTED, which ray.init retried for
20-28 s, printing a C++ warning a second); an HTTP/2 server that opens and then says nothing; and a real Ray
head (a local one started for the benchmark), which must still be joined. Goal: every refusal of an address that
answers with something that is not Ray within 5 s of the call, in one line.

    .venv/bin/python benchmarks/ray_refusals.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from report import publish  # noqa: E402  (benchmarks/, this script's folder)

GOAL_S = 5.0
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an HTTP/2 frame: no settings

JOIN = """
import sys, time
from probes import cluster
from probes.errors import ProbesError
start = time.perf_counter()
try:
    cluster.start(sys.argv[1])
    said = "joined"
except ProbesError as exc:
    said = f"error: {exc}"
print(f"{time.perf_counter() - start:.3f}", flush=True)
print(said, flush=True)
"""

HEAD = """
import json, sys
import ray
from probes import cluster
cluster.start(None, cpus=1)
node = ray.nodes()[0]
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "raylet": node["NodeManagerPort"],
                  "ip": node["NodeManagerAddress"]}), flush=True)
sys.stdin.read()  # until the benchmark closes it
ray.shutdown()
"""


class Port:
    """A loopback port that answers each connection with ``kind``: silent (accepts, never a word), http (a web
    server's 400), h2 (HTTP/2's settings, then nothing)."""

    def __init__(self, kind: str):
        self.kind, self.server = kind, socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        if kind != "silent":
            threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.held.append(connection)
            try:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" if self.kind == "http" else SETTINGS)
            except OSError:
                pass

    def close(self):
        for c in self.held:
            c.close()
        self.server.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(tmp: str) -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": tmp, "HF_HUB_OFFLINE": "1"}


def joining(address: str, tmp: str) -> tuple[float, int, str]:
    """Seconds in cluster.start, the lines it let reach stderr (Ray's own: a refusal is an exception here),
    what it came to (``joined``, or the refusal's line)."""
    out = subprocess.run([sys.executable, "-c", JOIN, address], cwd=ROOT, env=env(tmp), capture_output=True,
                         text=True, timeout=600)
    seconds, said = out.stdout.strip().splitlines()[-2:]
    return float(seconds), len(out.stderr.strip().splitlines()), said


def command(address: str, tmp: str) -> tuple[float, int, int]:
    """Seconds of the whole profile --corpus command, its exit code, its stderr lines."""
    corpus = Path(tmp) / "c.txt"
    corpus.write_text("the cat sat on the mat\n")
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "probes", "profile", "--corpus", str(corpus), "--model", "minilm",
                          "--out", str(Path(tmp) / "h.csv"), "--ray", address], cwd=ROOT, env=env(tmp),
                         capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, out.returncode, len(out.stderr.strip().splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table to OUT/ray_refusals.txt")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        head = subprocess.Popen([sys.executable, "-c", HEAD], cwd=ROOT, env=env(tmp), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert head.stdin is not None and head.stdout is not None  # both piped
        try:
            facts = json.loads(head.stdout.readline())
            ports = {kind: Port(kind) for kind in ("silent", "http", "h2")}
            cases = [("nothing listening", f"127.0.0.1:{free_port()}"),
                     ("accepts, silent", f"127.0.0.1:{ports['silent'].port}"),
                     ("web server (HTTP/1.1)", f"127.0.0.1:{ports['http'].port}"),
                     ("gRPC, not a GCS (a raylet)", f"{facts['ip']}:{facts['raylet']}"),
                     ("HTTP/2 settings, then silent", f"127.0.0.1:{ports['h2'].port}"),
                     ("non-ASCII host ($'h\\xe9:1')", "h\udce9:1"),
                     ("a real Ray head", facts["gcs"])]
            for what, address in cases:
                with tempfile.TemporaryDirectory() as own:
                    seconds, lines, said = joining(address, own)
                    refused = said.startswith("error:")
                    whole = command(address, own) if refused else None
                rows.append((what, seconds, whole, lines, said))
        finally:
            head.stdin.close()
            head.wait(timeout=120)
            for p in ports.values():
                p.close()

    width = max(len(r[0]) for r in rows)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = [f"Ray addresses refused (or joined): {platform.node()}, {os.cpu_count()} CPUs (load average {load} at the "
            f"end), Python {platform.python_version()}; goal: a refusal within {GOAL_S:g} s of the call, one line on "
            "stderr", "",
            f"{'case':<{width}}  {'joining s':>9}  {'command s':>9}  {'exit':>4}  {'stderr lines':>12}  says"]
    for what, seconds, whole, lines, said in rows:
        cmd = f"{whole[0]:9.1f}  {whole[1]:>4}  {whole[2]:>12}" if whole else f"{'-':>9}  {'-':>4}  {lines:>12}"
        short = said if len(said) < 90 else said[:87] + "..."
        text.append(f"{what:<{width}}  {seconds:9.2f}  {cmd}  {short}")
    met = all(s <= GOAL_S and (w is None or (w[1] == 2 and w[2] == 1)) for _, s, w, _, said in rows
              if said.startswith("error:"))
    joined = rows[-1][4] == "joined"
    text += ["", "joining s: cluster.start(ADDRESS) from the call to its refusal or join (imports excluded); "
                 "command s: python -m probes profile --corpus ... --ray ADDRESS end to end (Python's start, torch's "
                 "and Ray's imports included: most of it on a busy machine); stderr lines: the command's (a join: "
                 "what Ray printed while joining)",
             f"goal {'met' if met else 'NOT met'}: every refusal within {GOAL_S:g} s, exit 2, one line; the real head "
             f"{'joined' if joined else 'NOT joined'}"]
    publish("\n".join(text), args.out, "ray_refusals.txt")


if __name__ == "__main__":
    main()
