"""The floors stay written down: the import contract (``lint-imports``, run by ``make test``) places every module of
the library, ignores no import, and no module reaches for another's private names."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def floors() -> list[set[str]]:
    (layers,) = [c["layers"] for c in contracts() if c["type"] == "layers"]
    return [{m.strip() for m in floor.replace(":", "|").split("|")} for floor in layers]


RAY_BACKENDS = {"probes.cluster", "probes.remote", "probes.corpus.ray_pool", "probes.corpus.ray_data"}


def test_no_contract_ignores_an_import_but_the_backends_of_ray():
    assert contracts(), "pyproject.toml lost its [tool.importlinter] contracts"
    for contract in contracts():
        ignored = contract.get("ignore_imports") or []
        if contract.get("forbidden_modules") == ["ray"]:  # only these import Ray: each is an ignored import of it
            assert {line.split(" -> ")[0] for line in ignored} == RAY_BACKENDS
            assert all(line.endswith(" -> ray") for line in ignored)
        else:
            assert not ignored, contract["name"]
        assert not contract.get("unmatched_ignore_imports_alerting"), contract["name"]


def test_every_module_of_the_library_stands_on_a_floor():
    placed = set().union(*floors())
    modules = {f"probes.{p.stem}" for p in (ROOT / "probes").glob("*.py") if p.stem != "__init__"}
    packages = {f"probes.{p.parent.name}" for p in (ROOT / "probes").glob("*/__init__.py")}
    unplaced = (modules | packages) - placed  # (the message named every module: `-` binds before `|`)
    assert not unplaced, f"not on any floor of the layers contract: {sorted(unplaced)}"
    app = {f"dashboard.{p.stem}" for p in (ROOT / "dashboard").glob("*.py") if p.stem != "__init__"}
    app |= {f"dashboard.{p.parent.name}" for p in (ROOT / "dashboard").glob("*/__init__.py")}
    assert app and not app - placed, f"not on any floor of the layers contract: {sorted(app - placed)}"


def test_a_floor_never_names_a_module_twice():
    names = [m for floor in floors() for m in floor]
    assert len(names) == len(set(names))


def private_imports(path: Path) -> list[str]:
    """``from X import _name`` and imports of ``_module``s (``__future__`` aside): a private helper reached from
    another module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            parts = [p for p in (node.module or "").split(".") if p]
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            parts, names = [], [p for a in node.names for p in a.name.split(".")]
        else:
            continue
        bad = [p for p in parts + names if p.startswith("_")]
        if bad:
            found.append(f"{path.name}:{node.lineno}: {', '.join(bad)}")
    return found


def test_no_module_imports_a_private_name_of_another():
    files = [p for package in ("probes", "dashboard") for p in (ROOT / package).rglob("*.py")]
    assert len(files) > 50
    assert [hit for f in files for hit in private_imports(f)] == []


def test_the_private_import_check_sees_one(tmp_path):
    sample = tmp_path / "run.py"
    sample.write_text("from __future__ import annotations\nfrom ..heads.profile import _helper\n"
                      "from ..jobs import write_table\nimport probes._hidden\n", encoding="utf-8")
    assert private_imports(sample) == ["run.py:2: _helper", "run.py:4: _hidden"]


def test_the_pages_contract_fails_when_a_page_imports_another(tmp_path):
    """``lint-imports`` (run by ``make test``) breaks the pages' contract the moment one page imports another: a copy
    of the app where Explore reads the KV lab's part of the link fails it, naming the import; the app as it is keeps
    it."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "dashboard", tmp_path / "dashboard", ignore=shutil.ignore_patterns("__pycache__", "static"))
    view = tmp_path / "dashboard" / "app_pages" / "explore" / "view.py"
    view.write_text(view.read_text(encoding="utf-8") + "\nfrom dashboard.app_pages.kv.state import KVState  # noqa\n",
                    encoding="utf-8")
    lint = Path(sys.executable).with_name("lint-imports")

    def run(where: Path) -> subprocess.CompletedProcess:
        env = {"PATH": str(lint.parent), "PYTHONPATH": str(where), "HOME": str(tmp_path)}
        return subprocess.run([str(lint), "--no-cache", str(ROOT / "pyproject.toml")], cwd=where, env=env,
                              capture_output=True, text=True, timeout=300)

    broken = run(tmp_path)
    assert broken.returncode != 0
    assert "A page of the app imports the app's core and the library, never another page BROKEN" in broken.stdout
    assert "dashboard.app_pages.explore.view -> dashboard.app_pages.kv.state" in broken.stdout
    kept = run(ROOT)
    assert kept.returncode == 0, kept.stdout[-2000:]
