"""Derived caches (the converted EWT sentences, the WordNet database, the extracted GGUF) are checked against
the sha256 recorded when they were made, and rebuilt from the verified archive when they differ."""

from __future__ import annotations

import os

import pytest

from probes.datasets import cache


def test_a_derived_file_is_rebuilt_when_truncated_edited_or_unrecorded(tmp_path):
    built = []

    def build(tmp):
        built.append(1)
        tmp.write_bytes(b"derived content\n" * 100)

    path = tmp_path / "x.jsonl"
    cache.derived(path, build)
    assert len(built) == 1 and (tmp_path / "x.jsonl.sha256").read_text() == cache.sha256_of(path)
    cache.derived(path, build)
    assert len(built) == 1  # verified: not rebuilt
    for damage in (lambda: path.write_bytes(path.read_bytes()[:50]),  # truncated
                   lambda: path.write_bytes(path.read_bytes().replace(b"derived", b"altered")),  # edited
                   lambda: (tmp_path / "x.jsonl.sha256").unlink()):  # made before records existed
        damage()
        cache.derived(path, build)
        assert path.read_bytes() == b"derived content\n" * 100
    assert len(built) == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_derived_folder_is_rebuilt_whole_when_one_file_differs(tmp_path):
    def build(out):
        for name in ("a", "b"):
            (out / name).write_text(name * 1000)

    folder = tmp_path / "wordnet"
    cache.derived_folder(folder, build)
    stamp = os.stat(folder / "a").st_mtime_ns
    cache.derived_folder(folder, build)
    assert os.stat(folder / "a").st_mtime_ns == stamp  # verified: kept
    (folder / "b").write_text("b" * 10)
    cache.derived_folder(folder, build)
    assert (folder / "b").read_text() == "b" * 1000


def test_a_derived_folder_is_read_again_only_when_a_file_of_it_changes(tmp_path, monkeypatch):
    """A check of a derived folder (SmolLM2's 630 MB of fp32 weights, read whole on every load before) reads each
    file once, then trusts its size, inode and times until one changes; a file written within :data:`cache.RACY_NS`
    of the check is read on every check (its times could survive a second write within the clock's tick)."""
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "cache"))
    read: list[str] = []  # the name of each file hashed, once a read
    sha256_of = cache.sha256_of

    def reading(path):
        read.append(path.name)
        return sha256_of(path)

    monkeypatch.setattr(cache, "sha256_of", reading)

    def build(out):
        for name in ("a", "b"):
            (out / name).write_text(name * 1000)

    folder = tmp_path / "fp32"
    cache.derived_folder(folder, build)
    monkeypatch.setattr(cache, "RACY_NS", 10**15)  # (the checks below within it of the write, however slow)
    read.clear()
    cache.derived_folder(folder, build)
    cache.derived_folder(folder, build)
    assert read == ["a", "b", "a", "b"]  # just written: read on each check, never remembered

    monkeypatch.setattr(cache, "RACY_NS", 0)  # (as if written long ago)
    read.clear()
    cache.derived_folder(folder, build)
    cache.derived_folder(folder, build)
    assert read == ["a", "b"]  # read once, then known by its times
    stamp = os.stat(folder / "b").st_mtime_ns
    (folder / "b").write_text("x" * 1000)  # damaged, the same size, a later time
    os.utime(folder / "b", ns=(stamp + 10**9, stamp + 10**9))
    read.clear()
    cache.derived_folder(folder, build)
    assert "b" in read and (folder / "b").read_text() == "b" * 1000  # read again, found changed, rebuilt


def test_two_processes_wanting_one_derived_file_make_it_once(tmp_path):
    """A second test worker, a Ray worker or another app on the machine that needs the same cache file while the
    first one makes it waits, then finds it made (a lock file beside it), instead of making it again over it."""
    import threading
    import time

    built = []

    def build(out):
        built.append(threading.get_ident())
        time.sleep(0.3)  # long enough for the other one to arrive while this one builds
        if out.is_dir():
            (out / "a").write_text("a" * 1000)
        else:
            out.write_bytes(b"derived content\n" * 100)

    for make, path in ((cache.derived, tmp_path / "x.jsonl"), (cache.derived_folder, tmp_path / "wordnet")):
        built.clear()
        workers = [threading.Thread(target=make, args=(path, build)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert len(built) == 1, make.__name__
        assert make(path, build) == path and len(built) == 1  # verified, kept


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A cache folder of its own, holding links to the verified archives of the shared one."""
    shared = cache.cache_dir()
    for archive in shared.iterdir():
        if archive.suffix in (".whl", ".tgz"):
            (tmp_path / archive.name).symlink_to(archive)
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path))
    return tmp_path


def test_truncated_caches_of_the_real_data_are_rebuilt(own_cache):
    """The converted EWT sentences and the WordNet database (SmolLM2's GGUF and fp32 copy: tests/test_models.py)."""
    from probes.datasets import dependencies, wordnet

    assert len(dependencies.ewt("dev")) == 2002
    converted = own_cache / "ewt-dev.v2.jsonl"
    converted.write_bytes(converted.read_bytes()[: converted.stat().st_size * 3 // 4])  # a quarter lost
    assert len(dependencies.ewt("dev")) == 2002  # (a truncated cache used to give fewer, silently)

    folder = wordnet.data_dir()
    index = folder / "index.noun"
    index.write_bytes(index.read_bytes()[:1000])
    assert wordnet.data_dir() == folder and index.stat().st_size > 1000
