"""Joining a Ray cluster, once per process: the one way every backend in (a model server, ``probes.load(...,
ray=)``, the corpus's actor pool, ``serve``, ``profile --ray``) gets onto Ray.

An address is checked before Ray is imported (seconds) and before ``ray.init`` (which retries an address that
does not answer for 20 s, printing a line of Ray's C++ warnings a second): its form (:func:`parse_address`), then
a TCP connection and one gRPC call (grpcio's client) that only a Ray head's GCS answers (:func:`check_address`); a
refusal is one line (:class:`~probes.errors.RayUnavailable`) that says what to do. :func:`start` joins (or starts a
local Ray for this run); :func:`join` is the same for a process that may have joined already, and says the address
joined.

It sits below both backends that use Ray (``probes.remote``, ``probes.corpus.ray_pool``) and imports nothing of
the package but its errors. Only it and those two modules import Ray (an import contract in pyproject.toml).
"""

from __future__ import annotations

import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import RayUnavailable

CONNECT_TIMEOUT_S = 3.0  # a head's GCS port answers at once; more is a firewall or no cluster
# the first call ray.init makes of a GCS (its cluster's id): only a GCS answers it; any other gRPC server (a raylet's
# port, an agent's) says UNIMPLEMENTED, and ray.init would retry that for 20 s, a line of Ray's C++ warnings a second
GCS_CALL = "/ray.rpc.NodeInfoGcsService/GetClusterId"
# what a refusal offers besides a working address: a command that has more to offer says so (``instead=``: profile's
# --local-ray, serve's Ray of its own)
LEAVE_OUT = "or leave --ray out to run on this process"
_HEAD = "give the address of a running Ray head (HOST:6379, which `ray start --head` prints)"
_FORM = "give the Ray head's address as HOST:PORT (its GCS port, 6379 unless changed), or auto on a node of the cluster"
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # a DNS name or an IPv4 address, in ASCII


def shown(text: str) -> str:
    """``text`` as a person typed it, printable in one line: bytes that were not UTF-8 (which Python keeps as
    surrogates) as ``\\xNN``, as the shell's ``$'\\xNN'`` wrote them."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)  # a tab or a newline as \t, \n


def parse_address(address: str, source: str | None = None) -> tuple[str, int]:
    """The host and port of a Ray head's address (``HOST:PORT``; an IPv6 address in brackets, ``[::1]:6379``),
    checked before any socket is opened: a host name of ASCII letters, digits, ``.``, ``-`` and ``_`` (what DNS and
    IPv4 addresses are made of; ``h\\xe9`` would fail deep in the socket's name encoding), a port of ASCII digits
    from 1 to 65535 (``'²'.isdigit()`` is true, and 99999 would wrap around); :class:`~probes.errors.RayUnavailable`
    saying which part is wrong otherwise. ``source``: how the address was given (default ``--ray ADDRESS``)."""
    import ipaddress

    source = source or f"--ray {shown(address)}"
    host, colon, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # [::1]:6379
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise RayUnavailable(f"{source}: {shown(host)} is not an IPv6 address: {_FORM}") from None
        host = host[1:-1]
    elif ":" in host or "[" in host or "]" in host:
        raise RayUnavailable(f"{source}: write an IPv6 address in brackets, [::1]:6379 (with no spaces): {_FORM}")
    elif host and (not HOST_NAME.fullmatch(host) or len(host) > 253
                   or any(not 0 < len(label) <= 63 for label in host.removesuffix(".").split("."))):  # DNS's limits
        raise RayUnavailable(f"{source}: '{shown(host)}' is not a host name (ASCII letters, digits, '.', '-' and '_'; "
                             f"no spaces): {_FORM}")
    if not colon or not host or not port:
        raise RayUnavailable(f"{source}: {_FORM}")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise RayUnavailable(f"{source}: port '{shown(port)}' is not a port number (1 to 65535): {_FORM}")
    return host, int(port)


def _token() -> str | None:
    """The token this driver authenticates with, as the value of gRPC's ``authorization`` metadata (``Bearer
    TOKEN``): where ``RAY_AUTH_MODE=token`` (:func:`use_token`), from ``RAY_AUTH_TOKEN``, else the file
    ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token``, as Ray reads it; None otherwise."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if not token:
        try:
            path = os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token"
            token = Path(path).read_text().strip()
        except OSError:
            return None
    return f"Bearer {token}" if token else None


