"""Prose that does not rot: code comments, docstrings and configuration say why, not how long. A measured time
(``56 s to 33 s``, ``about 10 s on SmolLM2``, ``took 31 s``) goes stale with the next machine or change, so it lives
in a benchmark's results (``benchmarks/results/``) and in the dated passages of ``docs/``, and a comment points there.
Constants the code sets (a 3 s grace, a 600 s step, every 0.1 s) are not measurements and are not flagged."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_TIME = r"\d(?:[\d,.]*\d)?(?:\s*[–-]\s*\d(?:[\d,.]*\d)?)?\s*(?:s|ms|µs|seconds?|minutes?|min)(?![\w])"
MEASURED = re.compile("|".join([
    rf"{_TIME}\s*(?:to|→|->|against|instead of|vs\.?|versus)\s+(?:[\w'~≈]+\s+){{0,2}}{_TIME}",  # "56 s to 33 s"
    rf"{_TIME} in [^,;.]{{1,30}}, {_TIME} in ",  # "74 s in passes of 16, 68 s in passes of 4"
    rf"\bfrom\s+{_TIME}",  # "from 8.1 s"
    rf"(?:~|≈|\babout\s+|\baround\s+|\bnearly\s+|\broughly\s+){_TIME}",  # "~17 s", "about 10 s on SmolLM2"
    rf"\b(?:took|takes|taking|costs?|spent|spends|ran for|runs? for|lasted)\s+(?:up to\s+)?{_TIME}",  # "took 31 s"
    rf"{_TIME}\s+(?:less|more|faster|slower|longer|shorter|saved)\b",  # "0.3 s less"
    r"(?<![≥≤<>] )\d(?:[\d.]*\d)?\s*×\s*(?:faster|slower|the time|as long)",  # "1.6× the time" (not a goal: "≥ 5×")
]))

# Where a flagged sentence compares constants rather than measurements: (file, the sentence's words).
ALLOWED = {
    ("tests/corpus/test_multinode.py", "1 s instead of Ray's 15 s (3 s x 5)"),  # Ray's health-check settings
}


def prose(path: Path) -> list[tuple[int, str]]:
    """The comments and docstrings of a Python file, or the comments of a Makefile or TOML file: (line, text)."""
    text = path.read_text()
    if path.suffix != ".py":
        return [(i, line[line.index("#"):]) for i, line in enumerate(text.splitlines(), 1) if "#" in line]
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


def measured_times(path: Path) -> list[str]:
    where = path.relative_to(ROOT).as_posix()
    hits = []
    for line, text in prose(path):
        flat = " ".join(text.split())
        for match in MEASURED.finditer(flat):
            if not any(where == file and words in flat for file, words in ALLOWED):
                hits.append(f"{where}:{line}: {match.group(0)!r}")
    return hits


def _checked() -> list[Path]:
    files = [ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in ("probes", "dashboard", "tests"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [f for f in files if f != Path(__file__).resolve()]  # this file's examples are measurements on purpose


def test_the_pattern_tells_a_measurement_from_a_constant():
    measured = ["mypy: 56 s to 33 s on one process", "74 s in passes of 16, 68 s in passes of 4",
                "(about 10 s on SmolLM2 on two CPUs)", "that took 31 s of this test", "0.3 s less a click",
                "takes 0.4-1.3 s here", "cut it from 8.1 s", "~17 s on every load", "in 1.6× the time"]
    constants = ["stops after 60 seconds", "SIGTERM ends it within 3 s", "polled every 0.1 s", "a 600 s step",
                 "a 3 s grace, a 600 s step", "after 1 s, then 2 s",
                 "the goal: ≥ 5× faster", "a budget of 96 MiB", "at most 2 GiB", "up to 32 MiB",
                 "2 × layers × kv_heads × d_head × tokens × 4 bytes"]
    assert [s for s in measured if not MEASURED.search(s)] == []
    assert [s for s in constants if MEASURED.search(s)] == []


def test_no_comment_or_config_carries_a_measured_time():
    hits = [hit for path in _checked() for hit in measured_times(path)]
    assert not hits, ("a measured time in a comment, docstring or configuration: keep the reason there and move the "
                      "figure to benchmarks/results/ or a dated passage of docs/ (see CONTRIBUTING.md)", hits)


def test_every_allowed_exception_is_still_there():
    stale = [(file, words) for file, words in ALLOWED
             if not any(words in " ".join(text.split()) for _, text in prose(ROOT / file))]
    assert not stale, f"remove these from ALLOWED: {stale}"
