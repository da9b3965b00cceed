"""The files Streamlit Community Cloud reads: CPU torch at the version every other install pins, the
project itself, and the app's config."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines() if line.split("#")[0].strip()]


def test_cloud_requirements_pin_the_cpu_build_of_the_pinned_torch():
    pinned = [line for line in _lines(ROOT / "constraints.txt") if line.startswith("torch==")]
    version = pinned[0].removeprefix("torch==")
    cloud = _lines(ROOT / "requirements.txt")
    assert f"torch=={version}+cpu" in cloud
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in cloud
    assert cloud.index("--extra-index-url https://download.pytorch.org/whl/cpu") < cloud.index(f"torch=={version}+cpu")
    assert "." in cloud  # the project, with the dependencies pyproject.toml lists
    assert not [line for line in cloud if re.match(r"torch\b(?!==)", line)]  # no second, open torch line


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