def _gcs_answer(authority: str) -> str:
    """What the port at ``authority`` says to the GCS's first call (:data:`GCS_CALL`, an empty message, with this
    machine's token where token authentication is on), asked by a gRPC client with a deadline of
    :data:`CONNECT_TIMEOUT_S`: ``"gcs"`` (a reply: a Ray head's GCS), ``"token"`` (refused as UNAUTHENTICATED: a GCS
    that wants another token, or one), ``"unavailable"`` (no HTTP/2 connection: nothing listens, or what does is not
    HTTP/2) or ``"other"`` (another gRPC service, or a port that opened as one does and then stayed silent: not a
    GCS). ``TimeoutError`` when the port said nothing at all."""
    import queue

    import grpc  # the [ray] extra's; here, not at import: only a command that joins a cluster by address asks

    token = _token()
    with grpc.insecure_channel(authority) as channel:
        try:  # bytes in, bytes out: the request is empty, and any reply at all is a GCS's
            channel.unary_unary(GCS_CALL)(b"", timeout=CONNECT_TIMEOUT_S,
                                          metadata=[("authorization", token)] if token else None)
        except grpc.RpcError as e:
            code = e.code()  # a failed unary call is also its grpc.Call
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return "token"
            if code == grpc.StatusCode.UNAVAILABLE:
                return "unavailable"
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:  # silent: since it opened as HTTP/2 does, or from the start?
                states: queue.SimpleQueue = queue.SimpleQueue()
                channel.subscribe(states.put)  # told the channel's state now, first
                ready = states.get(timeout=CONNECT_TIMEOUT_S) == grpc.ChannelConnectivity.READY
                channel.unsubscribe(states.put)
                if not ready:
                    raise TimeoutError from None
            return "other"
    return "gcs"


def check_address(address: str, instead: str = LEAVE_OUT) -> str:
    """The GCS address (``host:port``) that ``address`` (``auto`` or ``host:port``; ``ray://`` is refused)
    names, once its form is right (:func:`parse_address`) and it has answered, within :data:`CONNECT_TIMEOUT_S`, a
    TCP connect and the first call ray.init makes of a GCS (:func:`_gcs_answer`, where TLS is not on);
    :class:`~probes.errors.RayUnavailable` (what was tried, what to do: a working address, or ``instead``)
    otherwise. Ray itself would wait on an address
    that does not answer until killed, and retry one that is another gRPC server for 20 s, printing its C++
    warnings."""
    import socket

    source, gcs = f"--ray {shown(address)}", address
    if address == "auto":  # what ray.init("auto") would join: RAY_ADDRESS, else the Ray last started here
        env = os.environ.get("RAY_ADDRESS", "")
        if env and env != "auto":
            source, gcs = f"--ray auto (RAY_ADDRESS={shown(env)})", env
        else:
            # where `ray start` notes the cluster it started ($RAY_TMPDIR/ray, /tmp/ray by default), as ray.init
            # reads it
            noted = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray" / "ray_current_cluster"
            try:
                gcs = noted.read_text().strip().splitlines()[0]
            except (OSError, IndexError):
                raise RayUnavailable("--ray auto: no running Ray cluster was found on this machine; start one with "
                                     f"`ray start --head`, {instead}") from None
            source = f"--ray auto (the Ray found on this machine, at {gcs})"  # ray start's note
    if gcs.startswith("ray://"):
        # Ray Data's pipelines do not run through Ray Client (Ray 2.60: "'Worker' object has no attribute
        # 'core_worker'" once the pool starts), so ray:// is refused whether or not ray[client] is installed
        raise RayUnavailable(f"{source}: Ray Data does not run through Ray Client (ray:// addresses); run the "
                             "command on a node of the cluster with --ray auto, or give the head's plain address "
                             "(--ray HEAD:6379)")
    host, port = parse_address(gcs, source)  # its form, before any socket: one line for 'hé:1', ':1', 'h:99999'
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        # a GCS is a gRPC server that answers the call ray.init makes first (a port that accepts and stays silent, is
        # not HTTP/2, or is another gRPC server, would keep ray.init retrying for 20 s or until killed); with TLS on,
        # only whether the port takes a connection is asked
        answer = "tls" if os.environ.get("RAY_USE_TLS") else _gcs_answer(authority)
        if answer in ("tls", "unavailable"):  # whether anything listens there (and if not, why): a plain connection
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        if answer == "token":
            have = "refused this machine's token" if _token() else "wants a token and this machine has none"
            raise RayUnavailable(f"{source}: the Ray head at {authority} {have}: copy the head's "
                                 "~/.ray/auth_token to this machine (or set RAY_AUTH_TOKEN to it)")
        if answer in ("unavailable", "other"):
            raise RayUnavailable(f"{source}: {authority} accepts connections but is not a Ray head's GCS port: "
                                 f"{_HEAD}, {instead}")
    except (OSError, UnicodeError) as e:  # UnicodeError: a name the resolver will not encode (checked above)
        why = (f"no answer within {CONNECT_TIMEOUT_S:g} s" if isinstance(e, TimeoutError)
               else (getattr(e, "strerror", None) or str(e) or type(e).__name__).lower())
        raise RayUnavailable(f"{source}: nothing answers at {authority} ({why}): {_HEAD}, {instead}") from None
    return gcs


