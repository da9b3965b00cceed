"""The suite's own contract with pytest-xdist: ``make test`` runs on two workers with ``--dist loadgroup``, and the
tests marked ``xdist_group("ray")`` (one local Ray at a time) or ``xdist_group("browser")`` (one app server and
Chromium at a time) must all run on one worker, one after the other. pytest 9.2 with pytest-xdist 3.8 drops the groups
without a word (pytest-dev/pytest-xdist#1386): the Ray tests then ran on both workers at once and every module's
cluster started once a worker. This runs a small suite the way ``make test`` does and checks where each test ran."""

import os
import re
import subprocess
import sys

GROUPED = '''
import pytest

pytestmark = pytest.mark.xdist_group("ray")


@pytest.mark.parametrize("i", range(4))
def test_grouped(i):
    pass
'''

FREE = '''
import pytest


@pytest.mark.parametrize("i", range(4))
def test_free(i):
    pass
'''


def test_tests_of_one_xdist_group_run_on_one_worker_as_make_test_runs_them(tmp_path):
    (tmp_path / "test_a.py").write_text(GROUPED)
    (tmp_path / "test_b.py").write_text(GROUPED)
    (tmp_path / "test_c.py").write_text(FREE)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTEST_", "XDIST_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"\[(gw\d)\] .*PASSED \S*(test_[abc])\.py::(\w+)\[(\d)\]", done.stdout)
    assert len(ran) == 12, done.stdout
    grouped = {worker for worker, module, _, _ in ran if module in ("test_a", "test_b")}
    assert len(grouped) == 1, f"the group ran on {sorted(grouped)}: pytest-xdist's loadgroup does not group with " \
                              f"this pytest (pin pytest as pyproject.toml does)\n{done.stdout}"
