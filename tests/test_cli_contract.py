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


def refused(capsys, argv: list[str]) -> str:
    """Run the CLI in-process; assert exit 2 with one line on stderr and no traceback; return that line."""
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
    for name, parser in subcommands().items():
        for flag, action in options(parser):
            if not isinstance(action.type, Count):
                continue
            walked.add((name, flag))
            low, high = action.type.minimum, action.type.maximum
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
    for name, parser in subcommands().items():
        for flag, action in options(parser):
            if not isinstance(action.type, Real):
                continue
            walked.add((name, flag))
            kind = action.type
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
    assert got.err.strip() == "note: head 0.1 is named more than once: it is used once"
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
    deadline = time.monotonic() + 120
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
    _, err = first.communicate(timeout=240)
    assert first.returncode == 0 and err.count("wrote") == 1 and "Traceback" not in err, err
    assert refused_while_writing and out.is_file() and not (tmp_path / "p.csv.lock").exists()


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


# -- Ray addresses that cannot be used (issue 30, item 3) --------------------------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on (bound once to learn a free one, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile_on_ray(tmp_path, address: str, **env) -> str:
    """``profile --corpus ... --ray ADDRESS`` in its own process, where no Ray was started (RAY_TMPDIR: its own);
    it must stop with exit 2 and one line, not a traceback; that line. Before issue 30 some of these waited
    until killed: the timeout stops them."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\n")
    environ = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(tmp_path)} | env
    out = subprocess.run([sys.executable, "-m", "probes", "profile", "--corpus", str(corpus), "--model", "minilm",
                          "--out", str(tmp_path / "h.csv"), "--ray", address],
                         capture_output=True, text=True, timeout=60, env=environ)
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
    assert line.endswith("give --ray alone to start a local Ray for this run, or leave --ray out to run on this "
                         "process"), line


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
                    "`ray start --head`, give --ray alone to start a local Ray for this run, or leave --ray out to "
                    "run on this process")
    port = free_port()
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}")  # left by a Ray since stopped
    line = profile_on_ray(tmp_path, "auto")
    assert line.startswith(f"error: --ray auto (the Ray found on this machine, at 127.0.0.1:{port}): "
                           f"nothing answers at 127.0.0.1:{port} (connection refused)"), line
