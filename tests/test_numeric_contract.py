"""The contract every numeric assertion of the suite keeps (read from the tests' source, not run):

* a float comparison (``approx``, ``allclose``, ``isclose``, ``assert_close``, ``assert_allclose``) states its
  tolerance, and states it with a name from ``tests/numeric.py`` (or 0), never a bare number: each tolerance
  has its reason written there once;
* an assertion that a value is below a small number (``x <= 1e-6``) is a tolerance too: the same rule;
* every test that compares floats carries the ``numeric`` marker, so ``make test`` runs it under another CPU's
  kernels than the machine's own (``ATEN_CPU_CAPABILITY=default``, one thread: its second run, ``make test-numeric``);
* a test marked ``bitwise`` as well, or in a module so marked (a Ray run against one process, a served model against
  a local one: two runs of one computation, in one order) compares exactly, with no tolerance at all: that is why
  ``make test`` runs it with the rest, on the machine's own kernels, not in its numeric run (equal bit for bit under
  one CPU's kernels, the two runs are equal under any, since both change alike), so a tolerance there would go
  unchecked under the portable kernels.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOSE = {"approx": ("abs", "rel"), "allclose": ("atol", "rtol"), "isclose": ("atol", "rtol"),
         "assert_close": ("atol", "rtol"), "assert_allclose": ("atol", "rtol"),
         # pandas compares float columns with rtol=1e-5 unless told check_exact=True
         "assert_frame_equal": ("atol", "rtol"), "assert_series_equal": ("atol", "rtol")}
SMALL = 1e-2  # "x < 0.001" is a tolerance; "x > 1e-3" (an effect is there) is not


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _bare(node: ast.AST | None) -> bool:
    """A tolerance written as a literal other than 0 (``1e-6``, ``-1e-6``)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value != 0


def _small_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, float) and 0 < abs(node.value) < SMALL


def _marked(decorators: list[ast.expr]) -> bool:
    return any("numeric" in ast.unparse(d) for d in decorators)


def problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    marks = " ".join(ast.unparse(n.value) for n in tree.body if isinstance(n, ast.Assign)
                     and any(getattr(t, "id", "") == "pytestmark" for t in n.targets))
    module_marked, bitwise = "numeric" in marks, "bitwise" in marks
    tolerances = {alias.asname or alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                  and n.module == "numeric" for alias in n.names}  # a test that uses them compares floats
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        compares = False
        exact = bitwise or any("bitwise" in ast.unparse(d) for d in fn.decorator_list)  # the module's, or its own
        for node in ast.walk(fn):
            where = f"{path.relative_to(TESTS.parent)}:{getattr(node, 'lineno', fn.lineno)}"
            if isinstance(node, ast.Call) and _name(node) in CLOSE:
                compares = True
                given = {k.arg: k.value for k in node.keywords}
                if "check_exact" in given and ast.unparse(given["check_exact"]) == "True":
                    continue  # exact: no tolerance to give a reason for
                if exact and not all(ast.unparse(given.get(arg, ast.Constant(1))) == "0"
                                       for arg in CLOSE[_name(node)]):
                    found.append(f"{where}: {_name(node)} with a tolerance in a test marked bitwise (not run on "
                                 "the portable kernels): compare exactly, or drop the bitwise marker")
                    continue
                for arg in CLOSE[_name(node)]:
                    if arg not in given:
                        found.append(f"{where}: {_name(node)} without {arg}= (its default is a tolerance with no "
                                     "reason: take one from tests/numeric.py, or 0)")
                    elif _bare(given[arg]):
                        found.append(f"{where}: {arg}={ast.unparse(given[arg])} is a bare number: take it from "
                                     "tests/numeric.py")
            elif isinstance(node, ast.Compare):
                # each operator between its two operands: the first list is one longer, so not strict
                pairs = zip([node.left, *node.comparators], node.ops, node.comparators, strict=False)
                for left, op, right in pairs:
                    if (isinstance(op, (ast.Lt, ast.LtE)) and _small_literal(right)) or (
                            isinstance(op, (ast.Gt, ast.GtE)) and _small_literal(left)):
                        compares = True
                        found.append(f"{where}: `{ast.unparse(node)}` is a tolerance written as a bare number: take "
                                     "it from tests/numeric.py")
            elif isinstance(node, ast.Name) and node.id in tolerances:
                compares = True
                if exact:
                    found.append(f"{where}: the tolerance {node.id} in a test marked bitwise (not run on the "
                                 "portable kernels): compare exactly, or drop the bitwise marker")
        if compares and fn.name.startswith("test") and not (module_marked or _marked(fn.decorator_list)):
            found.append(f"{path.relative_to(TESTS.parent)}:{fn.lineno}: {fn.name} compares floats without the "
                         "numeric marker")
    return found


def test_every_tolerance_has_its_reason_and_every_float_comparison_its_marker():
    found = [p for path in sorted(TESTS.rglob("*.py")) if path.name != "numeric.py" for p in problems(path)]
    assert not found, f"{len(found)} numeric assertions break the contract:\n" + "\n".join(found)


def _problems_in(folder: Path, path: Path) -> list[str]:
    """:func:`problems` of a file written under ``folder`` (its paths said relative to that folder's parent)."""
    global TESTS
    saved, TESTS = TESTS, folder
    try:
        return problems(path)
    finally:
        TESTS = saved


def test_the_contract_catches_what_it_says(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("import pytest\n\ndef test_a(x):\n    assert x == pytest.approx(1.0)\n    assert x < 1e-6\n"
                   "    assert torch.allclose(x, x, atol=1e-5, rtol=0)\n\ndef test_effect(x):\n    assert x > 1e-3\n")
    found = _problems_in(tmp_path, bad)
    assert len(found) == 5, found  # approx's abs= and rel=, the bare 1e-6, atol=1e-5, and the missing marker
    frames = tmp_path / "test_frames.py"
    frames.write_text("import pytest\n\n@pytest.mark.numeric\ndef test_f(a, b):\n    assert_frame_equal(a, b)\n"
                      "    assert_frame_equal(a, b, check_exact=True)\n")
    found = _problems_in(tmp_path, frames)
    assert len(found) == 2, found  # pandas' own rtol=1e-5 and atol=1e-8, unless exact
    assert all("test_effect" not in f for f in found)
    exact = tmp_path / "test_exact.py"
    exact.write_text("import pytest\nfrom numeric import F64\n\n"
                     "pytestmark = [pytest.mark.numeric, pytest.mark.bitwise]\n\n"
                     "def test_b(a, b):\n    assert_frame_equal(a, b, check_exact=True)\n"
                     "    assert torch.allclose(a, b, atol=0, rtol=0)\n"
                     "    assert torch.allclose(a, b, atol=F64, rtol=0)\n")
    found = _problems_in(tmp_path, exact)
    assert len(found) == 2 and all("marked bitwise" in f for f in found), found  # the allclose with F64, and F64
    one = tmp_path / "test_one.py"  # a test marked bitwise on its own, in a module that is not
    one.write_text("import pytest\nfrom numeric import F64\n\n@pytest.mark.numeric\n@pytest.mark.bitwise\n"
                   "def test_b(a, b):\n    assert torch.allclose(a, b, atol=F64, rtol=0)\n\n"
                   "@pytest.mark.numeric\ndef test_c(a, b):\n    assert torch.allclose(a, b, atol=F64, rtol=0)\n")
    found = _problems_in(tmp_path, one)
    # test_b's allclose and its F64 (line 7); test_c, not bitwise, may take F64
    assert len(found) == 2 and all("marked bitwise" in f and ":7:" in f for f in found), found
