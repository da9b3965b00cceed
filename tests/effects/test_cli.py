"""``python -m probes ablate`` and ``importance``: the library's numbers, one-line errors (exit 2), resume."""

import json

import pandas as pd
import pytest
from numeric import F64

from probes.cli import main
from probes.effects import ablation, importance
from tests.effects.conftest import ALTERNATING

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry"


@pytest.mark.numeric
def test_ablate_prints_the_library_numbers(minilm, capsys):
    assert main(["ablate", "--text", SHE, "--heads", "1.2,5.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = ablation.ablate(minilm, SHE, [(1, 2), (5, 5)])
    # the same computation on the same weights: the same floats, and JSON writes a float back exactly
    assert data["heads"] == "1.2, 5.5" and data["effects"] == expected
    assert main(["ablate", "--text", SHE, "--heads", "5.5"]) == 0
    assert "token_change" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--heads", "6.0"], "outside minilm"),
    (["--heads", "1.2", "--target", "she", "--versus", "he"], "no logits for --target"),
    (["--heads", "1.2", "--how", "patch"], "give it with --other"),
    (["--heads", "1.2", "--other", "x"], "goes with --how patch"),
    (["--heads", "1-2"], "LAYER.HEAD"),
])
def test_ablate_bad_input_is_one_line_and_exit_2(args, message, capsys):
    try:
        code = main(["ablate", "--text", SHE, *args])
    except SystemExit as stop:  # argparse refuses a malformed head list (1-2) before the model loads: exit 2 too
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("error: ")


def test_patching_needs_texts_of_one_length(gpt2_dir, capsys):
    assert main(["ablate", "--model", str(gpt2_dir), "--text", "the head the head", "--heads", "0.1", "--how",
                 "patch", "--other", "the head"]) == 2
    assert "same length in tokens" in capsys.readouterr().err


@pytest.mark.numeric
def test_importance_writes_the_table_and_resumes(copy_model64, tmp_path, monkeypatch, capsys):
    copy_model = copy_model64  # float64: the resumed chunks batch the texts otherwise than one go, which sums in
    # another order (fp32: 4e-8 apart on some CPUs); in float64 that is rounding under F64
    data = tmp_path / "texts.txt"
    data.write_text("\n".join([ALTERNATING, "he the he the he the", "the head the head", "head the head"]) + "\n")
    out = tmp_path / "imp.csv"
    calls = []
    real = importance.importance_sums

    def interrupted(model, texts, *a, **k):
        calls.append(len(texts))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(model, texts, *a, **k)

    monkeypatch.setattr(importance, "importance_sums", interrupted)
    with pytest.raises(KeyboardInterrupt):
        importance.profile_importance(copy_model, str(data), None, out, checkpoint_every=2)
    assert not out.exists() and len(list((tmp_path / "imp.csv.partial").rglob("chunk-*.csv"))) == 1
    calls.clear()
    frame = importance.profile_importance(copy_model, str(data), None, out, checkpoint_every=2)
    assert calls == [2]  # only the second chunk ran again
    monkeypatch.setattr(importance, "importance_sums", real)
    fresh = importance.importance(copy_model, [ALTERNATING, "he the he the he the", "the head the head",
                                               "head the head"])
    assert frame["score"].to_numpy() == pytest.approx(fresh["score"].to_numpy(), abs=F64, rel=0)
    written = pd.read_csv(out)
    assert {"model", "n_layers", "n_heads", "probe"} <= set(written.columns) and (written.probe == "importance").all()
    assert not (tmp_path / "imp.csv.partial").exists()


def test_importance_cli(tmp_path, capsys):
    data = tmp_path / "texts.txt"
    data.write_text("The cat sat on the mat.\nShe said that he would come back.\n")
    out = tmp_path / "imp.csv"
    assert main(["importance", "--data", str(data), "--out", str(out), "--no-ablation"]) == 0
    frame = pd.read_csv(out)
    assert set(frame.label) == {"gradient: hidden"} and len(frame) == 72 and (frame.n == 2).all()
    assert main(["importance", "--data", str(data), "--out", str(out)]) == 2  # exists: --force
    assert "--force" in capsys.readouterr().err


STORY = "Xiaoming gave the apple to Xiaohong because she was hungry."


@pytest.mark.numeric
def test_why_prints_the_top_terms_and_that_they_sum_to_the_score(minilm, capsys, tmp_path):
    from probes.effects.qk import qk_attribution

    args = ["why", "--model", "minilm", "--layer", "1", "--head", "2", "--query", "she", "--key", "Xiaohong",
            "--text", STORY]
    assert main(args) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("minilm, head 1.2: query 'she' (token 10) on key 'xiao' (token 7): score 2.6")
    assert sum(line.lstrip().startswith(tuple(f"{i}." for i in range(1, 11))) for line in lines) == 10
    assert lines[-1].startswith("sum of parts = score (|Δ| ")
    assert "'##hong' (8); the first is used" in captured.err  # a word of two pieces: said, not guessed silently
    assert main([*args, "--json", "--csv", str(tmp_path / "terms.csv")]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = qk_attribution(minilm, STORY, 1, 2, 10, 7)
    # the same computation on the same weights: the same floats, and JSON writes a float back exactly
    assert data["score"] == expected.score and data["sum_of_parts"] == expected.total
    assert [row["contribution"] for row in data["top"]] == list(expected.top(10).contribution)
    table = pd.read_csv(tmp_path / "terms.csv")
    assert len(table) == len(expected.frame())
    assert table.contribution.sum() == pytest.approx(expected.total, abs=1e-9 * expected.bound, rel=0)


def test_why_on_smollm2(smollm2, monkeypatch, capsys):
    from probes import models

    monkeypatch.setattr(models, "_load", lambda name, allow_local_paths: smollm2)  # loaded once per session
    assert main(["why", "--model", "smollm2", "--layer", "18", "--head", "6", "--query", "she", "--key", "Xiaohong",
                 "--text", STORY]) == 0
    out = capsys.readouterr().out
    assert "query ' she' (token 11) on key ' Xia' (token 7)" in out and "head 17." in out and out.splitlines()[-1].startswith("sum of parts")


@pytest.mark.parametrize("args, message", [
    (["--query", "he", "--key", "apple"], "--query 'he' is not a word of the text"),
    (["--query", "she", "--key", "hungry", "--model", "GPT2"], None),
    (["--query", "she", "--key", "40"], "key token 40 is outside the text's 15 tokens"),
    (["--query", "she", "--key", "Xiaohong", "--head", "12"], "head 12 does not exist"),
])
def test_why_bad_input_is_one_line_and_exit_2(args, message, gpt2_dir, capsys):
    if message is None:  # a causal model's query cannot see a later key
        args = [*args[:-2], "--model", str(gpt2_dir)]
        message = "after the query: a causal model"
    base = ["why", "--layer", "1", "--head", "2", "--text", STORY]
    if "--head" in args:
        base = ["why", "--layer", "1", "--text", STORY]
    assert main([*base, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("error: ")
