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
    assert main(["ablate", "--text", SHE, *args]) == 2
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