def use_token() -> None:
    """Say that this driver authenticates with the token of this machine, where there is one: Ray (2.5x) turns
    token authentication on for a cluster it starts (``ray start --head``, ``ray.init()``) and writes its token to
    ``~/.ray/auth_token``, but a driver that joins one by address sends it only when ``RAY_AUTH_MODE=token``;
    otherwise the head refuses it after 20 s of retries. An explicit ``RAY_AUTH_MODE`` is left as it is. Ray reads
    it once, when it is first imported: call this before, and only to join a cluster by its address (once Ray is
    imported, setting it would only contradict what Ray read: a later local Ray of this process would not start)."""
    import sys

    if "RAY_AUTH_MODE" in os.environ or "ray" in sys.modules:
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token"
    if os.environ.get("RAY_AUTH_TOKEN") or Path(path).is_file():
        os.environ["RAY_AUTH_MODE"] = "token"


@contextmanager
def _stderr_held():
    """This process's stderr (file descriptor 2, where Ray's C++ side writes) held in a temporary file for the
    block: written out when the block succeeds, dropped when it raises (the refusal is one line, and says what
    went wrong)."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)  # reached only when the block succeeded
        if said := held.read():
            sys.stderr.write(said.decode(errors="replace"))
            sys.stderr.flush()


def start(address: str | None, cpus: int | None = None, instead: str = LEAVE_OUT) -> bool:
    """Connect to the Ray cluster at ``address`` (``auto``: the one this machine joined), or with None start a local
    one (``cpus`` of this machine's CPUs); True when this call started it (and so should shut it down). ``instead``:
    what a refusal offers besides a working address (:func:`check_address`)."""
    import sys

    if address:
        use_token()  # before Ray reads its settings (a local Ray turns it on itself)
    if address and address != "auto" and not address.startswith("ray://"):
        parse_address(address)  # a malformed address is refused even where this process has joined a cluster
    joined = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    # an address that cannot work is refused before Ray's imports (seconds), and before ray.init, which waits on
    # an address that does not answer
    gcs = check_address(address, instead) if address and not joined else None
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
    options: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    if address:
        try:
            with _stderr_held():  # Ray's C++ warnings while it retries: said only if it joins after all
                ray.init(address=gcs, **options)
        except (ConnectionError, TimeoutError, RuntimeError) as e:  # a GCS that would not take this driver
            raise RayUnavailable(f"--ray {shown(address)}: could not join the Ray cluster at {gcs} "
                                 f"({str(e).splitlines()[0] if str(e) else type(e).__name__}): {_HEAD}, "
                                 f"{instead}") from None
    else:  # "local": a new Ray for this run, even where RAY_ADDRESS names a cluster
        # its workers at the driver's priority: Ray starts them at niceness 15, a CFS weight of 36 against 1,024,
        # so beside any other busy process on the machine (a browser, a build, another run) the run's workers get
        # about 3 % of a CPU each and the run crawls (a cluster one joins keeps its own setting)
        os.environ.setdefault("RAY_worker_niceness", "0")
        ray.init(address="local", num_cpus=cpus or os.cpu_count(), **options)
    import ray.data

    for name in ("ray", "ray.data"):  # again: importing ray.data sets its own level
        logging.getLogger(name).setLevel(logging.ERROR)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # the command has its own bar, counting chunks
    ctx.print_on_execution_start = False
    return True


def join(address: str, instead: str = LEAVE_OUT) -> str:
    """Join the Ray cluster at ``address`` (``auto``: the one this process is connected to already, else the one
    RAY_ADDRESS or ``ray start`` names); the address joined. A quick, one-line failure when none answers (offering
    ``instead`` besides a working address)."""
    start(address, instead=instead)  # nothing, where this process has joined one already
    return joined()


def joined() -> str:
    """The address of the cluster this process has joined (its GCS: what another process joins it by)."""
    import ray

    return ray.get_runtime_context().gcs_address


def resources() -> dict[str, float]:
    """What the cluster this process has joined holds in all (``{"CPU": 8.0, "GPU": 1.0, ...}``)."""
    import ray

    return dict(ray.cluster_resources())


def shutdown() -> None:
    """Leave the cluster (and stop it, where this process started a local one: :func:`start` said True)."""
    import ray

    ray.shutdown()
