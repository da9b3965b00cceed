"""The profile runner: exact combination of checkpointed chunks, resume after an interrupt, atomic
output, formats, and bad data files through the CLI."""

import re

import pandas as pd
import pytest
from numeric import F64

from probes import jobs
from probes.cli import main
from probes.heads import profile as prof


def _by_key(frame):
    return frame.set_index(["probe", "label", "layer", "head"]).sort_index()


def _f64(column) -> float:
    """Float64 agreement at a column's scale (distances count tokens and entropies nats, not fractions)."""
    return F64 * max(1.0, column.abs().max())


@pytest.mark.numeric
@pytest.mark.parametrize("probe,data", [("syntactic", "ewt-dev"), ("positional", "ewt-dev"), ("patterns", "ewt-dev"),
                                        ("lexical", "ewt-dev"), ("coreference", "winobias")])
def test_chunks_combine_exactly(minilm64, tmp_path, probe, data):
    # in float64: other chunks batch other texts together (other padding, other sums)
    whole = prof.profile(minilm64, [probe], data, 30, tmp_path / "a.csv", checkpoint_every=100)
    chunked = prof.profile(minilm64, [probe], data, 30, tmp_path / "b.csv", checkpoint_every=7)
    a, b = _by_key(whole), _by_key(chunked)
    assert a.index.equals(b.index)
    for col in ("score", "baseline", "n"):
        assert ((a[col] - b[col]).abs().fillna(0) <= _f64(a[col])).all(), col
    if probe == "positional":
        pos = a.index.get_level_values("label") == "positional"
        assert (a.loc[pos, "offset"].astype(int).values == b.loc[pos, "offset"].astype(int).values).all()


@pytest.mark.numeric
def test_resume_after_an_interrupt_recomputes_nothing(minilm64, tmp_path, monkeypatch):
    out = tmp_path / "syn.json"
    real = prof.run_chunk
    calls = []

    def counting(probe, model, chunk, *args, fail_at=None, **kwargs):
        calls.append(chunk[0].id)
        if fail_at is not None and len(calls) == fail_at:
            raise KeyboardInterrupt
        return real(probe, model, chunk, *args, **kwargs)

    monkeypatch.setattr(prof, "run_chunk", lambda *a, **k: counting(*a, fail_at=3, **k))
    with pytest.raises(KeyboardInterrupt):
        prof.profile(minilm64, ["syntactic"], "ewt-dev", 25, out, checkpoint_every=5)
    assert not out.exists()  # no truncated output
    assert len(list((tmp_path / "syn.json.partial").rglob("chunk-*.csv"))) == 2
    done_before = list(calls[:2])
    calls.clear()
    monkeypatch.setattr(prof, "run_chunk", counting)
    resumed = prof.profile(minilm64, ["syntactic"], "ewt-dev", 25, out, checkpoint_every=5)
    assert len(calls) == 3 and not set(calls) & set(done_before)  # only the three missing chunks ran
    assert out.exists() and not (tmp_path / "syn.json.partial").exists()
    fresh = prof.profile(minilm64, ["syntactic"], "ewt-dev", 25, tmp_path / "fresh.csv", checkpoint_every=5)
    assert (_by_key(resumed)["score"] - _by_key(fresh)["score"]).abs().max() <= F64  # accuracies, in float64


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
    out = capsys.readouterr()
    assert "previous" in out.out and "positional" in out.out
    assert "torch threads:" in out.err.strip().splitlines()[-1]  # how many, and why, beside "wrote"


