"""The Makefile's installs, run for real against a stand-in venv whose ``python`` writes down what it is asked and
installs nothing: ``make install`` (what ``make app`` runs first) takes the project alone, ``make install-test``
(``make test``'s) adds the test and Ray extras; torch comes first, from PyTorch's CPU wheels on a machine without an
NVIDIA driver and from PyPI (its CUDA build) on one with it, and ``TORCH=cpu|cuda`` decides instead."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


class Machine:
    """A stand-in machine for ``make``: a PATH with or without ``nvidia-smi``, a driver folder or none, and a venv
    whose ``bin/python`` logs its arguments, one call a line."""

    def __init__(self, root: Path, nvidia_smi: bool = False, driver: bool = False):
        self.root, self.venv, self.log = root, root / "venv", root / "python.log"
        (self.venv / "bin").mkdir(parents=True)
        python = self.venv / "bin" / "python"
        python.write_text(f'#!/bin/sh\necho "$*" >> "{self.log}"\n')
        python.chmod(0o755)
        tools = root / "tools"
        tools.mkdir()
        if nvidia_smi:
            (tools / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
            (tools / "nvidia-smi").chmod(0o755)
        self.driver = root / "proc-driver-nvidia"
        if driver:
            self.driver.mkdir()
        # the real PATH, less any folder that holds a real nvidia-smi (a GPU runner), after our tools
        real = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
        self.path = os.pathsep.join([str(tools), *real])

    def make(self, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("TORCH", "TORCH_INDEX", "VENV", "MAKEFLAGS", "MFLAGS")}
        env["PATH"] = self.path
        return subprocess.run(["make", "--no-print-directory", f"VENV={self.venv}", f"NVIDIA_DRIVER={self.driver}",
                               *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    def calls(self) -> list[str]:
        """What the venv's python was asked, in order (and forgotten: the next read starts after it)."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return lines


def _installs(calls: list[str]) -> list[str]:
    return [c.removeprefix("-m pip ") for c in calls if c.startswith("-m pip ")]


def _torch_from(installs: list[str]) -> str:
    """Where the torch install takes torch: an index's address, or "pypi" for pip's own."""
    (line,) = [i for i in installs if i.startswith("install ") and i.endswith(" torch")]
    assert "-c constraints.txt" in line, line  # the pinned version, whichever build
    words = line.split()
    return words[words.index("--index-url") + 1] if "--index-url" in words else "pypi"


def test_make_app_installs_the_app_alone_with_cpu_torch_on_a_machine_without_a_gpu(tmp_path):
    machine = Machine(tmp_path)
    done = machine.make("install")
    assert done.returncode == 0, done.stderr
    installs = _installs(machine.calls())
    assert installs == ["install -c constraints.txt --index-url https://download.pytorch.org/whl/cpu torch",
                        "install -c constraints.txt -e ."], installs
    assert (machine.venv / ".torch-cpu").exists()
    cloud = [line.split()[1] for line in (ROOT / "requirements.txt").read_text().splitlines()
             if line.startswith("--find-links")]
    assert cloud == [f"{CPU_INDEX}/torch/"]  # the CPU wheels Streamlit Community Cloud takes (requirements.txt)
    dry = machine.make("-n", "app").stdout  # the app's recipe: nothing left to install, then the server
    assert "pip install" not in dry and "streamlit run dashboard/serve.py" in dry


def test_make_test_adds_the_test_and_ray_extras(tmp_path):
    machine = Machine(tmp_path)
    done = machine.make("install-test")
    assert done.returncode == 0, done.stderr
    installs = _installs(machine.calls())
    assert installs[1:] == ['install -c constraints.txt -e .[test,ray]'], installs
    assert _torch_from(installs) == CPU_INDEX
    dry = machine.make("-n", "test").stdout  # its recipe runs the suite, with nothing left to install
    assert "pip install" not in dry and "-m pytest" in dry
    assert "pip install" in machine.make("-n", "app").stdout  # the app's own step is still to run (once)


@pytest.mark.parametrize("sign", ["nvidia-smi", "driver"])
def test_a_machine_with_an_nvidia_driver_gets_pypis_cuda_build(tmp_path, sign):
    machine = Machine(tmp_path, nvidia_smi=sign == "nvidia-smi", driver=sign == "driver")
    done = machine.make("install")
    assert done.returncode == 0, done.stderr
    assert _torch_from(_installs(machine.calls())) == "pypi"
    assert (machine.venv / ".torch-cuda").exists()


def test_torch_can_be_chosen_and_a_change_replaces_it(tmp_path):
    machine = Machine(tmp_path, nvidia_smi=True)
    assert machine.make("install", "TORCH=cpu").returncode == 0
    assert _torch_from(_installs(machine.calls())) == CPU_INDEX  # chosen over the driver
    assert machine.make("install", "TORCH=cpu").returncode == 0
    assert machine.calls() == []  # built: nothing runs again
    done = machine.make("install", "TORCH=cuda")
    assert done.returncode == 0, done.stderr
    calls = machine.calls()
    assert calls[0] == "-m pip uninstall -y -q torch", calls  # the CPU build goes before PyPI's comes
    installs = _installs(calls)
    assert _torch_from(installs) == "pypi" and installs[-1] == "install -c constraints.txt -e ."
    assert sorted(p.name for p in machine.venv.glob(".torch-*")) == [".torch-cuda"]


def test_a_torch_that_cannot_be_installed_says_what_to_do(tmp_path):
    machine = Machine(tmp_path)
    machine.venv.joinpath("bin", "python").write_text("#!/bin/sh\nexit 1\n")
    done = machine.make("install")
    assert done.returncode != 0
    assert f"no torch from PyTorch's CPU wheels ({CPU_INDEX})" in done.stderr and "TORCH=cuda" in done.stderr
    assert not (machine.venv / ".torch-cpu").exists()
    bad = machine.make("install", "TORCH=gpu")
    assert bad.returncode != 0 and "TORCH=gpu: cpu" in bad.stderr and "cuda" in bad.stderr
