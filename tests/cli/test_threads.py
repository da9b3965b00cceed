"""Every command chooses torch's threads for the kind of its work (issue 61): the registry each subcommand declares
(``probes.cli.common.threads_option`` / ``no_threads``), walked over every subcommand so that a new one cannot
forget it; the dispatcher applying it before the command runs, with ``--threads`` and the environment as overrides;
and real runs of ``kv`` and ``generate`` on a tiny checkpoint with ``torch.set_num_threads`` watched."""

from __future__ import annotations

import argparse

import pytest
import torch

from probes import cli, threads
from probes.cli import build_parser, main
from probes.cli.common import work_of

# the least each subcommand parses with (its required options); its entry is replaced, so nothing runs
ARGV = {
    "parity": ["--text", "a cat"],
    "profile": ["--out", "x.csv", "--probe", "positional"],
    "generate": ["--prompt", "a cat"],
    "kv": [],
    "ablate": ["--text", "a cat", "--heads", "0.0"],
    "importance": ["--out", "x.csv"],
    "why": ["--text", "a cat", "--layer", "0", "--head", "0", "--query", "cat", "--key", "a"],
    "claim": [],
    "compose": ["--receiver", "1.0"],
    "path-patch": ["--text", "a cat", "--corrupt", "a dog", "--receiver", "1.0"],
    "patch": ["--text", "a cat", "--corrupt", "a dog", "--receiver", "1.0"],
    "serve": [],
}
# what each command's work is: whole passes (batch, and profile's own rule), a token at a time (stream), none here
KIND = {"parity": "batch", "profile": "profile", "generate": "stream", "kv": "batch", "ablate": "batch",
        "importance": "profile", "why": "batch", "claim": "batch", "compose": "batch", "path-patch": "batch",
        "patch": "batch", "serve": None}
CPUS = 4  # the machine the tests give apply(): 4 free CPUs


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_says_the_kind_of_its_work():
    commands = subcommands()
    assert set(commands) == set(ARGV) == set(KIND)  # a new command: add it here, with its kind
    for name, parser in commands.items():
        args = parser.parse_args(ARGV[name])
        args.command = name
        kind = work_of(args)
        assert kind == KIND[name], name
        options = {o for a in parser._actions for o in a.option_strings}
        if kind is None:
            assert parser.get_default("no_threads_why"), name  # says why it runs no torch work
            assert "--threads" not in options, name
        else:
            assert kind in threads.KINDS and "--threads" in options, name


def test_a_command_that_says_nothing_is_a_mistake_named():
    args = argparse.Namespace(command="new-one", func=lambda args: 0)
    with pytest.raises(TypeError, match="'new-one' does not say the kind of its work"):
        work_of(args)


@pytest.fixture
def machine(monkeypatch):
    """4 CPUs, none busy, no override in the environment; torch's threads put back after."""
    monkeypatch.setattr(threads, "usable_cpus", lambda: CPUS)
    monkeypatch.setattr(threads, "busy_cpus", lambda seconds=0.25: 0.0)
    monkeypatch.setattr(threads, "_seen", {})
    monkeypatch.delenv("PROBES_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def spied(monkeypatch) -> list[int]:
    """Each command's entry replaced by one that records torch's threads when it starts."""
    seen: list[int] = []
    real = cli.build_parser

    def entry(args: argparse.Namespace) -> int:
        seen.append(torch.get_num_threads())
        return 0

    def build():
        parser = real()
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for sub in action.choices.values():
            sub.set_defaults(func=entry)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    return seen


@pytest.mark.parametrize("name", [n for n, k in KIND.items() if k is not None])
def test_each_command_runs_on_the_threads_its_kind_chooses(name, machine, monkeypatch, capsys):
    seen = spied(monkeypatch)
    torch.set_num_threads(2)  # neither choice: the command must set it
    assert main([name, *ARGV[name]]) == 0
    expected = 1 if KIND[name] == "stream" else CPUS  # a token at a time: one thread; whole passes: every free CPU
    assert seen == [expected]
    err = capsys.readouterr().err
    if name not in ("profile", "importance"):  # those two say it on their own last line ("wrote ... (torch threads")
        assert err.strip().splitlines()[-1] == f"torch threads: {expected} ({KIND[name]}; {CPUS} CPUs, 0.0 busy with " \
                                               "other work)"
    assert main([name, *ARGV[name], "--threads", "3"]) == 0  # --threads, then PROBES_THREADS, then OMP_NUM_THREADS
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert main([name, *ARGV[name]]) == 0
    monkeypatch.setenv("PROBES_THREADS", "3")
    assert main([name, *ARGV[name]]) == 0
    assert seen == [expected, 3, 2, 3]


def test_a_bad_thread_count_is_one_line_before_the_command_runs(machine, monkeypatch, capsys):
    seen = spied(monkeypatch)
    monkeypatch.setenv("PROBES_THREADS", "many")
    assert main(["kv"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: PROBES_THREADS='many'"), err
    assert seen == []


def test_serve_leaves_the_threads_alone(machine, monkeypatch, capsys):
    seen = spied(monkeypatch)
    torch.set_num_threads(2)
    assert main(["serve"]) == 0
    assert seen == [2] and "torch threads" not in capsys.readouterr().err


# -- real runs on a tiny checkpoint -------------------------------------------------------------------------------

TEXT = "The cat sat on the mat and the dog sat on the log."


@pytest.fixture
def set_to(machine, monkeypatch) -> list[int]:
    """Every torch.set_num_threads call, passed through."""
    calls: list[int] = []
    real = torch.set_num_threads

    def watch(n: int) -> None:
        calls.append(n)
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", watch)
    real(2)
    return calls


@pytest.mark.parametrize("argv, expected", [
    (["kv", "--text", TEXT, "--policies", "full,window:4"], CPUS),  # a layer at a time: whole passes
    (["kv", "--text", TEXT, "--policies", "full,window:4", "--method", "stream"], 1),  # token by token
    (["generate", "--prompt", "The cat", "--max-new-tokens", "3"], 1),
])
def test_a_real_run_sets_the_threads_before_its_work(argv, expected, llama_dir, set_to, capsys):
    assert main([argv[0], "--model", str(llama_dir), *argv[1:]]) == 0
    assert set_to == [expected] and torch.get_num_threads() == expected
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"torch threads: {expected} (")


# -- glibc's mmap threshold (probes.memory) ------------------------------------------------------------------------

# the commands that leave glibc's moving threshold alone (probes.cli.common.glibc_threshold): one text start to end
MOVING = {"kv"}


@pytest.mark.parametrize("name", list(KIND))
def test_each_command_fixes_the_mmap_threshold_unless_it_said_not_to(name, machine, monkeypatch, capsys):
    from probes import memory

    spied(monkeypatch)
    fixed: list[str] = []

    def steady() -> bool:
        fixed.append(name)
        return True

    monkeypatch.setattr(memory, "steady", steady)
    monkeypatch.delenv(memory.ENV, raising=False)
    assert main([name, *ARGV[name]]) == 0
    assert fixed == ([] if name in MOVING else [name])
    monkeypatch.setenv(memory.ENV, "262144")  # set by the user: obeyed by every command
    assert main([name, *ARGV[name]]) == 0
    assert fixed == ([name] if name in MOVING else [name, name])
