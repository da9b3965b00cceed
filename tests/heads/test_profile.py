"""The profile runner: exact combination of checkpointed chunks, resume after an interrupt, atomic
output, formats, and bad data files through the CLI."""

import pandas as pd
import pytest

from probes.__main__ import main
from probes.heads import profile as prof


def _by_key(frame):
    return frame.set_index(["probe", "label", "layer", "head"]).sort_index()


@pytest.mark.parametrize("probe", ["syntactic", "positional", "patterns", "lexical"])
def test_chunks_combine_exactly(minilm, tmp_path, probe):
    whole = prof.profile(minilm, [probe], "ewt-dev", 30, tmp_path / "a.csv", checkpoint_every=100)
    chunked = prof.profile(minilm, [probe], "ewt-dev", 30, tmp_path / "b.csv", checkpoint_every=7)
    a, b = _by_key(whole), _by_key(chunked)
    assert a.index.equals(b.index)
    for col in ("score", "baseline", "n"):
        assert ((a[col] - b[col]).abs().fillna(0) < 1e-6).all(), col
    if probe == "positional":
        pos = a.index.get_level_values("label") == "positional"
        assert (a.loc[pos, "offset"].astype(int).values == b.loc[pos, "offset"].astype(int).values).all()


def test_resume_after_an_interrupt_recomputes_nothing(minilm, tmp_path, monkeypatch):
    out = tmp_path / "syn.json"
    real = prof.make_job
    calls = []

    def counting(*args, fail_at=None, **kwargs):
        job = real(*args, **kwargs)
        run = job.run

        def wrapped(model, chunk, progress):
            calls.append(chunk[0].id)
            if fail_at is not None and len(calls) == fail_at:
                raise KeyboardInterrupt
            return run(model, chunk, progress)

        job.run = wrapped
        return job

    monkeypatch.setattr(prof, "make_job", lambda *a, **k: counting(*a, fail_at=3, **k))
    with pytest.raises(KeyboardInterrupt):
        prof.profile(minilm, ["syntactic"], "ewt-dev", 25, out, checkpoint_every=5)
    assert not out.exists()  # no truncated output
    assert len(list((tmp_path / "syn.json.partial").rglob("chunk-*.csv"))) == 2
    done_before = list(calls[:2])
    calls.clear()
    monkeypatch.setattr(prof, "make_job", counting)
    resumed = prof.profile(minilm, ["syntactic"], "ewt-dev", 25, out, checkpoint_every=5)
    assert len(calls) == 3 and not set(calls) & set(done_before)  # only the three missing chunks ran
    assert out.exists() and not (tmp_path / "syn.json.partial").exists()
    fresh = prof.profile(minilm, ["syntactic"], "ewt-dev", 25, tmp_path / "fresh.csv", checkpoint_every=5)
    assert (_by_key(resumed)["score"] - _by_key(fresh)["score"]).abs().max() < 1e-9


@pytest.mark.parametrize("suffix", [".csv", ".json", ".parquet"])
def test_output_formats(minilm, tmp_path, suffix):
    out = tmp_path / f"ind{suffix}"
    frame = prof.profile(minilm, ["induction"], None, 4, out)
    back = {".csv": pd.read_csv, ".json": pd.read_json, ".parquet": pd.read_parquet}[suffix](out)
    assert len(back) == len(frame) and list(back.columns[:7]) == ["probe", "label", "layer", "head", "score",
                                                                   "baseline", "n"]


def test_cli_bad_data_files_exit_2_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tThe\tthe\tDET\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    cases = [
        (["--probe", "syntactic", "--data", str(bad)], "bad.conllu:1: not valid CoNLL-U"),
        (["--probe", "positional", "--data", str(empty)], "empty.txt:1: no sentences"),
        (["--probe", "syntactic", "--data", str(tmp_path / "missing.conllu")], "no data file"),
        (["--probe", "coreference", "--data", "ewt-dev"], "needs pronoun/antecedent items"),
        (["--probe", "positional", "--data", str(bad), "--out", str(tmp_path / "x.xlsx")], ".csv, .json or .parquet"),
    ]
    for args, says in cases:
        full = ["profile", "--model", "minilm", "--out", str(tmp_path / "out.csv"), *args]
        assert main(full) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (args, err)


def test_cli_prints_top_heads(tmp_path, capsys):
    assert main(["profile", "--model", "minilm", "--probe", "positional", "--limit", "8",
                 "--out", str(tmp_path / "p.csv"), "--top", "1"]) == 0
    table = capsys.readouterr().out
    assert "previous" in table and "positional" in table
