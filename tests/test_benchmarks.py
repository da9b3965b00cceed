"""The benchmarks' two rules (``benchmarks/report.py``, issue 44): a run writes under ``--out`` or else a new
temporary folder, so it never overwrites the committed results in ``benchmarks/results`` unless asked; and
contenders timed against each other take turns round by round, their tables giving each round's ratio.

Read from the scripts' source (every ``benchmarks/*.py``), the helpers run on fake contenders with a clock the
test moves (no timing assertions), and one cheap benchmark run end to end as a user runs it."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from numeric import F64

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
# Options whose default may name a file under benchmarks/results because the script only reads it.
READ_ONLY = {("kvpress_check.py", "--json")}


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", BENCHMARKS / "report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (a dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


report = _report()


def _options(tree: ast.AST):
    """Every ``add_argument("--name", ...)`` call in a script: (option name, call)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node.args[0].value, node


def _into_results(node: ast.AST) -> bool:
    """Whether an expression builds a path into the results folder (``... / "results"``, or the string itself)."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str)
               and (n.value == "results" or "benchmarks/results" in n.value) for n in ast.walk(node))


def out_problems(path: Path) -> list[str]:
    """What in one script would write into the repository by default: an ``--out`` whose default is not None, or
    a path into ``benchmarks/results`` built anywhere but as the default of an option the script only reads."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    allowed: set[int] = set()
    for name, call in _options(tree):
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        if name == "--out" and default is not None and not (isinstance(default, ast.Constant)
                                                            and default.value is None):
            found.append(f"{path.name}:{call.lineno}: --out defaults to {ast.unparse(default)}")
        if default is not None and (path.name, name) in READ_ONLY:
            allowed |= {id(n) for n in ast.walk(default)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and id(node) not in allowed
                and isinstance(node.right, ast.Constant) and node.right.value == "results"):
            if path.name == "report.py":  # report.RESULTS: the committed folder, read for a saved 'before:' block
                continue
            found.append(f"{path.name}:{node.lineno}: a path into the results folder: {ast.unparse(node)}")
    for name, call in _options(tree):
        for k in call.keywords:
            if k.arg == "default" and (path.name, name) not in READ_ONLY and _into_results(k.value):
                found.append(f"{path.name}:{call.lineno}: {name} defaults into the results folder")
    return sorted(set(found))


def test_every_benchmark_script_is_read():
    assert len(SCRIPTS) >= 30 and BENCHMARKS / "report.py" in SCRIPTS


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_benchmark_writes_into_the_repository_by_default(path):
    assert out_problems(path) == []


