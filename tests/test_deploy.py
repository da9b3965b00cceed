"""The files Streamlit Community Cloud reads: CPU torch at the version every other install pins, the
project itself, and the app's config."""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def test_cloud_requirements_pin_the_cpu_build_of_the_pinned_torch():
    pinned = [line for line in _lines(ROOT / "constraints.txt") if line.startswith("torch==")]
    version = pinned[0].removeprefix("torch==")
    cloud = _lines(ROOT / "requirements.txt")
    assert f"torch=={version}+cpu" in cloud
    assert f"--find-links {TORCH_CPU}/torch/" in cloud
    assert not [line for line in cloud if "index-url" in line]  # an extra index would take numpy & co. under uv
    assert "." in cloud  # the project, with the dependencies pyproject.toml lists
    assert not [line for line in cloud if re.match(r"torch\b(?!==)", line)]  # no second, open torch line


TORCH_CPU = "https://download.pytorch.org/whl/cpu"  # PyTorch's CPU wheels: an index, and torch's page in it
PLATFORMS = {"3.11": "cp311", "3.12": "cp312"}  # the Cloud's Python choices (3.12 its default), linux x86_64


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any") -> Path:
    """A minimal wheel (metadata only) of ``name`` ``version`` needing ``requires``."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-{version}"
    files = {f"{name}/__init__.py": "",
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                           + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist}.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    digest = lambda text: base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()  # noqa: E731
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{p},sha256={digest(c)},{len(c)}\n" for p, c in files.items()) + \
        f"{dist}.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name_in, text in files.items():
            z.writestr(name_in, text)
    return path


def _index(root: Path, wheels: dict[str, list[Path]]) -> None:
    """A PEP 503 simple index at ``root``: one folder per project, its wheels beside its index.html (so the folder
    is also a find-links location)."""
    for project, paths in wheels.items():
        links = "".join(f'<a href="{p.name}">{p.name}</a>' for p in paths)
        (root / project / "index.html").write_text(f"<html><body>{links}</body></html>")
    projects = "".join(f'<a href="{n}/">{n}</a>' for n in wheels)
    (root / "index.html").write_text(f"<html><body>{projects}</body></html>")


def _stand_ins(tmp: Path, version: str) -> tuple[str, str]:
    """Offline stand-ins, as file:// URLs: PyPI (numpy 1 and 2; torch ``version`` as the CUDA build: no local
    label; ``app``, needing numpy ≥ 2 and torch, in the place of this project) and PyTorch's CPU index (torch
    ``version``+cpu for cp311 and cp312 on manylinux x86_64, and an old numpy, as PyTorch's index carries
    torch's dependencies)."""
    pypi, cpu = tmp / "pypi", tmp / "whl" / "cpu"
    _index(pypi, {"numpy": [_wheel(pypi / "numpy", "numpy", "1.0.0"), _wheel(pypi / "numpy", "numpy", "2.0.0")],
                  "torch": [_wheel(pypi / "torch", "torch", version, ("numpy",))],
                  "app": [_wheel(pypi / "app", "app", "1.0", ("numpy>=2", "torch"))]})
    _index(cpu, {"torch": [_wheel(cpu / "torch", "torch", f"{version}+cpu", ("numpy",),
                                  tag=f"{cp}-{cp}-manylinux_2_28_x86_64") for cp in PLATFORMS.values()],
                 "numpy": [_wheel(cpu / "numpy", "numpy", "1.0.0")]})
    return pypi.as_uri(), cpu.as_uri()


def _resolve(tool: str, requirements: Path, index: str, python: str, tmp: Path) -> dict[str, str] | str:
    """What ``tool`` (uv or pip) installs for ``requirements`` on ``python``, linux x86_64, from ``index`` (and the
    file's own options) and nothing else: {name: version}, or the tool's error."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, UV_NO_CONFIG="1", UV_PYTHON_DOWNLOADS="never", UV_NO_CACHE="1")
    if tool == "uv":
        import shutil

        uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
        assert uv, "uv is in the test extra (pyproject.toml): make install-test"
        cmd = [uv, "pip", "compile", str(requirements), "--index-url", index, "--python-version", python,
               "--python-platform", "x86_64-manylinux_2_28", "--no-header", "--no-annotate", "--quiet"]
    else:
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-cache-dir",
               "--only-binary=:all:", "--python-version", python, "--platform", "manylinux_2_28_x86_64",
               "--target", str(tmp / "target"), "--index-url", index, "--report", "-", "--quiet",
               "-r", str(requirements)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=300)
    if done.returncode:
        return done.stderr
    if tool == "uv":
        return dict(line.split("==", 1) for line in done.stdout.splitlines() if "==" in line)
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(done.stdout)["install"]}


@pytest.mark.parametrize("python", sorted(PLATFORMS))
@pytest.mark.parametrize("tool", ["uv", "pip"])
def test_cloud_requirements_resolve_the_clouds_way_with_uv_and_with_pip(tmp_path, tool, python):
    """The Cloud resolves requirements.txt with uv first (then pip), on Python 3.12 by default. Offline, with
    stand-ins for PyPI and PyTorch's CPU wheels at their places in the file: torch is the CPU build for that Python and
    every other package comes from PyPI; the same file with ``--extra-index-url`` (the old one) makes uv take numpy
    from PyTorch's index alone, where the project's numpy ≥ 2 is not (astral-sh/uv #2840)."""
    version = _lines(ROOT / "constraints.txt")[0].removeprefix("torch==")
    pypi, cpu = _stand_ins(tmp_path, version)
    text = (ROOT / "requirements.txt").read_text().replace(TORCH_CPU, cpu)
    ours = tmp_path / "requirements.txt"
    ours.write_text("\n".join("app" if line.strip() == "." else line for line in text.splitlines()) + "\n")
    got = _resolve(tool, ours, pypi, python, tmp_path)
    assert got == {"app": "1.0", "numpy": "2.0.0", "torch": f"{version}+cpu"}, got
    if tool == "uv":
        old = tmp_path / "old.txt"
        old.write_text(f"--extra-index-url {cpu}\ntorch=={version}+cpu\napp\n")
        assert "numpy>=2" in _resolve("uv", old, pypi, python, tmp_path)


def test_streamlit_config_hides_tracebacks_and_developer_tools():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["showErrorDetails"] == "none"
    assert config["client"]["toolbarMode"] == "viewer"
    assert config["browser"]["gatherUsageStats"] is False


def test_streamlit_config_keeps_reruns_cheap_under_load():
    """Under 8 people at once, Streamlit's full garbage collection after every rerun and its polling of the
    source files took most of the server's CPU (benchmarks/load_test.py): both are off."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False
    assert config["server"]["fileWatcherType"] == "none"
