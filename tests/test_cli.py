"""``python -m probes parity``: output, JSON and exit codes (0 pass, 1 mismatch, 2 bad input)."""

import json
import subprocess
import sys

from probes import scratch
from probes.__main__ import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "probes", *args], capture_output=True, text=True, timeout=300)


def test_offline_default_through_the_cli():
    out = run("parity", "--model", "minilm", "--text", "Xiaoming gave the apple to Xiaohong because she was hungry.",
              "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model"] == "minilm" and data["passed"] is True
    assert data["tokens"][0] == "[CLS]" and "hungry" in data["tokens"]
    assert data["tolerance"] == {"attention": 1e-5, "hidden": 1e-4, "logits": 1e-4}
    assert data["attention_max_abs_diff"] <= 1e-5 and data["hidden_max_abs_diff"] <= 1e-4
    assert data["logits_max_abs_diff"] is None
    assert [lp["layer"] for lp in data["per_layer"]] == list(range(6))
    assert all(len(lp["per_head"]) == 12 for lp in data["per_layer"])


def test_gpt2_table_and_chinese(gpt2_dir):
    out = run("parity", "--model", str(gpt2_dir), "--text", "小明把苹果给了小红 because she was hungry")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("PASS") and "logits" in out.stdout


def test_pair_through_the_cli(bert_dir, capsys):
    assert main(["parity", "--model", str(bert_dir), "--text", "first one", "--pair", "second one", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["tokens"].count("[SEP]") == 2


def test_bad_input_exits_2_with_one_line(gpt2_dir, neox_dir, tmp_path, capsys):
    cases = [
        (["--model", "minilm", "--text", "   "], "empty"),
        (["--model", str(gpt2_dir), "--text", "cat " * 200], "at most 64"),
        (["--model", str(tmp_path / "missing"), "--text", "hi"], "no model directory"),
        (["--model", str(neox_dir), "--text", "hi"], "covers BERT, GPT-2, Llama, Mistral and Qwen2"),
        (["--model", str(gpt2_dir), "--text", "hi", "--pair", "there"], "no sentence pairs"),
        (["--model", str(gpt2_dir), "--text", "hi", "--hub-only"], "loads only hub ids"),
    ]
    for args, says in cases:
        assert main(["parity", *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (args, err)


def test_truncate_flag(gpt2_dir, capsys):
    assert main(["parity", "--model", str(gpt2_dir), "--text", "cat " * 200, "--truncate", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tokens"]) == 64


def test_mismatch_exits_1(gpt2_model, gpt2_dir, monkeypatch, capsys):
    from probes.scratch import activations

    real_build = scratch.build

    def broken(model):
        net = real_build(model)
        for block in net.blocks:
            block.act = activations.ACTIVATIONS["relu"]  # GPT-2 uses the tanh GELU
        return net

    monkeypatch.setattr(scratch, "build", broken)
    assert main(["parity", "--model", str(gpt2_dir), "--text", "the cat sat on the mat"]) == 1
    assert capsys.readouterr().out.startswith("FAIL")


def test_backend_flag_reports_the_kernel(capsys):
    assert main(["parity", "--model", "minilm", "--text", "where does she look?", "--backend", "sdpa", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["candidate"] == "scratch/sdpa" and data["backend"].startswith("sdpa:")
    assert 0 < data["attention_max_abs_diff"] <= 1e-5