def test_the_out_check_catches_what_it_says(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('from pathlib import Path\nimport argparse\nROOT = Path(".")\n'
                   'OUT = ROOT / "benchmarks" / "results"\n'
                   'p = argparse.ArgumentParser()\np.add_argument("--out", type=Path, default=ROOT / "results")\n'
                   'p.add_argument("--json", type=Path, default="benchmarks/results/x.json")\n')
    good = tmp_path / "good.py"
    good.write_text('import argparse\np = argparse.ArgumentParser()\np.add_argument("--out", default=None)\n'
                    'p.add_argument("--model", default="minilm")\n')
    assert sorted({p.split(": ", 1)[0] for p in out_problems(bad)}) == ["bad.py:4", "bad.py:6", "bad.py:7"]
    assert out_problems(good) == []


def test_out_folder_is_a_new_empty_temporary_folder_outside_the_repository(capsys):
    first, second = report.out_folder(None), report.out_folder(None)
    try:
        assert first != second and first.is_dir() and second.is_dir()
        assert list(first.iterdir()) == [] and list(second.iterdir()) == []
        assert not first.resolve().is_relative_to(ROOT)
        assert first.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
        assert str(first) in capsys.readouterr().out  # printed, so a person can find the files
    finally:
        shutil.rmtree(first)
        shutil.rmtree(second)


def test_out_folder_given_is_that_folder_made(tmp_path):
    wanted = tmp_path / "a" / "b"
    assert report.out_folder(wanted) == wanted and wanted.is_dir()


def test_publish_without_out_writes_to_a_temporary_folder_not_the_results(capsys):
    name = "test_benchmarks_publish_probe.txt"
    written = report.publish("the table\n", None, name)
    try:
        assert written.name == name and written.read_text() == "the table\n"
        assert not written.resolve().is_relative_to(ROOT)
        assert not (BENCHMARKS / "results" / name).exists()
        out = capsys.readouterr().out
        assert "the table" in out and str(written) in out
    finally:
        shutil.rmtree(written.parent)


def test_publish_with_out_writes_there(tmp_path, capsys):
    written = report.publish("row\n", tmp_path / "res", "t.txt")
    assert written == tmp_path / "res" / "t.txt" and written.read_text() == "row\n"


class FakeClock:
    """A clock the contenders move: each call of a contender advances it by that contender's next duration."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_alternate_interleaves_contenders_round_by_round():
    calls: list[str] = []
    clock = FakeClock()
    durations = {"A": [1.0, 2.0, 4.0], "B": [2.0, 3.0, 2.0], "C": [8.0, 8.0, 8.0]}

    def contender(name: str):
        def go():
            clock.now += durations[name][sum(c == name for c in calls)]
            calls.append(name)
            return f"{name}{len(calls)}"
        return go

    got = report.alternate({name: contender(name) for name in "ABC"}, 3, clock=clock)
    assert calls == ["A", "B", "C", "B", "C", "A", "C", "A", "B"]  # each round rotated by one
    assert got.orders == [["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"]]
    for name in "ABC":  # never a second round of one before every other's first
        second = [i for i, c in enumerate(calls) if c == name][1]
        assert all(calls.index(other) < second for other in "ABC")
    for r in range(3):  # every round runs each contender exactly once
        assert sorted(calls[3 * r:3 * r + 3]) == ["A", "B", "C"]
    assert got.seconds == durations  # each round's own time, in round order
    assert got.results == {"A": "A8", "B": "B9", "C": "C7"}  # each one's last round


def test_alternate_refuses_no_rounds():
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        report.alternate({"A": lambda: None}, 0)


@pytest.mark.numeric
def test_ratios_are_each_rounds_own_against_the_reference():
    seconds = {"ref": [1.0, 2.0, 4.0], "x": [2.0, 3.0, 2.0], "y": [0.5, 0.5, 1.0]}
    got = report.ratios(seconds, "ref")
    assert got["ref"] == pytest.approx([1.0, 1.0, 1.0], abs=F64, rel=F64)
    assert got["x"] == pytest.approx([2.0, 1.5, 0.5], abs=F64, rel=F64)
    assert got["y"] == pytest.approx([0.5, 0.25, 0.25], abs=F64, rel=F64)
    with pytest.raises(ValueError):  # rounds that do not pair up are an error, not a silent shorter list
        report.ratios({"ref": [1.0, 2.0], "x": [1.0]}, "ref")


def test_summary_gives_median_min_max_and_every_round():
    assert report.summary([2.0, 1.5, 0.5]) == "1.50× (0.50–2.00×: 2.00 / 1.50 / 0.50)"
    assert report.summary([1.2, 1.4]) == "1.30× (1.20–1.40×: 1.20 / 1.40)"
    assert report.summary([3.0]) == "3.00×"
    assert report.summary([]) == "–"


def _results_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "benchmarks/results"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_a_benchmark_run_without_out_leaves_the_committed_results_alone():
    before = _results_status()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1",
                                                                         "TRANSFORMERS_VERBOSITY": "error"}
    done = subprocess.run([sys.executable, "benchmarks/parity_reuse.py", "--repeats", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    written = Path(next(line for line in done.stdout.splitlines() if line.startswith("wrote ")).removeprefix("wrote "))
    try:
        assert written.name == "parity_reuse.txt" and written.is_file()
        assert not written.resolve().is_relative_to(ROOT)
        assert "| tokens |" in written.read_text() and "per round" in written.read_text()
        assert _results_status() == before
    finally:
        shutil.rmtree(written.parent)
