"""The command line's contract on bad input: whatever a user types, every subcommand answers with exit 2 and one
plain line on stderr that names what to fix (no traceback, no usage block), before any model loads where the mistake
is in the arguments themselves. Later cases (non-UTF-8 text, Ray addresses, --out) belong here too; each test in
this file is self-contained."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from probes.cli import build_parser, main
from probes.cli.common import Count, Real

# A valid value for each required option, so that only the option under test is wrong (nothing here loads a model:
# argparse refuses a bad number before a command runs).
REQUIRED = {"--out": "OUT", "--text": "a cat sat", "--prompt": "a cat", "--corrupt": "a dog sat", "--heads": "1.2",
            "--receiver": "1.2", "--layer": "0", "--head": "0", "--query": "cat", "--key": "a"}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser):
    """(flag, action) of every option of a subcommand's parser."""
    for action in parser._actions:
        if action.option_strings:
            yield max(action.option_strings, key=len), action


def typed(kind: type):
    """(subcommand, its parser, flag, type) of every option whose type is a ``kind`` (Count or Real)."""
    for name, parser in subcommands().items():
        for flag, action in options(parser):
            if isinstance(action.type, kind):
                yield name, parser, flag, action.type


def refused(capsys, argv: list[str]) -> str:
    """Run the CLI in-process; assert exit 2 with one line on stderr and no traceback; return that line."""
    code: str | int | None
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2, (argv, code, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
    return lines[0]


def base_args(command: str, parser: argparse.ArgumentParser, tmp_path, skip: str) -> list[str]:
    argv = [command]
    for flag, action in options(parser):
        if action.required and flag != skip:
            argv += [flag, str(tmp_path / "out.csv") if flag == "--out" else REQUIRED[flag]]
    return argv


def test_every_number_option_takes_a_type_of_the_vocabulary():
    """No subcommand reads a plain int or float: each number is a Count or a Real of probes/cli/common.py."""
    plain = [(name, flag) for name, parser in subcommands().items() for flag, action in options(parser)
             if action.type in (int, float)]
    assert plain == []


def test_every_count_refuses_below_its_minimum_and_huge_values(tmp_path, capsys):
    walked = set()
    for name, parser, flag, count in typed(Count):
        walked.add((name, flag))
        low, high = count.minimum, count.maximum
        for value in sorted(v for v in {low - 1, -1, 0, high + 1, 10**30} if not low <= v <= high):
            line = refused(capsys, [*base_args(name, parser, tmp_path, flag), flag, str(value)])
            assert f"argument {flag}: expected a whole number from {low}" in line, line
        refused(capsys, [*base_args(name, parser, tmp_path, flag), flag, "2.5"])
    assert {("importance", "--batch-size"), ("importance", "--checkpoint-every"), ("importance", "--limit"),
            ("importance", "--projections"), ("importance", "--threads"), ("ablate", "--reference-limit"),
            ("generate", "--seed"), ("generate", "--max-new-tokens"), ("generate", "--top-k"), ("compose", "--seed"),
            ("compose", "--draws"), ("profile", "--workers"), ("why", "--layer"), ("patch", "--position")} <= walked
    assert not (tmp_path / "out.csv").exists()


def test_every_real_refuses_non_finite_and_out_of_range(tmp_path, capsys):
    walked = set()
    for name, parser, flag, kind in typed(Real):
        walked.add((name, flag))
        bad = ["nan", "inf", "-inf", "1e400", "x", str(kind.low - 1)]
        bad += [str(kind.low)] if kind.low_open else []
        bad += [str(kind.high * 2 + 1)] if kind.high < float("inf") else []
        for value in bad:
            line = refused(capsys, [*base_args(name, parser, tmp_path, flag), f"{flag}={value}"])
            assert f"argument {flag}: expected a" in line, line
    assert {("generate", "--temperature"), ("generate", "--top-p"), ("profile", "--gpus-per-worker")} <= walked


@pytest.mark.parametrize("extra, names", [
    (["--seed", str(2**70)], "--seed"),  # tracebacked: "Overflow when unpacking long long"
    (["--seed", str(2**64)], "--seed"),
    (["--seed", "-1"], "--seed"),  # ran, as seed 2^64 - 1
    (["--sample", "--temperature", "inf"], "--temperature"),  # ran
    (["--sample", "--temperature", "nan"], "--temperature"),
    (["--sample", "--temperature", "0"], "--temperature"),
    (["--sample", "--temperature", "1e-300"], "--temperature"),  # tracebacked: the logits overflow to inf
    (["--sample", "--top-p", "0"], "--top-p"),
    (["--sample", "--top-p", "1.5"], "--top-p"),
    (["--sample", "--top-k", "-1"], "--top-k"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
])
def test_generate_sampling_options(extra, names, tmp_path, capsys):
    line = refused(capsys, ["generate", "--model", str(tmp_path / "never-loaded"), "--prompt", "a cat", *extra])
    assert f"argument {names}:" in line, line


def test_generate_takes_the_largest_seed_torch_does(gpt2_dir, capsys):
    args = ["generate", "--model", str(gpt2_dir), "--prompt", "a cat sat", "--max-new-tokens", "2", "--no-eos",
            "--sample", "--json"]
    assert main([*args, "--seed", str(2**64 - 1), "--top-k", "0", "--top-p", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["sampling"].startswith(f"sampled (seed {2**64 - 1}")
    assert "argument --seed: expected" in refused(capsys, [*args, "--seed", str(2**64)])  # one more: refused


@pytest.mark.parametrize("flag, value", [
    ("--batch-size", "0"), ("--batch-size", "-1"),  # 0 tracebacked; -1 wrote a table of zeros with n = 0
    ("--checkpoint-every", "0"), ("--checkpoint-every", "-1"),  # tracebacked
    ("--limit", "0"), ("--limit", "-1"),  # 0 tracebacked; -1 dropped the last text
    ("--projections", "0"), ("--top", "0"), ("--threads", "0"),
])
def test_importance_counts(flag, value, tmp_path, capsys):
    out = tmp_path / "imp.csv"
    line = refused(capsys, ["importance", "--model", "minilm", "--data", "ewt-dev", "--out", str(out), flag, value])
    assert f"argument {flag}: expected a whole number from 1 to" in line and f"got {value}" in line, line
    assert not out.exists() and not (tmp_path / "imp.csv.partial").exists()


def test_ablate_reference_limit(capsys):
    line = refused(capsys, ["ablate", "--model", "minilm", "--text", "a cat sat", "--heads", "1.2", "--how", "mean",
                            "--reference-limit", "-1"])  # ran, on all but the last reference text
    assert "argument --reference-limit: expected a whole number from 1" in line, line


def test_head_lists_drop_a_repeated_head_with_a_note(gpt2_dir, capsys):
    args = ["ablate", "--model", str(gpt2_dir), "--text", "a cat sat on the mat", "--json"]
    assert main([*args, "--heads", "0.1,1.0, 0.1"]) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["heads"] == "0.1, 1.0"  # 0.1 ablated once
    note, threads = got.err.strip().splitlines()  # the note, and the threads the command chose (probes.cli.main)
    assert note == "note: head 0.1 is named more than once: it is used once" and threads.startswith("torch threads: ")
    for heads, says in (("1.x", "head '1.x': write each head as LAYER.HEAD"), ("-1.2", "head '-1.2'"),
                        (",", "no heads given"), ("9.0", "head 9.0 is outside")):
        assert says in refused(capsys, [*args, f"--heads={heads}"])


def test_patch_senders_are_a_head_list(gpt2_dir, capsys):
    args = ["patch", "--model", str(gpt2_dir), "--text", "a cat sat", "--corrupt", "a dog sat", "--receiver", "1.0",
            "--json"]
    assert main([*args, "--senders", "0.1,0.1"]) == 0
    got = capsys.readouterr()
    assert [(r["layer"], r["head"]) for r in json.loads(got.out)["senders"]] == [(0, 1)]
    assert "note: head 0.1 is named more than once" in got.err
    assert "argument --senders: head 'x'" in refused(capsys, [*args, "--senders", "x"])


def test_argparse_mistakes_are_one_line(capsys):
    assert "the following arguments are required: --out" in refused(capsys, ["importance"])
    assert "invalid choice" in refused(capsys, ["ablate", "--text", "a", "--heads", "1.2", "--how", "half"])
    assert "unrecognized arguments: --nope" in refused(capsys, ["compose", "--receiver", "1.2", "--nope"])


# -- text from any terminal (issue 30, item 2) -------------------------------------------------------------------

# 'café \xff abc' typed on a Latin-1 terminal: Python hands the bytes that are not UTF-8 over as lone surrogates
NOT_UTF8 = "caf\udce9 \udcff abc"
TEXT_OPTIONS = [
    ["parity", "--text", NOT_UTF8],
    ["parity", "--text", "fine", "--pair", NOT_UTF8],
    ["generate", "--prompt", NOT_UTF8],
    ["kv", "--text", NOT_UTF8],
    ["ablate", "--text", NOT_UTF8, "--heads", "0.0"],
    ["ablate", "--text", "fine", "--heads", "0.0", "--how", "patch", "--other", NOT_UTF8],
    ["ablate", "--text", "fine", "--heads", "0.0", "--target", NOT_UTF8, "--versus", "x"],
    ["ablate", "--text", "fine", "--heads", "0.0", "--target", "x", "--versus", NOT_UTF8],
    ["why", "--text", NOT_UTF8, "--layer", "0", "--head", "0", "--query", "0", "--key", "0"],
    ["why", "--text", "a b", "--pair", NOT_UTF8, "--layer", "0", "--head", "0", "--query", "0", "--key", "0"],
    ["why", "--text", "a b", "--layer", "0", "--head", "0", "--query", NOT_UTF8, "--key", "0"],
    ["why", "--text", "a b", "--layer", "0", "--head", "0", "--query", "0", "--key", NOT_UTF8],
    ["patch", "--text", NOT_UTF8, "--corrupt", "fine", "--receiver", "1.0"],
    ["patch", "--text", "fine", "--corrupt", NOT_UTF8, "--receiver", "1.0"],
    ["patch", "--text", "a", "--corrupt", "b", "--receiver", "1.0", "--target", NOT_UTF8, "--versus", "x"],
]


@pytest.mark.parametrize("args", TEXT_OPTIONS, ids=lambda args: f"{args[0]} {args[args.index(NOT_UTF8) - 1]}")
def test_text_that_is_not_utf8_is_refused_where_it_is(gpt2_dir, args, capsys):
    line = refused(capsys, [*args, "--model", str(gpt2_dir)])
    assert "not UTF-8 at character 4 (byte 0xE9)" in line and "set your terminal to UTF-8" in line, line


def test_bytes_from_a_latin1_terminal_are_one_line_not_a_traceback():
    env = {**os.environ, "PYTHONUTF8": "1"}  # argv decoded as UTF-8, bad bytes as surrogates, whatever the locale
    out = subprocess.run([sys.executable, "-m", "probes", "parity", "--text", b"caf\xe9 \xff abc"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "character 4 (byte 0xE9)" in out.stderr


@pytest.mark.parametrize("codec, name", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])  # written with a BOM
def test_a_utf16_or_utf32_file_is_refused_alike_by_data_and_corpus(gpt2_dir, tmp_path, codec, name, capsys):
    path = tmp_path / "texts.txt"
    path.write_bytes("The cat sat on the mat.\nShe said that he would come back.\n".encode(codec))
    for args in (["--data", str(path), "--probe", "positional"], ["--corpus", str(path)]):
        line = refused(capsys, ["profile", "--model", str(gpt2_dir), *args, "--out", str(tmp_path / "out.csv")])
        assert f"{path} is {name} text (it starts with a {name} byte-order mark)" in line, (args, line)
        assert "save the file as UTF-8" in line
    assert not (tmp_path / "out.csv").exists()


def test_data_that_is_not_utf8_names_its_line_and_byte(gpt2_dir, tmp_path, capsys):
    path = tmp_path / "texts.txt"
    path.write_bytes("The cat sat on the mat.\nThe café is open.\n".encode("latin-1"))
    line = refused(capsys, ["profile", "--model", str(gpt2_dir), "--data", str(path), "--probe", "positional",
                            "--out", str(tmp_path / "out.csv")])
    assert f"{path} line 2: not UTF-8 text (byte 8 of the line is 0xE9): save the file as UTF-8" in line, line


# -- a cut item is noted (issue 30) -------------------------------------------------------------------------------

def test_an_item_longer_than_the_context_is_cut_with_a_note(gpt2_dir, tmp_path, capsys):
    path = tmp_path / "texts.txt"
    path.write_text("The cat sat on the mat.\n" + "the cat " * 100 + "\nShe said that he would come back.\n")
    note = f"1 item(s) of {path} are longer than {gpt2_dir}'s context window of 64 tokens: each is cut to its first 64"
    assert main(["profile", "--model", str(gpt2_dir), "--data", str(path), "--probe", "positional",
                 "--out", str(tmp_path / "p.csv")]) == 0
    assert f"note: positional: {note}" in capsys.readouterr().err
    assert main(["importance", "--model", str(gpt2_dir), "--data", str(path), "--no-ablation",
                 "--out", str(tmp_path / "i.csv")]) == 0
    assert f"note: importance: {note}" in capsys.readouterr().err
    path.write_text("The cat sat on the mat.\n")  # nothing cut: nothing said
    assert main(["profile", "--model", str(gpt2_dir), "--data", str(path), "--probe", "positional",
                 "--out", str(tmp_path / "p.csv"), "--force"]) == 0
    assert "cut" not in capsys.readouterr().err


# -- a too-long text: the advice names an option the command has -------------------------------------------------

def test_ablate_too_long_advises_its_own_truncate(gpt2_dir, capsys):
    args = ["ablate", "--model", str(gpt2_dir), "--text", "cat " * 200, "--heads", "0.1"]
    line = refused(capsys, args)
    assert "reads at most 64" in line and "--truncate" in line, line
    assert main([*args, "--truncate", "--json"]) == 0
    assert main([*args, "--truncate", "--how", "patch", "--other", "dog " * 200, "--json"]) == 0


def test_a_command_without_truncate_does_not_advise_it(gpt2_dir, capsys):
    line = refused(capsys, ["why", "--model", str(gpt2_dir), "--text", "cat " * 200, "--layer", "0", "--head", "0",
                            "--query", "3", "--key", "1"])
    assert "reads at most 64: shorten it" in line and "--truncate" not in line, line


# -- --out is never an input, and one run writes it at a time (issue 30) ---------------------------------------------

def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_out_naming_the_input_is_refused_even_with_force(gpt2_dir, tmp_path, monkeypatch, capsys):
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "c.parquet"
    pd.DataFrame({"text": ["one text here", "another text there"]}).to_parquet(corpus)
    before = corpus.read_bytes()
    data = tmp_path / "d.txt"
    data.write_text("one two three\n")
    (tmp_path / "d.csv").symlink_to(data)  # another name for the data file
    cases = [
        (["profile", "--corpus", str(corpus), "--out", "c.parquet"], "--corpus"),
        (["profile", "--corpus", "c.parquet", "--out", str(corpus), "--force"], "--corpus"),
        (["profile", "--probe", "positional", "--data", str(data), "--out", "d.csv", "--force"], "--data"),
        (["importance", "--data", "d.txt", "--out", str(tmp_path / "d.csv"), "--force"], "--data"),
    ]
    for args, flag in cases:
        assert main([*args, "--model", str(gpt2_dir)]) == 2, args
        line = one_line(capsys)
        assert f"is the input file ({flag})" in line and line.endswith("choose another --out"), line
    assert corpus.read_bytes() == before and data.read_text() == "one two three\n"


def test_a_second_run_writing_the_same_out_is_refused_while_the_first_writes(gpt2_dir, tmp_path, capsys):
    import time

    data = tmp_path / "d.txt"
    data.write_text("".join(f"Sentence {i} : the cat sat on the mat .\n" for i in range(600)))
    out = tmp_path / "p.csv"
    first = subprocess.Popen([sys.executable, "-m", "probes", "profile", "--model", str(gpt2_dir), "--probe",
                              "positional", "--data", str(data), "--checkpoint-every", "1", "--threads", "1",
                              "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600  # a guard against a hang (every wait here: a busy machine is many times slower)
    while not list(tmp_path.glob("p.csv.partial/*/chunk-*.csv")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert first.poll() is None, first.communicate()
    # the second process: this one, through the command line's entry point, with --force (it would replace the file)
    for args in (["profile", "--probe", "positional", "--data", str(data)], ["importance", "--data", str(data)],
                 ["profile", "--corpus", str(data)]):
        assert main([*args, "--model", str(gpt2_dir), "--out", str(out), "--force"]) == 2, args
        assert one_line(capsys) == (f"error: another run is writing {out} (pid {first.pid}): wait for it to finish "
                                    "or choose another --out")
    refused_while_writing = first.poll() is None
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0 and err.count("wrote") == 1 and "Traceback" not in err, err
    assert refused_while_writing and out.is_file() and not (tmp_path / "p.csv.lock").exists()


def flock_held_by(pid: int, lock) -> bool:
    """Whether the kernel's lock table (``/proc/locks``, read without locking anything, so looking cannot disturb a
    claim) lists a FLOCK that process ``pid`` holds on the file ``lock`` (matched by its inode)."""
    try:
        inode = str(os.stat(lock).st_ino)
        table = open("/proc/locks").read()
    except FileNotFoundError:  # not created yet (or removed: the run ended)
        return False
    for line in table.splitlines():
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line has "->"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4] == str(pid) and fields[5].split(":")[-1] == inode:
            return True
    return False


@pytest.mark.numeric  # the two tables are compared exactly (check_exact)
@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads the kernel's lock table (Linux)")
def test_two_corpus_runs_of_one_out_the_second_is_refused_and_the_first_writes_a_single_runs_table(gpt2_dir,
                                                                                                   tmp_path, capsys):
    """Issue 30: two corpus runs writing the same --out at once, identical inputs: one crashed with
    FileNotFoundError on a .partial chunk. Now the second is refused while the first holds OUT.lock, and the first,
    paused meanwhile, writes what a run alone writes."""
    import signal
    import time

    import pandas as pd
    import torch

    corpus = tmp_path / "c.txt"  # 300 texts: seconds of work on the tiny model, so the first is seen while it runs
    corpus.write_text("".join(f"Text {i}: Xiaoming gave the apple to Xiaohong because she was hungry.\n"
                              for i in range(300)))

    def command(out):
        return [sys.executable, "-m", "probes", "profile", "--corpus", str(corpus), "--model", str(gpt2_dir),
                "--window", "16", "--threads", "1", "--checkpoint-every", "10", "--out", str(out)]

    out, lock = tmp_path / "t.csv", tmp_path / "t.csv.lock"
    first = subprocess.Popen(command(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600  # a guard against a hang: starting Python and torch takes long when busy
        while not flock_held_by(first.pid, lock):
            assert first.poll() is None, ("the first run ended without being seen holding a flock on "
                                          f"{lock}: {first.communicate()[1]}")
            assert time.monotonic() < deadline, f"the first run (pid {first.pid}) held no flock on {lock} after 600 s"
            time.sleep(0.01)
        first.send_signal(signal.SIGSTOP)  # it holds the lock, and keeps it while paused
        second = subprocess.run(command(out), capture_output=True, text=True, timeout=600)
        first.send_signal(signal.SIGCONT)
        # a run alone, on another --out, while the first finishes: this process, through the command line's entry
        # point (one thread, as the first)
        threads = torch.get_num_threads()
        try:
            capsys.readouterr()
            single = main(command(tmp_path / "single.csv")[3:])
            alone = capsys.readouterr().err
        finally:
            torch.set_num_threads(threads)  # the command chose its own: the rest of the session keeps the suite's
        _, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    lines = second.stderr.splitlines()
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert "another run is writing" in lines[0] and f"(pid {first.pid})" in lines[0], lines[0]
    for stderr in (second.stderr, err, alone):
        assert "FileNotFoundError" not in stderr and "Traceback" not in stderr, stderr
    assert first.returncode == 0 and err.count("wrote") == 1, err
    assert single == 0 and alone.count("wrote") == 1, alone
    assert not lock.exists()
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(tmp_path / "single.csv"), check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "t.examples.parquet"),
                                  pd.read_parquet(tmp_path / "single.examples.parquet"), check_exact=True)


def test_a_lock_left_by_a_killed_run_is_taken_over_with_a_note(gpt2_dir, tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    data = tmp_path / "d.txt"
    data.write_text("the cat sat on the mat .\n")
    out = tmp_path / "p.csv"
    (tmp_path / "p.csv.lock").write_text(str(dead.pid))  # what a run killed with SIGKILL leaves
    assert main(["profile", "--model", str(gpt2_dir), "--probe", "positional", "--data", str(data),
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"note: took over {tmp_path / 'p.csv.lock'}, left by a run (pid {dead.pid}) that is no longer running" in err
    assert out.is_file() and not (tmp_path / "p.csv.lock").exists()


# -- every output: checked and claimed before the computation, never an input or another output (issue 40) ---------

def no_computation(monkeypatch):
    """Loading a model fails loudly: an output refused only after the computation would show as this error."""
    def loaded(*args, **kwargs):
        raise AssertionError("the model was loaded before the outputs were checked")

    for module in ("profile", "effects", "why"):
        monkeypatch.setattr(f"probes.cli.{module}.load_model", loaded)


WHY = ["why", "--text", "a cat sat", "--layer", "0", "--head", "0", "--query", "1", "--key", "0"]
WRITERS = {  # every option that names a file to write: the command line without it, and what the file is
    "profile --out": (["profile", "--probe", "positional", "--data", "{tmp}/d.txt"], "--out", "csv"),
    "corpus --out": (["profile", "--corpus", "{tmp}/c.parquet", "--window", "16"], "--out", "parquet"),
    "corpus --examples": (["profile", "--corpus", "{tmp}/c.parquet", "--window", "16", "--out", "{tmp}/t.csv"],
                          "--examples", "parquet"),
    "importance --out": (["importance", "--no-ablation", "--data", "{tmp}/d.txt"], "--out", "csv"),
    "why --csv": (WHY, "--csv", "csv"),
    "why --bands-csv": (WHY, "--bands-csv", "csv"),
}
WHERE = {  # a path that cannot be written (and --force or not), and what the one line says
    "missing-folder": ("{tmp}/new/x.{ext}", False, "cannot write {flag} {tmp}/new/x.{ext}: the folder {tmp}/new does "
                       "not exist: create it first or choose another {flag}"),
    "a-folder": ("{tmp}", True, "{flag} {tmp} is a folder: give a file name"),
    "exists": ("{tmp}/old.{ext}", False, "{flag} {tmp}/old.{ext} exists: pass --force to replace it, or choose "
               "another file"),
    "in-proc": ("/proc/x.{ext}", True, "cannot write {flag} /proc/x.{ext}: "),
    "proc-file": ("/proc/version", True, "/proc/version"),  # a format refusal (--out, --examples) or its lock's
    "device": ("/dev/null", True, "/dev/null"),  # replaced atomically, it would stop being a device
    "under-a-file": ("{tmp}/d.txt/x.{ext}", False, "cannot write {flag} {tmp}/d.txt/x.{ext}: {tmp}/d.txt is a file, "
                     "not a folder: choose another {flag}"),
    "empty": ("", False, "{flag} is empty: give a file name"),
    "long-name": ("{tmp}/" + "n" * 250 + ".{ext}", True, "a file name here is at most"),  # its lock's name: longer
    "the-input": ("{input}", True, "{flag} {input} is the input file ("),
}


def writer_cases() -> list:
    """Every writer × every bad place, but the input file only where the command reads one of the output's format."""
    return [pytest.param(writer, where, id=f"{writer}-{where}") for writer, (argv, flag, ext) in WRITERS.items()
            for where in WHERE if where != "the-input" or argv[1] == "--corpus" or (flag, ext) == ("--out", "csv")]


@pytest.mark.parametrize("writer, where", writer_cases())
def test_every_output_is_refused_in_one_line_before_the_computation(writer, where, tmp_path, monkeypatch, capsys):
    """Issue 40: `why --csv` to a folder, a missing folder or /proc tracebacked after the whole computation, --out
    in a missing folder made it, `why --csv ''` wrote nothing and said nothing, --examples was not checked like
    --out. Now every output is refused alike, at once, and no file or folder is made or changed."""
    import pandas as pd

    no_computation(monkeypatch)
    (tmp_path / "d.txt").write_text("the cat sat on the mat .\n")
    pd.DataFrame({"text": ["one text here"]}).to_parquet(tmp_path / "c.parquet")
    (tmp_path / "old.csv").write_text("keep\n")
    (tmp_path / "old.parquet").write_text("keep\n")
    argv, flag, ext = WRITERS[writer]
    path, force, says = WHERE[where]
    (tmp_path / "d.csv").symlink_to(tmp_path / "d.txt")  # the data under a name --out takes
    given = {"tmp": str(tmp_path), "ext": ext, "flag": flag,
             "input": str(tmp_path / ("c.parquet" if argv[1] == "--corpus" else "d.csv"))}
    fill = lambda text: text.format(**given)  # noqa: E731
    before = sorted(p.name for p in tmp_path.iterdir())
    line = refused(capsys, [*map(fill, argv), flag, fill(path), *(["--force"] if force else []), "--model", "gpt2"])
    assert fill(says) in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made (no folder, no lock), nothing lost
    assert (tmp_path / "old.csv").read_text() == "keep\n" and (tmp_path / "old.parquet").read_text() == "keep\n"


@pytest.mark.parametrize("argv, says", [
    (["profile", "--corpus", "{tmp}/c.parquet", "--out", "{tmp}/x.parquet", "--examples", "{tmp}/x.parquet"],
     "--examples {tmp}/x.parquet is also --out {tmp}/x.parquet: one would overwrite the other"),
    (["profile", "--corpus", "{tmp}/c.parquet", "--out", "{tmp}/x.parquet", "--examples", "{tmp}/./x.parquet",
      "--force"], "--examples {tmp}/x.parquet is also --out {tmp}/x.parquet"),
    ([*WHY, "--csv", "{tmp}/w.csv", "--bands-csv", "{tmp}/w.csv"], "--bands-csv {tmp}/w.csv is also --csv {tmp}/w.csv"),
])
def test_two_outputs_of_one_command_are_never_one_file(argv, says, tmp_path, monkeypatch, capsys):
    """Issue 40: `profile --corpus f --out X.parquet --examples X.parquet` said it wrote both; the examples were
    gone."""
    import pandas as pd

    no_computation(monkeypatch)
    pd.DataFrame({"text": ["one text here"]}).to_parquet(tmp_path / "c.parquet")
    line = refused(capsys, [a.format(tmp=tmp_path) for a in argv] + ["--model", "gpt2"])
    assert says.format(tmp=tmp_path) in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet"]


def test_a_second_run_writing_the_same_examples_is_refused(gpt2_dir, tmp_path, capsys):
    """Issue 40: two corpus runs with different --out but one --examples both said "wrote", and the first run's
    examples were lost: --examples was not locked. Now it is claimed like --out (here by another process, as a
    running corpus run holds it)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat .\n")
    examples = tmp_path / "shared.examples.parquet"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from probes import jobs\njobs.claim(Path(sys.argv[1]), flag='--examples')\n"
                               "print('held', flush=True)\ntime.sleep(120)", str(examples)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None  # a pipe
        assert holder.stdout.readline().strip() == "held"
        line = refused(capsys, ["profile", "--corpus", str(corpus), "--model", str(gpt2_dir), "--window", "16",
                                "--out", str(tmp_path / "second.csv"), "--examples", str(examples)])
    finally:
        holder.kill()
        holder.wait()
    assert line == (f"error: another run is writing {examples} (pid {holder.pid}): wait for it to finish or choose "
                    "another --examples")
    assert not (tmp_path / "second.csv").exists() and not (tmp_path / "second.csv.lock").exists()


def test_why_writes_its_tables_only_with_force_over_an_existing_file(gpt2_dir, tmp_path, capsys):
    """Issue 40: `why --csv FILE` replaced an existing file without --force."""
    out = tmp_path / "why.csv"
    out.write_text("mine\n")
    args = [*WHY, "--model", str(gpt2_dir), "--csv", str(out)]
    line = refused(capsys, args)
    assert line == f"error: --csv {out} exists: pass --force to replace it, or choose another file", line
    assert out.read_text() == "mine\n"
    assert main([*args, "--force"]) == 0
    assert f"wrote {len(pd_read(out))} terms to {out}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["why.csv"]  # no temporary file, no lock left


def pd_read(path):
    import pandas as pd

    return pd.read_csv(path)


# -- numbers are ASCII digits: '²'.isdigit() is True and int('²') fails; int('٣') is 3 (issue 40) -------------------

UNICODE_DIGITS = ("²", "٣", "３", "1٣")  # a superscript, an Arabic-Indic, a full-width digit, a mixed number


def test_every_number_option_refuses_digits_of_other_scripts(tmp_path, capsys):
    walked = set()
    for kind, what in ((Count, "expected a whole number, got"), (Real, "expected a number, got")):
        for name, parser, flag, _ in typed(kind):
            walked.add((name, flag))
            for value in UNICODE_DIGITS:
                line = refused(capsys, [*base_args(name, parser, tmp_path, flag), f"{flag}={value}"])
                assert f"argument {flag}: {what} {value!r}" in line, line
    assert {("generate", "--max-new-tokens"), ("why", "--layer"), ("generate", "--top-p")} <= walked


def test_a_token_named_by_other_digits_is_a_word_not_a_number(gpt2_dir, capsys):
    """`why --query ²` tracebacked (str.isdigit takes superscripts, int does not); `--key ٣` was token 3."""
    args = ["why", "--model", str(gpt2_dir), "--text", "a cat sat on the mat", "--layer", "0", "--head", "0"]
    for query, key, flag in (("²", "0", "--query"), ("1", "٣", "--key"), ("1", "３", "--key")):
        line = refused(capsys, [*args, "--query", query, "--key", key])
        given = query if flag == "--query" else key
        assert f"{flag} {given!r} is not a word of the text" in line, line
    assert main([*args, "--query", "3", "--key", "1", "--json"]) == 0  # ASCII digits: a token number
    assert json.loads(capsys.readouterr().out)["query"] == 3


@pytest.mark.parametrize("argv, says", [
    (["ablate", "--text", "a cat sat", "--heads", "١.٠"], "argument --heads: head '١.٠': write each head as"),
    (["ablate", "--text", "a cat sat", "--heads", "².0"], "argument --heads: head '².0': write each head as"),
    (["compose", "--receiver", "١.٠"], "receiver '١.٠': write it as LAYER.HEAD"),
    (["patch", "--text", "a cat sat", "--corrupt", "a dog sat", "--receiver", "1.٠"],
     "receiver '1.٠': write it as LAYER.HEAD"),
    (["claim", "--text", "Mary met Anna and she smiled", "--query", "she", "--key", "Mary", "--against", "Anna",
      "--head", "٠.٠"], "--head '٠.٠': write it as LAYER.HEAD"),
])
def test_a_head_in_other_digits_is_refused(gpt2_dir, argv, says, capsys):
    """LAYER.HEAD in Arabic-Indic digits was read as that head (int('١') is 1); a superscript tracebacked."""
    assert says in refused(capsys, [*argv, "--model", str(gpt2_dir)])


def test_threads_from_the_environment_in_other_digits(gpt2_dir, tmp_path, monkeypatch, capsys):
    """PROBES_THREADS=٣ was 3 threads; OMP_NUM_THREADS=² tracebacked (isdigit, then int)."""
    import torch

    data = tmp_path / "d.txt"
    data.write_text("the cat sat on the mat .\n")
    args = ["profile", "--model", str(gpt2_dir), "--probe", "positional", "--data", str(data)]
    monkeypatch.setenv("PROBES_THREADS", "٣")
    line = refused(capsys, [*args, "--out", str(tmp_path / "a.csv")])
    assert "PROBES_THREADS='٣': give a whole number of threads" in line, line
    monkeypatch.delenv("PROBES_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "²")  # not a plain whole number: ignored, as its rule says
    threads = torch.get_num_threads()
    try:
        assert main([*args, "--out", str(tmp_path / "b.csv")]) == 0
    finally:
        torch.set_num_threads(threads)
    assert "Traceback" not in capsys.readouterr().err and (tmp_path / "b.csv").is_file()


# -- Ray addresses that cannot be used (issue 30, item 3) --------------------------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on (bound once to learn a free one, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile_on_ray(tmp_path, address: str | None, **env) -> str:
    """``profile --corpus ... --ray ADDRESS`` (None: ``--ray`` alone) in its own process, where no Ray was started
    (RAY_TMPDIR: its own);
    it must stop with exit 2 and one line, not a traceback; that line. Before issue 30 some of these waited
    until killed: the timeout stops them (a guard against a hang, generous: a busy machine starts Python slowly)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\n")
    environ = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(tmp_path)} | env
    out = subprocess.run([sys.executable, "-m", "probes", "profile", "--corpus", str(corpus), "--model", "minilm",
                          "--out", str(tmp_path / "h.csv"), "--ray", *([address] if address else [])],
                         capture_output=True, text=True, timeout=600, env=environ)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_ray_client_address_is_refused_with_what_to_use(tmp_path):
    line = profile_on_ray(tmp_path, "ray://127.0.0.1:1")
    assert line == ("error: --ray ray://127.0.0.1:1: Ray Data does not run through Ray Client (ray:// addresses); "
                    "run the command on a node of the cluster with --ray auto, or give the head's plain address "
                    "(--ray HEAD:6379)")


def test_a_ray_address_where_nothing_listens_is_refused(tmp_path):
    port = free_port()
    line = profile_on_ray(tmp_path, f"127.0.0.1:{port}")
    assert line.startswith(f"error: --ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} (connection "
                           "refused): give the address of a running Ray head (HOST:6379"), line
    assert line.endswith("give --local-ray to start a Ray of this machine for this run, or leave --ray out to run on "
                         "this process"), line


def test_a_ray_address_that_accepts_but_stays_silent_is_refused(tmp_path):
    import socket

    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        line = profile_on_ray(tmp_path, f"127.0.0.1:{port}")
    assert line.startswith(f"error: --ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} (no answer "
                           "within 3 s): give the address of a running Ray head"), line


def test_a_ray_address_that_is_not_a_ray_head_is_refused(tmp_path):
    import socket
    import threading

    with socket.socket() as web:  # a web server's port: it answers, but not as a GCS (gRPC over HTTP/2)
        web.bind(("127.0.0.1", 0))
        web.listen()
        port = web.getsockname()[1]

        def answer():
            connection, _ = web.accept()
            with connection:
                connection.recv(64)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        line = profile_on_ray(tmp_path, f"127.0.0.1:{port}")
    assert line.startswith(f"error: --ray 127.0.0.1:{port}: 127.0.0.1:{port} accepts connections but is not a Ray "
                           "head's GCS port: give the address of a running Ray head"), line


def test_ray_auto_names_where_it_looked(tmp_path):
    port = free_port()
    line = profile_on_ray(tmp_path, "auto", RAY_ADDRESS=f"127.0.0.1:{port}")
    assert line.startswith(f"error: --ray auto (RAY_ADDRESS=127.0.0.1:{port}): nothing answers at "
                           f"127.0.0.1:{port} (connection refused)"), line


@pytest.mark.xdist_group("ray")  # auto joins any Ray running on this machine: not while the Ray tests run
def test_ray_auto_without_a_cluster_says_how_to_start_one(tmp_path):
    from ray._private.services import find_gcs_addresses

    if find_gcs_addresses():
        pytest.skip("a Ray cluster runs on this machine, which --ray auto would join")
    line = profile_on_ray(tmp_path, "auto")
    assert line == ("error: --ray auto: no running Ray cluster was found on this machine; start one with "
                    "`ray start --head`, give --local-ray to start a Ray of this machine for this run, or leave --ray "
                    "out to run on this process")
    # --ray alone is --ray auto here too (it started a Ray of this machine before issue 60): the same refusal, which
    # names the flag that does that now
    assert profile_on_ray(tmp_path, None) == line
    port = free_port()
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}")  # left by a Ray since stopped
    line = profile_on_ray(tmp_path, "auto")
    assert line.startswith(f"error: --ray auto (the Ray found on this machine, at 127.0.0.1:{port}): "
                           f"nothing answers at 127.0.0.1:{port} (connection refused)"), line


def _ray_options() -> dict[str, argparse.Action]:
    """Each subcommand's ``--ray`` option, by command."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: action for name, parser in sub.choices.items() for action in parser._actions
            if "--ray" in action.option_strings}


def test_ray_means_one_thing_on_every_command():
    """Issue 60: ``--ray ADDRESS`` is that Ray cluster, and ``--ray`` alone the cluster this machine has joined (auto),
    on every command that takes it; before, ``profile --ray`` alone started a Ray of this machine, and ``serve --ray``
    wanted an address."""
    options = _ray_options()
    assert {"parity", "profile", "serve", "kv", "ablate", "why"} <= set(options), sorted(options)
    for command, action in options.items():
        assert (action.nargs, action.const, action.default) == ("?", "auto", None), command
        assert action.help and "--ray alone (the same as --ray auto)" in action.help, command


def test_a_ray_of_this_machine_has_its_own_flag(capsys, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\n")
    base = ["profile", "--corpus", str(corpus), "--model", "minilm", "--out", str(tmp_path / "h.csv")]
    assert refused(capsys, [*base, "--ray", "local"]) == (
        "error: --ray local: --ray takes a Ray head's address, or nothing for the cluster this machine has joined; to "
        "start a Ray of this machine for this run, give --local-ray")
    assert "not allowed with argument --ray" in refused(capsys, [*base, "--ray", "--local-ray"])
    assert not (tmp_path / "h.csv").exists()


# -- Ray addresses: a port that is another gRPC server, hosts that are not host names (issue 40) ----------------------

SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an HTTP/2 frame: no settings
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # what an HTTP/2 client opens with


def _closed() -> bytes:
    raise OSError("the client closed the connection")
# a raylet's answer to the GCS's first call, byte for byte (Ray 2.60): the call's end, status 12 (UNIMPLEMENTED)
UNIMPLEMENTED = (b"\x00\x000\x01\x05\x00\x00\x00\x01"
                 b"\x88@\x0ccontent-type\x10application/grpc@\x0bgrpc-status\x0212")


# the same from a head with token authentication on, to a call without its token: status 16 (UNAUTHENTICATED)
UNAUTHENTICATED = UNIMPLEMENTED.replace(b"grpc-status\x0212", b"grpc-status\x0216")


class GrpcPort:
    """A loopback port that opens as a gRPC server does (HTTP/2 settings at once), then answers every call with
    ``answer`` (b"": never a word): what a raylet's port or any other gRPC service looks like to a driver. Before
    issue 40, ray.init retried such a port for tens of seconds, printing a line of Ray's C++ warnings a second (the
    silent one: until killed)."""

    def __init__(self, answer: bytes):
        import socket
        import threading

        self.answer, self.server = answer, socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:  # closed
                return
            with connection:
                try:
                    connection.settimeout(60)
                    connection.sendall(SETTINGS)  # a gRPC server speaks first: its settings
                    self.read_until_the_call(connection)
                    connection.sendall(self.answer)
                    while connection.recv(65536):  # whatever else it sends (a cancel), until the client goes
                        pass
                except OSError:
                    pass

    @staticmethod
    def read_until_the_call(connection) -> None:
        """Read the client's HTTP/2 frames until the call's HEADERS frame (type 1) has come: a client writes its
        opening, its settings and the call in as many writes as it likes, and an answer on a stream it has not
        opened yet would be a protocol error to it, not this answer."""
        data = b""
        while len(data) < len(PREFACE):
            data += connection.recv(65536) or _closed()
        data = data[len(PREFACE):]
        while True:
            while len(data) < 9:
                data += connection.recv(65536) or _closed()
            length, kind = int.from_bytes(data[:3], "big"), data[3]
            while len(data) < 9 + length:
                data += connection.recv(65536) or _closed()
            data = data[9 + length:]
            if kind == 0x1:  # HEADERS: the call
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.close()


def ray_command(tmp_path, argv: list[str]) -> str:
    """A command with --ray in its own process (RAY_TMPDIR: its own, no RAY_ADDRESS): exit 2 and one line on
    stderr, no traceback and none of Ray's C++ warnings; that line."""
    environ = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "probes", *argv], capture_output=True, text=True, timeout=600,
                         env=environ)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def ray_commands(tmp_path, address: str) -> list[list[str]]:
    """Every command that takes --ray, with ``address``: profile --corpus, profile --probe, serve (to hold a
    model, detached, and to stop one)."""
    (tmp_path / "c.txt").write_text("the cat sat on the mat\n")
    return [["profile", "--corpus", str(tmp_path / "c.txt"), "--model", "minilm", "--out", str(tmp_path / "h.csv"),
             "--ray", address],
            ["profile", "--probe", "positional", "--data", str(tmp_path / "c.txt"), "--model", "minilm",
             "--out", str(tmp_path / "p.csv"), "--ray", address],
            ["serve", "--model", "minilm", "--ray", address],
            ["serve", "--model", "minilm", "--ray", address, "--detach"],
            ["serve", "--model", "minilm", "--ray", address, "--stop"]]


@pytest.mark.parametrize("answer, commands", [(UNIMPLEMENTED, 3), (b"", 1)], ids=["unimplemented", "silent"])
def test_a_grpc_port_that_is_not_a_ray_head_is_refused_in_one_line(tmp_path, answer, commands):
    with GrpcPort(answer) as port:
        for argv in ray_commands(tmp_path, f"127.0.0.1:{port.port}")[:commands]:
            line = ray_command(tmp_path, argv)
            assert line.startswith(f"error: --ray 127.0.0.1:{port.port}: 127.0.0.1:{port.port} accepts connections "
                                   "but is not a Ray head's GCS port: give the address of a running Ray head"), line


def test_a_ray_head_that_wants_a_token_this_machine_lacks_is_refused_in_one_line(tmp_path):
    with GrpcPort(UNAUTHENTICATED) as port:
        line = ray_command(tmp_path, ray_commands(tmp_path, f"127.0.0.1:{port.port}")[0])
    assert line.startswith(f"error: --ray 127.0.0.1:{port.port}: the Ray head at 127.0.0.1:{port.port} wants a token "
                           "and this machine has none: copy the head's ~/.ray/auth_token to this machine"), line


@pytest.mark.parametrize("address, says", [
    ("h\udce9:1", "'h\\xe9' is not a host name (ASCII letters, digits, '.', '-' and '_'; no spaces)"),  # $'h\xe9:1'
    ("hé:1", "'hé' is not a host name"),
    ("h é:1", "'h é' is not a host name"),
    ("h\t:1", "'h\\t' is not a host name"),
    ("a..b:1", "'a..b' is not a host name"),
    ("x" * 64 + ":1", "is not a host name"),  # longer than a DNS label may be
    (":6379", "give the Ray head's address as HOST:PORT"),
    ("head", "give the Ray head's address as HOST:PORT"),
    ("h:99999", "port '99999' is not a port number (1 to 65535)"),
    ("h:0", "port '0' is not a port number"),
    ("h:²", "port '²' is not a port number"),
    ("h:", "give the Ray head's address as HOST:PORT"),
    ("::1:6379", "write an IPv6 address in brackets, [::1]:6379"),
    ("[::1:6379", "write an IPv6 address in brackets"),
    ("[::g]:6379", "[::g] is not an IPv6 address"),
], ids=lambda v: ascii(v)[:24])
def test_a_ray_address_that_is_not_host_and_port_is_refused_before_any_socket(tmp_path, capsys, monkeypatch,
                                                                               address, says):
    import socket

    def no_socket(*args, **kwargs):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "create_connection", no_socket)
    shown = address.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace").replace("\t", "\\t")
    for argv in ray_commands(tmp_path, address):
        line = refused(capsys, argv)
        assert line.startswith(f"error: --ray {shown}: ") and says in line, (argv, line)


# -- the adversarial pass (issue 30's 218 cases, rerunnable) ---------------------------------------------------------
# One table: each case is a command line, the exit code it must end with and a fragment of what it says (exit 2: the
# one line on stderr; exit 0: stdout or stderr). Placeholders: {gpt2} and {bert} (tiny checkpoints, 64 tokens of
# context), {d} (the folder of FILES, made once), {out} (a fresh output path). Corpus mode reads windows of 16 tokens
# (the default 128 is longer than the tiny models' context). Every case runs in this process through main().

HUGE = "cat " * 100_000
GOOD = "The cat sat on the mat.\nShe said that he would come back.\n"
FILES = {  # name -> bytes
    "good.txt": GOOD.encode(),
    "empty.txt": b"",
    "blank.txt": b"   \n\t\n\n",
    "binary.bin": bytes(range(256)) * 4,
    "binary.txt": bytes(range(256)) * 4,
    "latin1.txt": "The café is open.\n".encode("latin-1"),
    "utf16.txt": GOOD.encode("utf-16"),
    "utf32.txt": GOOD.encode("utf-32"),
    "utf16le.txt": GOOD.encode("utf-16-le"),
    "bom.txt": GOOD.encode("utf-8-sig"),
    "crlf.txt": GOOD.replace("\n", "\r\n").encode(),
    "nul.txt": b"The cat\x00 sat on the mat.\n",
    "control.txt": b"The cat\x07 sat on the mat.\x1b\n",
    "good.jsonl": b'{"text": "The cat sat on the mat."}\n{"text": "She said that he would come back."}\n',
    "notjson.jsonl": b'{"text": "The cat sat on the mat."}\n{"text": "She said\n',
    "nofield.jsonl": b'{"text": "The cat sat on the mat."}\n{"body": "x"}\n',
    "number.jsonl": b'{"text": "The cat sat on the mat."}\n{"text": 5}\n',
    "emptytext.jsonl": b'{"text": "The cat sat on the mat."}\n{"text": ""}\n',
    "list.jsonl": b'{"text": "The cat sat on the mat."}\n[1, 2]\n',
    "allbad.jsonl": b'not json\n{"body": 1}\n',
    "bad.parquet": b"PAR1 this is not parquet",
}
C = ["--window", "16"]  # corpus mode on the tiny models


def cases() -> list:
    out = []

    def case(name: str, code: int, says: str, *argv: str):
        out.append(pytest.param(list(argv), code, says, id=name))

    # text typed on the command line, for each command that takes one
    for cmd, flag, extra in (("parity", "--text", []), ("ablate", "--text", ["--heads", "0.0"]),
                             ("generate", "--prompt", ["--max-new-tokens", "1"])):
        run = [cmd, "--model", "{gpt2}", *extra, flag]
        empty = "the prompt is empty" if cmd == "generate" else "the text is empty"
        case(f"{cmd}-text-empty", 2, empty, *run, "")
        case(f"{cmd}-text-whitespace", 2, empty, *run, " \t \n")
        case(f"{cmd}-text-huge", 2, "tokens but {gpt2} reads at most 64", *run, HUGE)
        case(f"{cmd}-text-not-utf8", 2, "not UTF-8 at character 4 (byte 0xE9)", *run, NOT_UTF8)
        case(f"{cmd}-text-nul", 0, "", *run, "a\x00b")
        case(f"{cmd}-text-control", 0, "", *run, "a\x07b\x1b c")
        case(f"{cmd}-text-crlf", 0, "", *run, "the cat\r\nsat")
    # models that are not there, not models, or not safe to load: each command refuses them alike
    commands = {
        "parity": ["parity", "--text", "a cat"],
        "profile": ["profile", "--probe", "positional", "--data", "{d}/good.txt", "--out", "{out}"],
        "corpus": ["profile", "--corpus", "{d}/good.txt", *C, "--out", "{out}"],
        "ablate": ["ablate", "--text", "a cat", "--heads", "0.0"],
        "importance": ["importance", "--data", "{d}/good.txt", "--no-ablation", "--out", "{out}"],
        "generate": ["generate", "--prompt", "a cat", "--max-new-tokens", "1"],
    }
    for name, argv in commands.items():
        for what, model, says in (
                ("unknown-name", "no-such-model-b31", "'no-such-model-b31' is not in the local cache"),
                ("empty-name", "", "no model named: give a hub id, a local directory, or 'minilm'"),
                ("missing-path", "{d}/no-model", "no model directory at '{d}/no-model'"),
                ("a-file", "{d}/good.txt", "no model directory at '{d}/good.txt'"),
                ("folder-not-a-model", "{d}/notmodel", "'{d}/notmodel' has no config.json"),
                ("config-not-json", "{d}/badconfig", "cannot load the config of '{d}/badconfig'"),
                ("planted-pickle", "{d}/pickled", "is a pickle that holds more than plain tensors")):
            if name == "corpus" and what == "empty-name":  # corpus mode takes several models
                says = "--model is empty: give one model, or several separated by commas"
            case(f"{name}-model-{what}", 2, says, *argv, "--model", model)
    # data files: --data (profile, importance), --corpus, --reference (ablate --how mean)
    readers = {
        "profile": ["profile", "--model", "{gpt2}", "--probe", "positional", "--out", "{out}", "--data"],
        "importance": ["importance", "--model", "{gpt2}", "--no-ablation", "--out", "{out}", "--data"],
        "corpus": ["profile", "--model", "{gpt2}", *C, "--out", "{out}", "--corpus"],
        "reference": ["ablate", "--model", "{gpt2}", "--text", "a cat", "--heads", "0.0", "--how", "mean",
                      "--reference"],
    }
    items = {  # what the probes' reader (--data, --reference) says of each file
        "empty.txt": "{d}/empty.txt:1: no sentences (one per line)",
        "blank.txt": "{d}/blank.txt:1: no sentences (one per line)",
        "binary.bin": "{d}/binary.bin: unknown data format '.bin': use .conllu, .jsonl or .txt",
        "binary.txt": "{d}/binary.txt line 2: not UTF-8 text (byte 118 of the line is 0x80)",
        "latin1.txt": "{d}/latin1.txt line 1: not UTF-8 text (byte 8 of the line is 0xE9): save the file as UTF-8",
        "utf16.txt": "{d}/utf16.txt is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8",
        "utf32.txt": "{d}/utf32.txt is UTF-32 text (it starts with a UTF-32 byte-order mark), not UTF-8",
        "utf16le.txt": "{d}/utf16le.txt line 1: a NUL character at byte 2 of the line (UTF-16 text without a "
                       "byte-order",
        "nul.txt": "{d}/nul.txt line 1: a NUL character at byte 8 of the line",
        "missing.txt": "no data file '{d}/missing.txt': give a path or one of ewt-dev",
        "folder": "'{d}/folder' is a folder, not a data file",
        "good.jsonl": "no usable items in {d}/good.jsonl: all 2 are bad, e.g. {d}/good.jsonl:1: missing field(s) "
                      "pronoun, antecedent",  # a .jsonl of --data is coreference items
        "notjson.jsonl": "no usable items in {d}/notjson.jsonl: all 2 are bad",
        "allbad.jsonl": "no usable items in {d}/allbad.jsonl: all 2 are bad, e.g. {d}/allbad.jsonl:1: not JSON",
        "bom.txt": "", "crlf.txt": "", "control.txt": "",  # read as they should be
    }
    texts = {  # what the corpus reader (--corpus) says of each file
        "empty.txt": "corpus: no usable items in {d}/empty.txt: it has none",
        "blank.txt": "corpus: no usable items in {d}/blank.txt: it has none",
        "binary.bin": "{d}/binary.bin: unknown corpus format '.bin': give a .txt",
        "binary.txt": "no usable items in {d}/binary.txt: all 5 are bad",
        "latin1.txt": "all 1 are bad, e.g. latin1.txt line 1: not UTF-8 text (byte 8 of the line is 0xE9)",
        "nul.txt": "all 1 are bad, e.g. nul.txt line 1: a NUL character at byte 8 of the line",
        "utf16le.txt": "all 3 are bad, e.g. utf16le.txt line 1: a NUL character at byte 2 of the line",
        "missing.txt": "{d}/missing.txt: no such file: give a .txt (one text a line), .jsonl or .parquet corpus",
        "folder": "{d}/folder: a folder, not a file: give a .txt (one text a line), .jsonl or .parquet corpus",
        "allbad.jsonl": "all 2 are bad, e.g. allbad.jsonl line 1: not JSON (Expecting value, column 1)",
        "bad.parquet": "bad.parquet: not a readable Parquet file",
        # 12 labels (a decoder: no look-ahead offsets) × the tiny GPT-2's 8 heads
        "bom.txt": "wrote 96 rows", "crlf.txt": "wrote 96 rows", "control.txt": "wrote 96 rows",
        "good.jsonl": "wrote 96 rows", "good.parquet": "wrote 96 rows",
        # one bad row of two: skipped, each named by its line
        "notjson.jsonl": "notjson.jsonl line 2: not JSON", "nofield.jsonl": "nofield.jsonl line 2: no 'text' field "
        "(it has 'body')", "number.jsonl": "number.jsonl line 2: 'text' is a int, not text",
        "emptytext.jsonl": "emptytext.jsonl line 2: 'text' is empty",
        "list.jsonl": "list.jsonl line 2: a JSON list, not an object with a 'text' field",
    }
    for file in ("utf16.txt", "utf32.txt"):
        texts[file] = items[file]
    for name, argv in readers.items():
        for file, says in (texts if name == "corpus" else items).items():
            if name == "reference" and file.endswith(".jsonl"):
                says = "mean-ablation needs a reference set of texts"  # it reads the sentences only
            code = 0 if not says or says.startswith("wrote") or says.startswith(file + " line 2") else 2
            case(f"{name}-file-{file}", code, says, *argv, "{d}/" + file)
    # counts and reals: 0, −1, huge, not a number, nan, inf
    numbers = {
        "profile": (["profile", "--model", "{gpt2}", "--probe", "positional", "--data", "{d}/good.txt", "--out",
                     "{out}"], ["--limit", "--batch-size", "--checkpoint-every"]),
        "corpus": (["profile", "--model", "{gpt2}", "--corpus", "{d}/good.txt", "--out", "{out}"],
                   ["--window", "--top-k", "--workers"]),
        "importance": (["importance", "--model", "{gpt2}", "--data", "{d}/good.txt", "--out", "{out}"],
                       ["--limit", "--projections", "--top"]),
        "ablate": (["ablate", "--model", "{gpt2}", "--text", "a cat", "--heads", "0.0"], ["--position"]),
        "generate": (["generate", "--model", "{gpt2}", "--prompt", "a cat"], ["--max-new-tokens", "--top-k"]),
    }
    for name, (argv, flags) in numbers.items():
        for flag in flags:
            for value in ("0", "-1", "1e3", "10" * 20, "x", "nan", "inf"):
                if value == "0" and flag in ("--position", "--top-k") or value == "-1" and flag == "--position":
                    continue  # 0 is a position and (generate) top-k 0 keeps every token; -1 is below 0 below
                code, says = 2, f"argument {flag}: expected a whole number"
                if value == "10" * 20:
                    code, says = 2, f"argument {flag}: expected a whole number from"
                case(f"{name}{flag}={value}", code, says, *argv, f"{flag}={value}")
    for value in ("0", "-1", "nan", "inf", "-inf", "1e400", "x", "1e-300"):
        case(f"generate--temperature={value}", 2, "argument --temperature: expected a", "generate", "--model",
             "{gpt2}", "--prompt", "a cat", "--sample", f"--temperature={value}")
    for value in ("0", "-1", "nan", "inf", "1.5", "x"):
        case(f"generate--top-p={value}", 2, "argument --top-p: expected a",
             "generate", "--model", "{gpt2}", "--prompt", "a cat", "--sample", f"--top-p={value}")
    case("generate--seed=-1", 2, "argument --seed: expected", "generate", "--model", "{gpt2}", "--prompt", "a",
         "--sample", "--seed=-1")
    case("generate-max-new-tokens-past-the-context", 2,
         "the prompt is 3 tokens and {gpt2} reads at most 64: ask for at most 62 new tokens (not 100,000)",
         "generate", "--model", "{gpt2}", "--prompt", "a cat", "--max-new-tokens", "100000")
    # heads: out of range, malformed, repeated (a note)
    ablate = ["ablate", "--model", "{gpt2}", "--text", "a cat sat"]
    for heads, code, says in (("2.0", 2, "head 2.0 is outside {gpt2}: layers 0–1, heads 0–3"),
                              ("0.4", 2, "head 0.4 is outside {gpt2}: layers 0–1, heads 0–3"),
                              ("99999999999999999999.0", 2, "head 99999999999999999999.0 is outside"),
                              ("0.0.0", 2, "head '0.0.0': write each head as LAYER.HEAD"),
                              ("a.b", 2, "head 'a.b': write each head as LAYER.HEAD"),
                              ("1", 2, "head '1': write each head as LAYER.HEAD"),
                              ("-1.0", 2, "head '-1.0'"), ("1.-2", 2, "head '1.-2'"),
                              ("", 2, "no heads given"), (",,", 2, "no heads given"),
                              ("0.0,0.0", 0, "note: head 0.0 is named more than once: it is used once"),
                              (" 0.1 , 1.3 ", 0, "")):
        case(f"ablate-heads={heads}", code, says, *ablate, f"--heads={heads}")
    for flag, value, says in (("--layer", "2", "--layer 2 is outside {gpt2}: layers 0–1"),
                              ("--head", "4", "--head 4 is outside {gpt2}'s heads (0–3)")):
        case(f"generate-{flag}={value}", 2, says, "generate", "--model", "{gpt2}", "--prompt", "a", flag, value)
    case("ablate-position-past-the-text", 2, "token 9 is outside the text's 4 tokens (0–3)", *ablate,
         "--heads", "0.0", "--position", "9")
    case("ablate-patch-without-other", 2, "--how patch takes the heads' outputs from another text: give it with "
         "--other", *ablate, "--heads", "0.0", "--how", "patch")
    case("ablate-target-without-versus", 2, "a logit difference needs two tokens", *ablate, "--heads", "0.0",
         "--target", "cat")
    case("ablate-encoder-target", 2, "is an encoder without a language-model head", "ablate", "--model", "{bert}",
         "--text", "a cat", "--heads", "0.0", "--target", "a", "--versus", "cat")
    case("generate-encoder", 2, "is an encoder (BERT): it reads the whole text at once and does not write text",
         "generate", "--model", "{bert}", "--prompt", "a cat")
    # --out: the input, a folder, a missing folder (refused: nothing is made), under a file, another format, empty
    writers = {
        "profile": ["profile", "--model", "{gpt2}", "--probe", "positional", "--data", "{d}/good.txt"],
        "corpus": ["profile", "--model", "{gpt2}", *C, "--corpus", "{d}/good.parquet"],
        "importance": ["importance", "--model", "{gpt2}", "--no-ablation", "--data", "{d}/good.txt"],
    }
    for name, argv in writers.items():
        flag = "--corpus" if name == "corpus" else "--data"
        same = "{d}/good.parquet" if name == "corpus" else "{d}/same.csv"  # same.csv: another name of good.txt
        for what, out_path, code, says in (
                ("the-input", same, 2, f"is the input file ({flag}): writing there would destroy it"),
                ("a-folder", "{d}/folder", 2, "--out {d}/folder is a folder: give a file name ending in .csv"),
                ("missing-folder", "{tmp}/new/folder/out.csv", 2, "cannot write --out {tmp}/new/folder/out.csv: the "
                 "folder {tmp}/new/folder does not exist: create it first or choose another --out"),
                ("under-a-file", "{d}/good.txt/out.csv", 2, "cannot write --out {d}/good.txt/out.csv: {d}/good.txt is "
                 "a file, not a folder: choose another --out"),
                ("not-a-table", "{tmp}/out.txt", 2, "{tmp}/out.txt: write .csv, .json or .parquet"),
                ("empty", "", 2, "--out is empty: give a file name"),
                ("in-proc", "/proc/out.csv", 2, "cannot write --out /proc/out.csv: "),
                ("json", "{tmp}/out.json", 0, "wrote"), ("parquet", "{tmp}/out.parquet", 0, "wrote")):
            case(f"{name}-out-{what}", code, says, *argv, "--out", out_path)
    case("profile---probe---ray-client", 2, "--ray ray://127.0.0.1:1: Ray Data does not run through Ray Client",
         "profile", "--model", "{gpt2}", "--probe", "positional", "--data", "{d}/good.txt", "--out", "{out}", "--ray",
         "ray://127.0.0.1:1")
    case("profile-corpus-with-probe", 2, "--corpus profiles the label-free statistics", "profile", "--model",
         "{gpt2}", "--corpus", "{d}/good.txt", *C, "--probe", "positional", "--out", "{out}")
    case("profile-corpus-window-past-the-context", 2, "--window 128 is longer than {gpt2}'s context window of 64",
         "profile", "--model", "{gpt2}", "--corpus", "{d}/good.txt", "--out", "{out}")
    case("profile-corpus-field-missing", 2, "good.jsonl line 1: no 'body' field (it has 'text')", "profile",
         "--model", "{gpt2}", "--corpus", "{d}/good.jsonl", *C, "--field", "body", "--out", "{out}")
    case("profile-coreference-on-plain-text", 2, "the coreference probe needs pronoun/antecedent items", "profile",
         "--model", "{gpt2}", "--probe", "coreference", "--data", "{d}/good.txt", "--out", "{out}")
    case("profile-syntactic-on-plain-text", 2, "the syntactic probe needs parsed sentences", "profile", "--model",
         "{gpt2}", "--probe", "syntactic", "--data", "{d}/good.txt", "--out", "{out}")
    return out


CASES = cases()


@pytest.fixture(scope="module")
def places(tmp_path_factory, gpt2_dir, bert_dir) -> dict[str, str]:
    """The files of the table, a folder that is not a model, one whose config is not JSON, and one whose weights are a
    pickle that would create ``PLANTED`` if it were ever unpickled (it must not be)."""
    import pickle
    import shutil

    import pandas as pd

    d = tmp_path_factory.mktemp("contract")
    for name, raw in FILES.items():
        (d / name).write_bytes(raw)
    pd.DataFrame({"text": ["The cat sat on the mat.", "She said that he would come back."]}).to_parquet(
        d / "good.parquet")
    (d / "same.csv").symlink_to(d / "good.txt")
    (d / "folder").mkdir()
    (d / "notmodel").mkdir()
    (d / "notmodel" / "notes.txt").write_text("not a model")
    broken = d / "badconfig"
    shutil.copytree(gpt2_dir, broken)
    (broken / "config.json").write_text("{not json")
    planted = d / "pickled"
    shutil.copytree(gpt2_dir, planted)
    (planted / "model.safetensors").unlink()

    class Plant:
        def __reduce__(self):
            return open, (str(d / "PLANTED"), "w")

    (planted / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": Plant()}))
    return {"d": str(d), "gpt2": str(gpt2_dir), "bert": str(bert_dir)}


@pytest.mark.parametrize("argv, code, says", CASES)
def test_the_adversarial_pass(places, argv, code, says, tmp_path, capsys):
    where = {**places, "tmp": str(tmp_path), "out": str(tmp_path / "out.csv")}
    argv = [a.format(**where) if "{" in a else a for a in argv]
    says = says.format(**where)
    got: str | int | None
    try:
        got = main(argv)
    except SystemExit as stop:
        got = stop.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    assert got == code, (got, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert says in lines[0], lines[0]
        assert not (tmp_path / "out.csv").exists()
    else:
        assert says in out + err, out + err
    assert not (tmp_path.parent / "PLANTED").exists() and not os.path.exists(os.path.join(places["d"], "PLANTED"))
