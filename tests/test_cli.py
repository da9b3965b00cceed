"""``python -m probes parity``: output, JSON and exit codes (0 pass, 1 mismatch, 2 bad input)."""

import json
import subprocess
import sys

import pytest
from numeric import F64
from processes import killed_after_chunks

from probes import generation, models, parity, scratch
from probes.cli import main
from probes.families import coverage


def run(*args):
    return subprocess.run([sys.executable, "-m", "probes", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.numeric
def test_offline_default_through_the_cli():
    out = run("parity", "--model", "minilm", "--text", "Xiaoming gave the apple to Xiaohong because she was hungry.",
              "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["model"] == "minilm" and data["passed"] is True and data["dtype"] == "float32"
    assert data["tokens"][0] == "[CLS]" and "hungry" in data["tokens"]
    assert data["tolerance"] == parity.tolerances(parity.DTYPES["float32"], len(data["tokens"]))
    assert data["attention_max_abs_diff"] <= data["tolerance"]["attention"]
    assert data["hidden_max_rel_diff"] <= data["tolerance"]["hidden"]
    assert data["logits_max_abs_diff"] is None and data["logits_max_rel_diff"] is None
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


def test_bad_input_exits_2_with_one_line(gpt2_dir, opt_dir, tmp_path, capsys):
    cases = [
        (["--model", "minilm", "--text", "   "], "empty"),
        (["--model", str(gpt2_dir), "--text", "cat " * 200], "at most 64"),
        (["--model", str(tmp_path / "missing"), "--text", "hi"], "no model directory"),
        (["--model", str(opt_dir), "--text", "hi"], coverage()),  # "the from-scratch path covers BERT, …"
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
    from probes.scratch.gpt2 import GPT2

    real_build = scratch.build

    def broken(model):
        net = real_build(model)
        assert isinstance(net, GPT2)
        for block in net.blocks:
            block.act = activations.ACTIVATIONS["relu"]  # GPT-2 uses the tanh GELU
        return net

    monkeypatch.setattr(scratch, "build", broken)
    assert main(["parity", "--model", str(gpt2_dir), "--text", "the cat sat on the mat"]) == 1
    assert capsys.readouterr().out.startswith("FAIL")


@pytest.mark.numeric
def test_backend_flag_reports_the_kernel(capsys):
    assert main(["parity", "--model", "minilm", "--text", "where does she look?", "--backend", "sdpa", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["candidate"] == "scratch/sdpa" and data["backend"].startswith("sdpa:")
    assert 0 < data["attention_max_abs_diff"] <= data["tolerance"]["attention"]


@pytest.mark.numeric
def test_float64_proves_the_offline_default_and_refuses_flash(capsys):
    text = "Xiaoming gave the apple to Xiaohong because she was hungry."
    assert main(["parity", "--model", "minilm", "--text", text, "--backend", "sdpa", "--dtype", "float64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PASS") and "float64: proven the same function" in out
    assert main(["parity", "--model", "minilm", "--text", text, "--dtype", "float64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dtype"] == "float64" and data["attention_max_abs_diff"] <= F64 and data["hidden_max_rel_diff"] <= F64
    assert main(["parity", "--model", "minilm", "--text", text, "--backend", "flash", "--dtype", "float64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fp32, fp16 and bf16 only" in err[0]


# -- generate -------------------------------------------------------------------------------------------

STORY = "Xiaoming gave the apple to Xiaohong because she was"


@pytest.mark.numeric
def test_generate_on_smollm2_proves_both(smollm2, monkeypatch, capsys):
    monkeypatch.setattr(models, "_load", lambda name, allow_local_paths: smollm2)  # loaded once per session
    assert main(["generate", "--model", "smollm2", "--prompt", STORY, "--max-new-tokens", "6", "--head", "2",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    proof = data["proof"]
    assert proof["passed"] and proof["reference"] == "hf"
    assert proof["exact_attention_max_abs_diff"] <= F64 and proof["exact_logits_max_rel_diff"] <= F64
    assert proof["attention_max_abs_diff"] <= generation.FP32_TOLERANCES["attention"]
    assert proof["logits_max_rel_diff"] <= generation.FP32_TOLERANCES["logits"]
    assert data["hf_generate_same_tokens"] is True and data["sampling"] == "greedy"
    assert len(data["steps"]) == len(data["new_ids"]) == 6 and data["layer"] == 29 and data["head"] == 2
    assert data["steps"][0]["query"] == " was"  # step 0 is the prompt's last token
    assert [s["wrote"] for s in data["steps"]] == data["new_tokens"]
    assert data["cache_bytes"] == 2 * 30 * 3 * 64 * (len(data["new_ids"]) - 1 + 13) * 4  # 13 prompt tokens
    assert data["cache_bytes_without_grouped_query"] == data["cache_bytes"] * 3  # 9 query heads, 3 key/value heads


def test_generate_table_and_sampling(gpt2_dir, capsys):
    args = ["generate", "--model", str(gpt2_dir), "--prompt", STORY, "--max-new-tokens", "4", "--no-eos"]
    assert main([*args, "--sample", "--seed", "3", "--top-k", "5", "--temperature", "0.8"]) == 0
    text = capsys.readouterr().out
    assert "sampled (seed 3, temperature 0.8, top-k 5)" in text and "proof: PASS" in text
    assert "Hugging Face generate" not in text  # only greedy has one sequence to compare with
    assert main(args) == 0
    assert "Hugging Face generate: the same tokens" in capsys.readouterr().out


def test_generate_bad_input_exits_2_with_one_line(gpt2_dir, capsys):
    cases = [
        (["--model", "minilm", "--prompt", "she was"], "encoder"),
        (["--model", str(gpt2_dir), "--prompt", "  "], "prompt is empty"),
        (["--model", str(gpt2_dir), "--prompt", "cat " * 200], "at most 64"),
        (["--model", str(gpt2_dir), "--prompt", STORY, "--max-new-tokens", "100"], "ask for at most"),
        (["--model", str(gpt2_dir), "--prompt", STORY, "--head", "9"], "--head 9 is outside"),
        (["--model", str(gpt2_dir), "--prompt", STORY, "--sample", "--temperature", "0"], "temperature"),
    ]
    for args, says in cases:
        code: str | int | None
        try:
            code = main(["generate", *args])
        except SystemExit as stop:  # argparse refuses a bad number (--temperature 0): the same one line, exit 2
            code = stop.code
        assert code == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (args, err)


def test_generate_wrong_cache_exits_1(gpt2_dir, monkeypatch, capsys):
    from probes.scratch import generate as g

    honest = g.KVCache.append

    def shifted(self, layer, k, v):  # values shifted by one position
        keys, values, positions = honest(self, layer, k, v)
        return keys, values.roll(1, dims=2), positions

    monkeypatch.setattr(g.KVCache, "append", shifted)
    assert main(["generate", "--model", str(gpt2_dir), "--prompt", STORY, "--max-new-tokens", "4", "--no-eos"]) == 1
    assert "proof: FAIL" in capsys.readouterr().out


def test_ctrl_c_is_one_line_and_exit_130(gpt2_dir, monkeypatch, capsys, tmp_path):
    from probes.heads import profile as prof

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prof, "run_chunk", interrupt)
    assert main(["profile", "--probe", "positional", "--limit", "4", "--out", str(tmp_path / "p.csv")]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted: rerun the same command to resume"
    monkeypatch.setattr(scratch, "build", interrupt)
    assert main(["parity", "--model", str(gpt2_dir), "--text", "hi"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted: rerun the same command"


@pytest.mark.numeric
@pytest.mark.bitwise  # one process on one thread against Ray workers of one CPU: the same sums in the same order
@pytest.mark.xdist_group("ray")  # one local Ray at a time: the worker that runs tests/corpus/test_ray_pool.py
def test_a_corpus_profiles_end_to_end_on_a_local_ray_as_on_one_process(gpt2_dir, tmp_path, capsys):
    import pandas as pd
    import torch

    corpus = tmp_path / "c.jsonl"
    lines = [json.dumps({"text": f"Sentence {i}: Xiaoming gave the apple to Xiaohong because she was hungry."})
             for i in range(10)]
    corpus.write_text("\n".join(lines[:3] + ["{broken"] + lines[3:]) + "\n")
    models = f"minilm,{gpt2_dir}"
    threads = torch.get_num_threads()
    try:  # one process: this one (the command line's own entry point, without a second interpreter to start)
        assert main(["profile", "--corpus", str(corpus), "--model", models, "--out", str(tmp_path / "one.csv"),
                     "--window", "16", "--checkpoint-every", "3", "--threads", "1"]) == 0, capsys.readouterr().err
    finally:
        torch.set_num_threads(threads)  # the command chose its own: the rest of the session keeps the suite's
    capsys.readouterr()
    assert main(["profile", "--corpus", str(corpus), "--model", models, "--out", str(tmp_path / "ray.csv"),
                 "--window", "16", "--checkpoint-every", "3", "--local-ray", "--workers", "2"]) == 0  # a Ray of its own
    on_ray = capsys.readouterr()
    assert "running on a local Ray: 2 worker(s), 1 CPU(s) each" in on_ray.err
    assert "c.jsonl line 4: not JSON" in on_ray.err and "4/4" in on_ray.err  # 10 texts in chunks of 3
    a, b = (pd.read_csv(tmp_path / f"{n}.csv").set_index(["model", "label", "layer", "head"]).sort_index()
            for n in ("one", "ray"))
    assert a.index.equals(b.index) and set(a.index.get_level_values("model")) == {"minilm", str(gpt2_dir)}
    # the same chunks on another process, on one thread as there: the same sums in the same order, bit for bit
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    found = pd.read_parquet(tmp_path / "ray.examples.parquet")
    assert set(found["model"]) == {"minilm", str(gpt2_dir)} and found["text_id"].between(1, 11).all()
    assert "minilm" in on_ray.out and "entropy" in on_ray.out  # the best heads, per model and label
    import ray

    assert not ray.is_initialized()  # the command stopped the Ray it started


def test_corpus_bad_input_exits_2_with_one_line(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("one text\n")
    out = str(tmp_path / "t.csv")
    cases = [
        (["--corpus", str(corpus), "--probe", "positional"], "leave out --probe"),
        (["--corpus", str(tmp_path / "missing.txt")], "no such file"),
        (["--corpus", str(corpus), "--examples", str(tmp_path / "x.csv")], "written as .parquet"),
        (["--corpus", str(corpus), "--model", "minilm,minilm"], "named twice"),
        (["--corpus", str(corpus), "--window", "2"], "leaves no room"),
        (["--probe", "positional", "--ray", "ray://127.0.0.1:1"], "Ray Data does not run through Ray Client"),
        (["--probe", "positional", "--ray", "127.0.0.1"], "give the Ray head's address as HOST:PORT"),
        (["--probe", "positional", "--model", "minilm,smollm2"], "several models in one run go with --corpus"),
        ([], "say what to score"),
    ]
    for args, message in cases:
        assert main(["profile", "--out", out, *args]) == 2, args
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (args, err)


@pytest.mark.numeric
def test_a_killed_corpus_run_resumes_from_its_checkpoint(tmp_path, capsys):
    import pandas as pd
    import torch

    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"Text {i}: Xiaoming gave the apple to Xiaohong because she was hungry.\n"
                              for i in range(40)))
    args = [sys.executable, "-m", "probes", "profile", "--corpus", str(corpus), "--window", "24",
            "--checkpoint-every", "1", "--threads", "1"]
    out = tmp_path / "t.csv"
    done = killed_after_chunks([*args, "--out", str(out)], out, 3, timeout=600)
    assert 3 <= done < 40 and not out.exists()
    threads = torch.get_num_threads()
    try:  # the rerun and a fresh run through the command line's entry point, in this process (one thread too)
        assert main([*args[3:], "--out", str(out)]) == 0
        resumed = capsys.readouterr().err
        assert f"resuming from {tmp_path / 't.csv.partial'}" in resumed
        assert f"{done} of 40 chunks done already" in resumed
        assert main([*args[3:], "--out", str(tmp_path / "fresh.csv")]) == 0
    finally:
        torch.set_num_threads(threads)
    a, b = (pd.read_csv(p).sort_values(["label", "layer", "head"]) for p in (out, tmp_path / "fresh.csv"))
    # the same chunks, on one thread each time, read back from CSV (which keeps every digit): the same numbers
    assert (a["score"].to_numpy() == b["score"].to_numpy()).all()


@pytest.mark.numeric
def test_a_resumed_profile_is_not_fooled_by_weights_changed_in_the_same_folder(tmp_path, monkeypatch, capsys):
    """A training run saving into one folder changes weights that a sampled fingerprint never read: the rerun
    must start afresh, not combine chunks of the old weights with chunks of the new ones."""
    import pandas as pd
    import torch
    from checkpoints import CORPUS, make_gpt2
    from safetensors.torch import load_file, save_file

    from probes.heads import profile as prof

    folder = make_gpt2(tmp_path / "run")
    data = tmp_path / "d.txt"
    data.write_text("\n".join(CORPUS[:4]) + "\n")
    out = tmp_path / "p.csv"
    args = ["profile", "--model", str(folder), "--probe", "positional", "--data", str(data),
            "--checkpoint-every", "1", "--threads", "1"]
    real, calls = prof.run_chunk, []

    def interrupted(*a, **k):  # two chunks written, then Ctrl-C
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    threads = torch.get_num_threads()
    try:
        monkeypatch.setattr(prof, "run_chunk", interrupted)
        assert main([*args, "--out", str(out)]) == 130
        assert len(list(tmp_path.glob("p.csv.partial/*/chunk-*.csv"))) == 2
        monkeypatch.setattr(prof, "run_chunk", real)
        # the next save of the training run: every value of layer 0's attention weights changes except those the
        # old fingerprint sampled (every numel // 64-th of the first 64, and the last 8)
        weights = load_file(folder / "model.safetensors")
        key = "transformer.h.0.attn.c_attn.weight"
        flat = weights[key].reshape(-1).clone()
        keep = torch.zeros(flat.numel(), dtype=torch.bool)
        keep[::max(1, flat.numel() // 64)][:64] = True
        keep[-8:] = True
        flat[~keep] *= 3
        weights[key] = flat.reshape(weights[key].shape)
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
        capsys.readouterr()
        assert main([*args, "--out", str(out)]) == 0
        err = capsys.readouterr().err
        assert "computed from another model: starting afresh" in err, err
        assert main([*args, "--out", str(tmp_path / "fresh.csv")]) == 0
    finally:
        torch.set_num_threads(threads)
    a, b = (pd.read_csv(p).sort_values(["label", "layer", "head"]) for p in (out, tmp_path / "fresh.csv"))
    # the same chunks of the same weights on one thread, read back from CSV (which keeps every digit)
    assert (a["score"].to_numpy() == b["score"].to_numpy()).all()
