"""One meaning per public name (issue 60; the vocabulary in docs/architecture.md): ``run`` is running a model on a
text for its Trace, ``forward`` one forward pass of an encoding, ``load`` getting a model by name, every command's
entry is ``main``, ``--ray`` is a Ray cluster (tests/test_cli_contract.py), and ``Model`` is only a deprecated name
of ``LocalModel``. The library's source is read with ``ast``; the old names that still work are called, and each
must warn and give what the new name gives."""

from __future__ import annotations

import argparse
import ast
import warnings
from pathlib import Path

import pytest
import torch

import probes
from probes import cli, models, runner, scratch

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "probes"
OLD_MODEL = "Model"  # the deprecated alias, by name: no line here uses it as a name


Def = ast.FunctionDef | ast.AsyncFunctionDef


def _defs(path: Path):
    """Each function or method defined in ``path``: (its class or None, its node), nested functions left out."""
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            yield from ((node, f) for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef))


def _warns_deprecation(fn: Def) -> bool:
    """Whether ``fn``'s body warns a DeprecationWarning (a deprecated alias that still works)."""
    return any(isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "warn"
               and any(isinstance(a, ast.Name) and a.id == "DeprecationWarning" for a in ast.walk(node))
               for node in ast.walk(fn))


def _library_files() -> list[Path]:
    files = sorted(LIBRARY.rglob("*.py"))
    assert len(files) > 50, files  # the walk reads the library, not an empty folder
    return files


def _where(path: Path, cls: ast.ClassDef | None, fn: Def) -> str:
    return f"{path.relative_to(ROOT)}:{fn.lineno} {cls.name + '.' if cls else ''}{fn.name}"


def test_run_is_a_model_run_on_a_text_and_nothing_else():
    """``run`` at module level is ``probes.run`` alone (a deprecated alias may keep an old ``run``, warning); as a
    method, only a backend's (a class with ``run`` and ``call``: :class:`probes.seam.Backend`), the same act behind
    the seam."""
    seen, wrong = [], []
    for path in _library_files():
        for cls, fn in _defs(path):
            if fn.name != "run":
                continue
            where = _where(path, cls, fn)
            seen.append(where)
            if cls is None:
                ok = path == LIBRARY / "__init__.py" or _warns_deprecation(fn)
            else:
                ok = {"run", "call"} <= {f.name for f in cls.body if isinstance(f, ast.FunctionDef)}
            if not ok:
                wrong.append(where)
    assert not wrong, wrong
    assert any(w.startswith("probes/__init__.py:") and w.endswith(" run") for w in seen), seen
    assert sum(".run" in w for w in seen) >= 3, seen  # the Protocol and its two backends: the walk sees methods


def test_forward_is_one_pass_of_an_encoding_with_one_signature():
    """Every ``forward`` is a module's function ``forward(model, enc, ...)``: the producers and the runner."""
    found = []
    for path in _library_files():
        for cls, fn in _defs(path):
            if fn.name == "forward":
                found.append((_where(path, cls, fn), cls is None, [a.arg for a in fn.args.args[:2]]))
    assert {w.split(":")[0] for w, _, _ in found} == {"probes/hf.py", "probes/scratch/__init__.py",
                                                      "probes/runner.py"}, found
    assert all(module_level and params == ["model", "enc"] for _, module_level, params in found), found


def test_load_is_getting_a_model_by_name():
    """Every ``load`` is a module's function whose first parameter is the model's ``name``; what reads something
    else (a probe's items, a layer's weights) says what it reads."""
    found = [(_where(path, cls, fn), cls is None, fn.args.args[0].arg if fn.args.args else None)
             for path in _library_files() for cls, fn in _defs(path) if fn.name == "load"]
    assert {w.split(":")[0] for w, _, _ in found} == {"probes/__init__.py", "probes/models.py"}, found
    assert all(module_level and first == "name" for _, module_level, first in found), found


def test_no_code_says_model_for_a_local_model():
    """``Model`` (the deprecated alias of ``LocalModel``) is used nowhere: not as a name, an attribute or an import,
    in the library, the app, the tests or the benchmarks."""
    used = []
    for folder in ("probes", "dashboard", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                        else node.name if isinstance(node, ast.alias) else None)
                if name == OLD_MODEL:
                    used.append(f"{path.relative_to(ROOT)}:{node.lineno if hasattr(node, 'lineno') else '?'}")
    assert not used, used


def test_every_command_enters_at_main():
    """Each subcommand's entry (the function its parser sets as ``func``) is its module's ``main`` (``main_ablate``
    and ``main_importance`` in the module of two commands)."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    entries = {name: p.get_default("func") for name, p in sub.choices.items()}
    assert len(entries) >= 10, entries
    for name, fn in entries.items():
        assert fn.__name__ == "main" or fn.__name__ == f"main_{name}", (name, fn.__module__, fn.__name__)
        assert fn.__module__.startswith("probes.cli."), (name, fn.__module__)


# -- the old names that still work ---------------------------------------------------------------------------------


@pytest.mark.parametrize("module", [probes, models], ids=["probes", "probes.models"])
def test_model_is_local_model_with_a_warning(module):
    with pytest.warns(DeprecationWarning, match="use (probes.)?LocalModel"):
        old = getattr(module, OLD_MODEL)
    assert old is models.LocalModel
    with pytest.raises(AttributeError, match="has no attribute 'Modell'"):
        getattr(module, OLD_MODEL + "l")  # another name is still missing: only the old one answers
    assert OLD_MODEL not in probes.__all__


def test_runner_run_is_runner_trace_with_a_warning(minilm):
    texts = ["the cat sat on the mat", "a dog"]
    with pytest.warns(DeprecationWarning, match=r"probes\.runner\.trace"):
        old = runner.run(minilm, texts, source="scratch", backend="sdpa")
    new = runner.trace(minilm, texts, source="scratch", backend="sdpa")
    assert (old.source, old.tokens) == (new.source, new.tokens)
    for layer in range(minilm.n_layers):
        assert torch.equal(old.attention(layer, 1, item=1), new.attention(layer, 1, item=1))


def test_scratch_run_is_run_with_hooks_with_a_warning(gpt2_model):
    enc = gpt2_model.encode("the cat sat on the mat")

    def zero_head_1(z, name):
        z = z.clone()
        z[:, 1] = 0.0
        return z

    hooks = {scratch.point(1, "attn.z"): zero_head_1}
    with pytest.warns(DeprecationWarning, match=r"probes\.scratch\.run_with_hooks"):
        old = scratch.run(gpt2_model, enc, hooks, keep=["attn.z"])
    new = scratch.run_with_hooks(gpt2_model, enc, hooks, keep=["attn.z"])
    clean = scratch.run_with_hooks(gpt2_model, enc)
    assert old.logits is not None and new.logits is not None and clean.logits is not None
    assert torch.equal(old.logits, new.logits) and not torch.equal(old.logits, clean.logits)  # the edit ran
    assert old.kept.keys() == new.kept.keys() and all(torch.equal(old[k], new[k]) for k in new.kept)


def test_the_new_names_do_not_warn(gpt2_model):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        runner.trace(gpt2_model, "hi")
        scratch.run_with_hooks(gpt2_model, gpt2_model.encode("hi"))
        probes.run(gpt2_model, "hi")
        assert probes.LocalModel is models.LocalModel
