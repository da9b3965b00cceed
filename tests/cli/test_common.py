"""Every analysis command takes --ray [ADDRESS] (probes.cli.common.served_option): the model a server on that Ray
cluster holds, with the command's work run there, prints what the same command prints on a model loaded here."""

import json

import pytest

from probes import cluster, remote
from probes.cli import main

# the server's floats against this process's, printed: both on one thread (the server's torch threads are its
# cpus, 1; the suite's OMP_NUM_THREADS=1 and PROBES_THREADS=1 here), so every digit is the same
pytestmark = [pytest.mark.numeric, pytest.mark.bitwise, pytest.mark.xdist_group("ray")]

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry"
STORY = "the cat sat on the mat and the dog sat on the log"


@pytest.fixture(scope="module")
def served(gpt2_dir):
    started = cluster.start(None, cpus=2)
    address = cluster.joined()
    names = ["minilm", str(gpt2_dir)]
    for name in names:
        remote.serve(name, address, detached=True)
    yield address
    for name in names:
        remote.stop(name, address)
    if started:
        cluster.shutdown()


def _both(capsys, monkeypatch, args, address):
    monkeypatch.setenv("PROBES_THREADS", "1")
    here = main(args)
    got_here = capsys.readouterr()
    there = main([*args, "--ray", address])
    got_there = capsys.readouterr()
    assert here == there, (args, got_here.err, got_there.err)
    return got_here.out, got_there.out


@pytest.mark.parametrize("command", [
    ["parity", "--model", "minilm", "--text", SHE, "--json"],
    ["parity", "--model", "minilm", "--text", SHE, "--dtype", "float64", "--json"],
    ["why", "--model", "minilm", "--layer", "1", "--head", "2", "--query", "she", "--key", "Xiaohong", "--text", SHE],
    ["ablate", "--model", "minilm", "--text", SHE, "--heads", "1.2,5.5", "--json"],
    ["claim", "--model", "minilm", "--text", SHE, "--query", "she", "--key", "Xiaohong", "--against", "Xiaoming",
     "--json"],
])
def test_a_command_on_a_served_minilm_prints_what_it_prints_here(command, served, capsys, monkeypatch):
    here, there = _both(capsys, monkeypatch, command, served)
    assert here and here == there
    if "--json" in command:
        json.loads(there)  # one object, as here


@pytest.mark.parametrize("command", [
    ["compose", "--receiver", "1.0", "--top", "2"],
    ["path-patch", "--text", STORY, "--corrupt", STORY.replace("cat", "dog"), "--receiver", "1.0", "--top", "2"],
    ["generate", "--prompt", STORY, "--max-new-tokens", "3"],
])
def test_a_command_on_a_served_decoder_prints_what_it_prints_here(command, served, gpt2_dir, capsys, monkeypatch):
    here, there = _both(capsys, monkeypatch, [command[0], "--model", str(gpt2_dir), *command[1:]], served)
    assert here and here == there


def test_kv_on_a_served_decoder_gives_the_same_numbers(served, gpt2_dir, capsys, monkeypatch):
    """kv's readers (stream, head_effects) run on the server; only the seconds differ."""
    command = ["kv", "--model", str(gpt2_dir), "--text", STORY, "--policies", "full,window:4,h2o:4", "--per-head",
               "--json"]
    here, there = _both(capsys, monkeypatch, command, served)
    here, there = json.loads(here), json.loads(there)
    for data in (here, there):
        for policy in data["policies"]:
            assert policy.pop("seconds") > 0
    assert here == there and len(here["policies"][1]["per_head"]) == 2 * 4  # the tiny GPT-2: 2 layers × 4 heads


def test_kv_on_a_served_encoder_is_one_line(served, capsys):
    assert main(["kv", "--model", "minilm", "--text", STORY, "--ray", served]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "minilm is an encoder: it reads the whole text at once and keeps no KV cache" in err[0]


def test_importance_on_a_served_model_writes_the_same_table(served, tmp_path, capsys, monkeypatch):
    data = tmp_path / "texts.txt"
    data.write_text("The cat sat on the mat.\nShe said that he would come back.\n")
    monkeypatch.setenv("PROBES_THREADS", "1")
    assert main(["importance", "--data", str(data), "--out", str(tmp_path / "here.csv"), "--no-ablation"]) == 0
    assert main(["importance", "--data", str(data), "--out", str(tmp_path / "there.csv"), "--no-ablation",
                 "--ray", served]) == 0
    capsys.readouterr()
    assert (tmp_path / "here.csv").read_text() == (tmp_path / "there.csv").read_text()


def test_a_model_nobody_serves_is_one_line(served, capsys):
    assert main(["parity", "--model", "gpt2", "--text", SHE, "--ray", served]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no server on the Ray cluster" in err[0] and "probes serve --model gpt2" in err[0]
