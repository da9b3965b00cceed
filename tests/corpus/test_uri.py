"""Corpora given as URIs that Ray Data reads (``--corpus file:///…``, ``s3://…``), and local paths with ``--ray``:
the driver reads the corpus once and every chunk carries its texts, so no worker opens it. The same table as
the path read chunk by chunk on one process, bad rows reported with their line, and a store that cannot be
read refused in one line."""

import json

import pandas as pd
import pytest
import ray  # the [ray] extra, which the README's install includes: missing, this fails rather than skips

from probes import cluster
from probes.cli import main, profile as profile_cli
from probes.corpus import ray_pool, run as corpus_run
from probes.corpus.ray_data import DatasetCorpus
from probes.corpus.reader import Corpus

# one local Ray at a time; bitwise: its numeric test compares a URI corpus's table with a local path's, exactly (one
# computation, one order), so the numeric re-run (other CPU kernels: both sides change alike) leaves it out
pytestmark = [pytest.mark.bitwise, pytest.mark.xdist_group("ray")]

TEXTS = [f"Text {i}: the cat sat on mat {i}, and then it slept because it was tired." for i in range(10)]


@pytest.fixture(scope="module")
def local_ray():
    started = cluster.start(None, cpus=2)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _write(path, bad_line: bytes):
    """The texts, one a line (JSONL objects for .jsonl), with ``bad_line`` as line 4 and a blank line 7."""
    rows = [(json.dumps({"text": t}) if path.suffix == ".jsonl" else t).encode() for t in TEXTS]
    path.write_bytes(b"\n".join(rows[:3] + [bad_line] + rows[3:5] + [b""] + rows[5:]) + b"\n")
    return path


class DeleteOnStart:
    """A progress bar whose creation (after the driver's scan, before any chunk runs) deletes the corpus."""

    def __init__(self, path):
        self.path = path

    def __call__(self, total, name):
        self.path.unlink()
        self.total, self.done = total, 0
        return self

    def update(self, n):
        self.done += n

    def close(self):
        pass


@pytest.mark.numeric  # tables of floats, compared exactly (the same worker, threads and batches)
@pytest.mark.parametrize("suffix, bad, said", [(".jsonl", b"{broken", "not JSON"),
                                               (".txt", b"caf\xff", "not UTF-8 text")])
def test_a_uri_corpus_gives_the_local_path_table_and_no_worker_opens_it(local_ray, gpt2_model, tmp_path, suffix, bad,
                                                                     said, one_thread):
    path = _write(tmp_path / f"c{suffix}", bad)
    window, chunk_size = 16, 3  # every run's
    # the path, read here chunk by chunk on one process and one thread (one_thread), as each Ray worker (one CPU)
    # computes: the same chunks in the same batches, so the same sums in the same order (tests/corpus/test_multinode.py
    # proves a path's run on Ray equal to it, exactly; a third pool of Ray workers here was a third of this test's time)
    by_path, ex_path = corpus_run.profile_corpus([gpt2_model], Corpus(str(path)), tmp_path / "path.csv",
                                                 window=window, chunk_size=chunk_size)
    saved = path.read_bytes()
    local = [("local", DatasetCorpus(str(path)))] if suffix == ".jsonl" else []  # --ray with a path: read here
    for name, corpus in [("uri", DatasetCorpus(path.as_uri())), *local]:
        scan = corpus.scan(3)
        assert scan.bad[0].startswith(f"{path.name} line 4: {said}") and scan.blank == 1  # the local reader's words
        assert scan.digest == Corpus(str(path)).scan(3).digest  # one content, one checkpoint fingerprint
        notes: list[str] = []
        bar = DeleteOnStart(path)
        table, found = corpus_run.profile_corpus([gpt2_model], corpus, tmp_path / f"{name}.csv",
                                                 executor=ray_pool.executor(1), notify=notes.append,
                                                 progress_factory=bar, window=window, chunk_size=chunk_size)
        assert not path.exists() and (bar.total, bar.done) == (4, 4)  # gone before the chunks ran: none opened it
        assert any(f"{path.name} line 4: {said}" in note for note in notes)
        pd.testing.assert_frame_equal(table, by_path, check_exact=True)  # max |Δ| = 0
        pd.testing.assert_frame_equal(found, ex_path, check_exact=True)
        path.write_bytes(saved)


def test_a_bad_row_of_a_uri_corpus_is_reported_with_its_line(local_ray, gpt2_dir, tmp_path, capsys):
    path = _write(tmp_path / "c.jsonl", b'{"title": "no text here"}')
    out = tmp_path / "t.csv"
    assert main(["profile", "--corpus", path.as_uri(), "--model", str(gpt2_dir), "--out", str(out), "--window", "16",
                 "--checkpoint-every", "4", "--ray", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "c.jsonl line 4: no 'text' field (it has 'title')" in err and "Traceback" not in err
    assert (tmp_path / "t.csv.bad.txt").read_text() == "c.jsonl line 4: no 'text' field (it has 'title')\n"
    assert len(pd.read_csv(out)) > 0


def _stop():
    raise RuntimeError("the run went past the refusal it should have made")


@pytest.mark.parametrize("corpus, ray_flag, message", [
    ("s3://probes-test-no-such-bucket/c.jsonl", ["--ray"], "copy the file here and give its path"),
    ("file:///no/such/folder/c.jsonl", ["--ray"], "no such file"),
    ("ftp://example.org/c.txt", ["--ray"], "give an s3://, gs://, file:/// URI"),
    ("file:///no/such/folder/c.jsonl", [], "add --ray"),
])
def test_a_uri_that_cannot_be_read_exits_2_with_one_line_at_once(tmp_path, capsys, monkeypatch, corpus, ray_flag,
                                                                  message):
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no wait on a cloud machine's metadata service
    started: list[str] = []  # refused before Ray starts or a model loads: either would be written down here (not timed)

    def starts(name: str):
        def start(*args, **kwargs):
            started.append(name)
            _stop()

        return start

    for owner, name in ((ray, "init"), (profile_cli, "load_model")):
        monkeypatch.setattr(owner, name, starts(name))
    assert main(["profile", "--corpus", corpus, "--out", str(tmp_path / "t.csv"), *ray_flag]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert started == []
