"""probes.jobs: the bounds on a probe table read back for the app."""

from __future__ import annotations

import pytest

from probes import jobs


def million_rows(n: int = 1_000_000) -> bytes:
    """A probe table of ``n`` rows for a 6-layer, 12-head model: every head of about n / 72 labels."""
    return ("label,layer,head,score\n" + "".join(f"label-{i // 72},{(i % 72) // 12},{i % 12},0.{i % 9973:04d}\n"
                                                for i in range(n))).encode()


def test_a_million_row_table_is_read_and_two_million_and_one_are_refused_naming_the_count():
    frame = jobs.read_table(million_rows(), "big.csv", n_layers=6, n_heads=12)
    assert len(frame) == 1_000_000 and frame["label"].nunique() == 13_889
    over = b"label,layer,head,score\n" + b"x,0,0,0.5\n" * 2_000_001
    with pytest.raises(jobs.BadData, match="big.csv: 2,000,001 rows, more than the 2,000,000 a table shown here"):
        jobs.read_table(over, "big.csv")


# -- outputs: checked all at once, claimed without making folders, written with the umask's permissions (issue 40) --

@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_written_file_has_the_permissions_the_umask_gives(tmp_path, umask, mode):
    """mkstemp made every output 0o600, whatever the umask: a table written for a team was readable by its owner
    only. A replaced file gets them too."""
    import os

    before = os.umask(umask)
    try:
        jobs.write_file(tmp_path / "t.csv", b"a\n1\n")
        jobs.write_file(tmp_path / "t.csv", b"a\n2\n")  # a replaced file (--force) is a new file
    finally:
        os.umask(before)
    assert (tmp_path / "t.csv").stat().st_mode & 0o777 == mode
    assert (tmp_path / "t.csv").read_bytes() == b"a\n2\n" and [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_claim_makes_no_folder_and_refuses_a_lock_it_cannot_make(tmp_path):
    missing = tmp_path / "new" / "t.csv"
    with pytest.raises(jobs.CannotWrite, match=r"cannot write --csv .*/new/t\.csv: its lock file .* cannot be made "
                                               r"\(No such file or directory\): choose another --csv"):
        jobs.claim(missing, flag="--csv")
    assert not (tmp_path / "new").exists()
    with pytest.raises(jobs.CannotWrite, match=r"cannot write --out /proc/t\.csv: .*choose another --out"):
        jobs.claim(jobs.Path("/proc/t.csv"))


def test_check_outputs_refuses_two_outputs_that_are_one_file_and_keeps_no_claim(tmp_path):
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")  # another name of a.csv, which does not exist yet
    for outputs, says in (({"--csv": tmp_path / "a.csv", "--bands-csv": tmp_path / "b.csv"}, "is also --csv"),
                          ({"--out": tmp_path / "a.csv", "--copy": tmp_path / "." / "a.csv"}, "is also --out")):
        with pytest.raises(jobs.CannotWrite, match=says):
            jobs.check_outputs(outputs)
    (tmp_path / "c.csv").write_text("mine\n")  # the second exists: the first, claimed already, is given back
    with pytest.raises(jobs.CannotWrite, match="--two .*c.csv exists: pass --force"):
        jobs.check_outputs({"--one": tmp_path / "x.csv", "--two": tmp_path / "c.csv"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.csv", "c.csv"] and not jobs._CLAIMS


def test_check_out_takes_the_bad_items_file_as_its_own(tmp_path):
    """OUT.bad.txt is replaced without --force (a rerun rewrites it), claimed while the run writes, and refused when
    it is a folder or the input."""
    out = tmp_path / "t.csv"
    jobs.bad_path(out).write_text("an earlier run's\n")
    try:
        jobs.check_out(out)
        assert (tmp_path / "t.csv.lock").exists() and (tmp_path / "t.csv.bad.txt.lock").exists()
    finally:
        jobs.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv.bad.txt"]
    with pytest.raises(jobs.CannotWrite, match=r"t\.csv\.bad\.txt \(written beside --out\) is the input file "
                                               r"\(--data\)"):
        jobs.check_out(out, inputs={"--data": str(jobs.bad_path(out))})
    jobs.bad_path(out).unlink()
    jobs.bad_path(out).mkdir()
    with pytest.raises(jobs.CannotWrite, match=r"t\.csv\.bad\.txt \(written beside --out\) is a folder"):
        jobs.check_out(out)
    assert not jobs._CLAIMS


def _unread(monkeypatch):
    """pandas' CSV reader made to fail the test: what is refused must be refused before the file is parsed."""
    def read_csv(*args, **kwargs):
        raise AssertionError("pandas read the upload")
    monkeypatch.setattr(jobs.pd, "read_csv", read_csv)


def test_a_header_of_100k_columns_is_refused_from_its_first_bytes(monkeypatch):
    """The issue's bomb, smaller: a header of 100,000 names (pandas makes a column of each: minutes for 1.5 M)."""
    _unread(monkeypatch)
    raw = ("label,layer,head,score," + ",".join(f"c{i}" for i in range(100_000)) + "\nx,0,0,0.5\n").encode()
    with pytest.raises(jobs.BadData, match=f"wide.csv: the header line is longer than {jobs.MAX_HEADER:,} bytes; a "
                                           f"probe table's header names up to {jobs.MAX_COLUMNS} columns"):
        jobs.read_table(raw, "wide.csv")


def test_a_short_header_of_too_many_names_is_refused_naming_the_count(monkeypatch):
    _unread(monkeypatch)
    raw = ("label,layer,head,score," + ",".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(1000))
           + "\nx,0,0,0.5\n").encode()
    with pytest.raises(jobs.BadData, match="wide.csv: the header names 1,004 columns; a probe table has up to 64"):
        jobs.read_table(raw, "wide.csv")


def test_more_rows_than_the_bound_are_counted_before_pandas_reads_them(monkeypatch):
    _unread(monkeypatch)
    over = b"label,layer,head,score\n" + b"x,0,0,0.5\n" * 2_000_000 + b"x,0,0,0.5"  # no newline after the last row
    with pytest.raises(jobs.BadData, match="big.csv: 2,000,001 rows, more than the 2,000,000"):
        jobs.read_table(over, "big.csv")


def test_a_row_of_more_fields_than_the_header_is_cut_to_its_columns():
    """pandas takes a first row of extra fields as an index of that many levels (a 9 M-field row ran for minutes):
    the table keeps the header's four columns, with the row's first four values."""
    raw = b"label,layer,head,score\nx,1,2,0.5" + b",9" * 10_000 + b"\ny,0,3,0.25\n"
    frame = jobs.read_table(raw, "extra.csv", n_layers=6, n_heads=12)
    assert list(frame.columns) == ["label", "layer", "head", "score"]
    assert frame.values.tolist() == [["x", 1, 2, 0.5], ["y", 0, 3, 0.25]]


def test_a_checkpoint_from_other_inputs_is_dropped_with_a_note_naming_them(tmp_path):
    """Issue 40: a result is computed *from* data, a model, code and options, *with* a tokenizer; the note of a
    checkpoint started afresh names each part that changed."""
    print_ = {"data": "d", "model": "m", "tokenizer": "t", "code": "c", "options": "o"}
    notes: list[str] = []
    first = jobs.checkpoint(tmp_path, "positional", print_, notes.append)
    second = jobs.checkpoint(tmp_path, "positional", {**print_, "tokenizer": "t2"}, notes.append)
    jobs.checkpoint(tmp_path, "positional", {**print_, "data": "d2", "model": "m2", "tokenizer": "t3"}, notes.append)
    assert notes[0] == f"positional: the checkpoint in {first} was computed with another tokenizer: starting afresh"
    assert notes[1] == (f"positional: the checkpoint in {second} was computed from another data, model, with "
                        "another tokenizer: starting afresh")
    assert not first.exists() and not second.exists() and len(list(tmp_path.iterdir())) == 1