def test_cli_threads_from_the_option_or_the_environment(tmp_path, capsys, monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("PROBES_THREADS", "2")
        assert main(["profile", "--probe", "positional", "--limit", "2", "--out", str(tmp_path / "a.csv"),
                     "--threads", "1"]) == 0
        assert capsys.readouterr().err.strip().endswith("(torch threads: 1 (--threads))")
        assert main(["profile", "--probe", "positional", "--limit", "2", "--out", str(tmp_path / "b.csv")]) == 0
        assert capsys.readouterr().err.strip().endswith("(torch threads: 2 (PROBES_THREADS))")
        monkeypatch.setenv("PROBES_THREADS", "all")
        assert main(["profile", "--probe", "positional", "--limit", "2", "--out", str(tmp_path / "c.csv")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "PROBES_THREADS='all'" in err[0], err
        assert not (tmp_path / "c.csv").exists()
    finally:
        torch.set_num_threads(before)


@pytest.mark.numeric
def test_run_probe_in_memory_matches_the_written_profile_and_reports_progress(minilm64, tmp_path):
    written = prof.profile(minilm64, ["positional"], "ewt-dev", 12, tmp_path / "p.csv")
    seen = []
    table = prof.run_probe(minilm64, "positional", 12, progress=lambda done, total: seen.append((done, total)))
    a, b = _by_key(written), _by_key(table)
    assert a.index.equals(b.index) and ((a["score"] - b["score"]).abs() <= _f64(a["score"])).all()
    assert seen[-1] == (12, 12) and all(total == 12 for _, total in seen)
    assert not list(tmp_path.glob("*.partial"))
    for frame in (written, table, pd.read_csv(tmp_path / "p.csv")):  # every table knows its model
        assert set(frame["model"]) == {"minilm"} and set(frame["n_layers"]) == {6} and set(frame["n_heads"]) == {12}


def test_read_table_reads_what_profile_writes_and_refuses_what_it_cannot_use(minilm, tmp_path):
    written = prof.profile(minilm, ["patterns"], "ewt-dev", 5, tmp_path / "p.csv")
    back = jobs.read_table((tmp_path / "p.csv").read_bytes(), "p.csv")
    assert len(back) == len(written) and back["layer"].dtype.kind == "i"
    for raw, message in [
        (b"a,b\n1,2\n", "p.csv: missing column(s) label, layer, head, score"),
        (b"label,layer,head,score\nx,one,0,0.5\n", "column 'layer' holds non-numbers"),
        (b"label,layer,head,score\nx,-1,0,0.5\n", "whole numbers from 0"),
        (b"label,layer,head,score\n", "no rows"),
        (b"\xff\xfe\x00garbage", "p.csv"),
        (b"label,layer,head,score\nx,1000000,0,0.5\n", "layer 1000000 is outside this model's layers (0–5)"),
        (b"label,layer,head,score\nx,0,12,0.5\n", "head 12 is outside this model's heads (0–11)"),
        (b"label,layer,head,score\nx,0,0,inf\n", "scores must be finite numbers"),
        (b"label,layer,head,score\nx,0,0,1e300\n", "scores must be finite numbers"),
        (b"label,layer,head,score\nx,0,0,\ny,1,1,\n", "the score column is empty"),
        (b"label,layer,head,score\nx,0,0,0.5\n" + b"y" * 2**20 + b",1,1,0.5\n",
         "p.csv line 3: a label of 1,048,576 characters; labels are at most 200"),  # it froze a browser tab
        (b"label,layer,head,score\n" + b"x,0,0,0.5\n" * (jobs.MAX_ROWS + 1),
         f"{jobs.MAX_ROWS + 1:,} rows, more than the {jobs.MAX_ROWS:,}"),
    ]:
        with pytest.raises(jobs.BadData, match=re.escape(message)):
            jobs.read_table(raw, "p.csv", n_layers=6, n_heads=12)


def test_cli_counts_must_be_positive(tmp_path, capsys):
    for flag, value in (("--limit", "0"), ("--limit", "-5"), ("--batch-size", "-1"), ("--batch-size", "0"),
                        ("--checkpoint-every", "0"), ("--top", "x"), ("--threads", "0")):
        with pytest.raises(SystemExit) as stop:
            main(["profile", "--probe", "positional", "--out", str(tmp_path / "o.csv"), flag, value])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flag}: expected" in err, err
    assert not (tmp_path / "o.csv").exists()


def test_cli_out_is_checked_before_anything_runs(tmp_path, capsys, monkeypatch):
    existing = tmp_path / "done.csv"
    existing.write_text("probe,label\n")
    base = ["profile", "--model", "minilm", "--probe", "positional", "--limit", "4"]
    cases = [(["--out", str(tmp_path)], "is a folder"),
             (["--out", str(existing)], "exists: pass --force to replace it")]
    for args, says in cases:
        assert main([*base, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert existing.read_text() == "probe,label\n"  # untouched
    assert main([*base, "--out", str(existing), "--force"]) == 0
    capsys.readouterr()
    assert "positional" in existing.read_text()

    import errno

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jobs, "write_atomic", full)
    assert main([*base, "--out", str(tmp_path / "new.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # the progress bar, closed, then the message
    assert err[-1].startswith("error: could not write") and "No space left on device; free some space" in err[-1]
    assert sum("error" in line for line in err) == 1


def test_cli_device_the_machine_lacks_is_one_line(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device, says in (("cuda", "no CUDA GPU"), ("tpu", "unknown device 'tpu'"), ("meta", "not supported here")):
        assert main(["profile", "--probe", "positional", "--out", str(tmp_path / "d.csv"), "--device", device]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (device, err)
        assert main(["parity", "--text", "hi", "--device", device]) == 2
        assert says in capsys.readouterr().err


@pytest.mark.numeric
def test_resume_never_reuses_chunks_from_other_inputs(minilm64, gpt2_model, tmp_path, monkeypatch):
    """Interrupt, edit the data file, rerun the same command: the old chunks are dropped (and the note says
    the data changed), and the result equals a fresh run on the edited file; likewise for another model
    and other code."""
    data = tmp_path / "sents.txt"
    lines = [f"Sentence number {i} is about the cat on the mat." for i in range(8)]
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "pos.csv"
    real = prof.run_chunk
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(prof, "run_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prof.profile(minilm64, ["positional"], str(data), None, out, checkpoint_every=4)
    monkeypatch.setattr(prof, "run_chunk", real)
    data.write_text("\n".join(["Completely different words , here ; and there !"] * 3 + lines[3:]) + "\n")
    notes: list[str] = []
    resumed = prof.profile(minilm64, ["positional"], str(data), None, out, checkpoint_every=4, notify=notes.append)
    assert len(notes) == 1 and "computed from another data: starting afresh" in notes[0]
    fresh = prof.profile(minilm64, ["positional"], str(data), None, tmp_path / "fresh.csv", checkpoint_every=4)
    # the same chunks computed again, in float64
    pd.testing.assert_frame_equal(_by_key(resumed), _by_key(fresh), check_exact=False, rtol=0,
                                  atol=_f64(resumed["score"]))

    for change, model, says in (("model", gpt2_model, "another model"), ("code", minilm64, "another code")):
        monkeypatch.setattr(prof, "run_chunk", interrupted)
        calls.clear()
        with pytest.raises(KeyboardInterrupt):
            prof.profile(minilm64, ["positional"], str(data), None, out, checkpoint_every=4)
        monkeypatch.setattr(prof, "run_chunk", real)
        if change == "code":
            monkeypatch.setattr(prof, "code_version", lambda: "edited")
        notes.clear()
        prof.profile(model, ["positional"], str(data), None, out, checkpoint_every=4, notify=notes.append)
        assert len(notes) == 1 and says in notes[0], notes


HE_AND_SHE = ["She said that he would come back tomorrow morning.",
              "Xiaoming gave the apple to Xiaohong because she was hungry.",
              "He sat on the mat, and she watched him from the door.",
              "The cat sat on the mat, and the dog watched it from the door."]


@pytest.mark.numeric
def test_a_checkpoint_made_with_another_tokenizer_is_not_reused(gpt2_dir, tmp_path, monkeypatch):
    """Issue 40: between an interrupted run and its rerun, "she" and "he" swap ids in the model's tokenizer.json
    (config and weights unchanged): the rerun says the tokenizer changed and starts afresh, so its result is a
    fresh run's; it used to resume from the old chunks, silently wrong in most scores."""
    import shutil

    import torch
    from checkpoints import swap_tokens

    from probes.models import load  # probes.load's model here, whose .cast the test needs

    folder = tmp_path / "gpt2"
    shutil.copytree(gpt2_dir, folder)
    data = tmp_path / "d.txt"
    data.write_text("\n".join(HE_AND_SHE * 2) + "\n")
    out = tmp_path / "pos.csv"
    real, calls = prof.run_chunk, []

    def interrupted(*args, **kwargs):  # two chunks written, then Ctrl-C
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    before = load(str(folder)).cast(torch.float64)
    monkeypatch.setattr(prof, "run_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prof.profile(before, ["positional"], str(data), None, out, checkpoint_every=2)
    monkeypatch.setattr(prof, "run_chunk", real)
    swap_tokens(folder, "Ġhe", "Ġshe")
    after = load(str(folder)).cast(torch.float64)
    assert after.fingerprint() == before.fingerprint()  # the same config and weights: only the tokenizer differs
    assert after.tokenizer_fingerprint() != before.tokenizer_fingerprint()
    notes: list[str] = []
    resumed = prof.profile(after, ["positional"], str(data), None, out, checkpoint_every=2, notify=notes.append)
    assert len(notes) == 1 and "was computed with another tokenizer: starting afresh" in notes[0], notes
    fresh = prof.profile(after, ["positional"], str(data), None, tmp_path / "fresh.csv", checkpoint_every=2)
    pd.testing.assert_frame_equal(_by_key(resumed), _by_key(fresh), check_exact=False, rtol=0,
                                  atol=_f64(resumed["score"]))
    old = prof.profile(before, ["positional"], str(data), None, tmp_path / "old.csv", checkpoint_every=2)
    assert (_by_key(old)["score"] - _by_key(fresh)["score"]).abs().max() > 1e-3  # the swap changes the scores


def test_the_model_fingerprint_tells_checkpoints_apart(gpt2_model, gpt2_dir, ckpt_dir):
    from checkpoints import make_gpt2

    import probes

    assert gpt2_model.fingerprint() == probes.load(str(gpt2_dir)).fingerprint()  # same weights, same print
    other = make_gpt2(ckpt_dir / "gpt2-other", std=0.31)
    assert probes.load(str(other)).fingerprint() != gpt2_model.fingerprint()


def _conllu(tmp_path, good: int, self_loops: int):
    """A CoNLL-U file: ``self_loops`` sentences whose first word is its own head, then ``good`` good ones."""
    good_block = "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n" \
                 "3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n"
    bad_block = good_block.replace("\t2\tdet", "\t1\tdet")
    path = tmp_path / "mixed.conllu"
    path.write_text("\n".join([bad_block] * self_loops + [good_block] * good))
    return path


def test_bad_items_are_skipped_counted_and_all_listed(tmp_path, capsys):
    data = _conllu(tmp_path, good=6, self_loops=13)
    out = tmp_path / "syn.csv"
    assert main(["profile", "--probe", "syntactic", "--data", str(data), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: syntactic: skipped 13 bad item(s)" in err and "and 3 more" in err
    assert "13 × word N is its own head (a self-loop)" in err  # counted by reason
    shown = [line for line in err.splitlines() if line.startswith("  ") and "is its own head" in line]
    assert len(shown) == 10 and shown[0].strip() == f"{data}:1: word 1 is its own head (a self-loop)"
    side = (tmp_path / "syn.csv.bad.txt").read_text().splitlines()
    assert len(side) == 13 and side[1] == f"{data}:5: word 1 is its own head (a self-loop)"
    assert pd.read_csv(out)["n"].max() > 0  # the six good sentences were scored


def test_strict_stops_on_any_bad_item_listing_them_all(tmp_path, capsys):
    data = _conllu(tmp_path, good=6, self_loops=13)
    out = tmp_path / "syn.csv"
    assert main(["profile", "--probe", "syntactic", "--data", str(data), "--out", str(out), "--strict"]) == 2
    err = capsys.readouterr().err
    assert "error: 13 bad item(s)" in err and err.count("is its own head") == 13
    assert not out.exists()


def test_nothing_usable_or_nothing_to_score_exits_2(tmp_path, capsys):
    data = _conllu(tmp_path, good=0, self_loops=2)
    assert main(["profile", "--probe", "syntactic", "--data", str(data), "--out", str(tmp_path / "a.csv")]) == 2
    assert "syntactic: no usable items" in capsys.readouterr().err
    untagged = tmp_path / "untagged.conllu"
    untagged.write_text("1\tHello\thello\t_\t_\t_\t2\tdiscourse\t_\t_\n2\tthere\tthere\t_\t_\t_\t0\troot\t_\t_\n")
    assert main(["profile", "--probe", "lexical", "--data", str(untagged), "--out", str(tmp_path / "b.csv")]) == 2
    err = capsys.readouterr().err
    assert "no part-of-speech tags" in err and not (tmp_path / "b.csv").exists()
    # --probe all: a probe with nothing to score is skipped with a note, the others write their rows
    assert main(["profile", "--probe", "all", "--data", str(untagged), "--out", str(tmp_path / "c.csv")]) == 0
    err = capsys.readouterr().err
    assert "skipped lexical: no usable items" in err
    assert set(pd.read_csv(tmp_path / "c.csv")["probe"]) >= {"positional", "syntactic"}


@pytest.mark.numeric
def test_texts_run_shortest_first_and_the_scores_do_not_depend_on_it(minilm64):
    from probes import runner
    from probes.datasets.catalog import texts
    from probes.datasets.dependencies import ewt
    from probes.heads.registry import get
    from probes.heads.syntactic import syntactic_scores

    items = ewt("dev")[:12]
    order = prof.shortest_first(minilm64, items, texts(items))
    lengths = [minilm64.encode(t).input_ids.shape[1] for t in texts(order)]
    assert lengths == sorted(lengths) and sorted(map(id, order)) == sorted(map(id, items))
    assert prof.shortest_first(minilm64, [], []) == []
    # one text per pass, so that batching changes no bits: shortest first or in the data's order, the same
    sorted_ = _by_key(prof.run_chunk(get("syntactic"), minilm64, items, batch_size=1))
    in_order = _by_key(syntactic_scores(items, runner.batches(minilm64, texts(items), batch_size=1)))
    assert sorted_.index.equals(in_order.index)
    assert (sorted_["score"] == in_order["score"]).all() and (sorted_["n"] == in_order["n"]).all()
    # the means sum the same 12 texts in another order: float64
    assert (sorted_["mean_attention"] - in_order["mean_attention"]).abs().max() <= F64
