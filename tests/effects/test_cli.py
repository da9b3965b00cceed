"""``python -m probes ablate`` and ``importance``: the library's numbers, one-line errors (exit 2), resume."""

import json

import pandas as pd
import pytest
from effects.planted import ALTERNATING
from numeric import F64

from probes.cli import main
from probes.effects import ablation, importance
from probes.explain import why as words

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
    code: str | int | None
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
    from probes.effects.why import qk_attribution

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
    # position against content: minilm's positions are a part (the position embedding), not rotary bands
    content, position = expected.position_split()
    assert (data["positions"], data["bands"], data["band_groups"]) == ("absolute", None, None)
    assert (data["content"], data["position"], data["offset"]) == (content, position, 3)
    assert data["reading"] == words.reading(expected) and data["reading"].startswith("position (the position embedding")
    assert data["grid_caption"] == words.grid_caption(expected, 3) and len(data["grid"]) == len(expected.grid(3))
    assert lines[1] == f"reading: {words.reading(expected)}"
    assert any(line.startswith("in buckets: The cells of one named part") for line in lines)


def test_why_on_a_negative_score_says_pushes_and_writes_no_share(minilm, capsys, tmp_path):
    # "she" on "##ming": a score of -2.03; a share of it would flip every term's sign
    args = ["why", "--model", "minilm", "--layer", "1", "--head", "2", "--query", "she", "--key", "2", "--text", STORY]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "score -2.027" in out.splitlines()[0] and "%" not in out
    first = next(line for line in out.splitlines() if line.lstrip().startswith("1. "))
    assert first.split() == ["1.", "query:", "position", "embedding", "×", "key:", "position", "embedding", "+1.8796",
                             "raises", "the", "score", "(score", "-2.03)"]
    assert main([*args, "--json", "--csv", str(tmp_path / "terms.csv")]) == 0
    data = _no_nan(capsys.readouterr().out)  # strict JSON: a share that is not there is null, not NaN
    assert all(row["share"] is None for row in data["top"])
    assert pd.read_csv(tmp_path / "terms.csv").share.isna().all()


def test_why_on_smollm2(smollm2, monkeypatch, capsys):
    from probes import models

    monkeypatch.setattr(models, "_load", lambda name, allow_local_paths: smollm2)  # loaded once per session
    assert main(["why", "--model", "smollm2", "--layer", "18", "--head", "6", "--query", "she", "--key", "Xiaohong",
                 "--text", STORY]) == 0
    out = capsys.readouterr().out
    assert "query ' she' (token 11) on key ' Xia' (token 7)" in out and "head 17." in out
    assert out.splitlines()[-1].startswith("sum of parts")


TALKS = "The president called for new talks with Iran."


@pytest.mark.numeric
def test_why_on_a_rotary_head_reads_its_bands(smollm2, monkeypatch, capsys, tmp_path):
    from probes import models
    from probes.effects.why import qk_attribution

    monkeypatch.setattr(models, "_load", lambda name, allow_local_paths: smollm2)  # loaded once per session
    args = ["why", "--model", "smollm2", "--layer", "16", "--head", "0", "--query", "talks", "--key", "new",
            "--text", TALKS]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("reading: position (the turn by the offset, 1 token back): raises the score by ")
    assert lines[2].startswith("by rotary frequency band (32 bands;")
    assert lines[3].startswith("  high-frequency band 0 (local position), wavelength 6.28 tokens: ")
    assert main([*args, "--json", "--bands-csv", str(tmp_path / "bands.csv")]) == 0
    data = _no_nan(capsys.readouterr().out)  # strict JSON (an unturned band's wavelength would be null, not inf)
    expected = qk_attribution(smollm2, TALKS, 16, 0, 5, 4)
    assert data["positions"] == "rotary" and data["reading"] == words.reading(expected) and data["offset"] == 1
    assert [row["contribution"] for row in data["bands"]] == list(expected.band_table().contribution)
    assert [row["label"] for row in data["band_groups"]] == list(words.labelled_band_groups(expected).label)
    assert data["content"] + data["position"] == pytest.approx(data["score"], abs=F64 * data["bound"], rel=0)
    table = pd.read_csv(tmp_path / "bands.csv")
    assert list(table.columns) == ["band", "frequency", "wavelength", "contribution", "content", "position", "share",
                                   "group", "label"]
    assert table.contribution.sum() == pytest.approx(expected.score, abs=F64 * expected.bound, rel=0)
    assert table.label[0] == "high-frequency band 0 (local position)"


@pytest.mark.parametrize("args, message", [
    (["--query", "he", "--key", "apple"], "--query 'he' is not a word of the text"),
    (["--query", "she", "--key", "hungry", "--model", "GPT2"], None),
    (["--query", "she", "--key", "40"], "key token 40 is outside the text's 15 tokens"),
    (["--query", "she", "--key", "Xiaohong", "--head", "12"], "head 12 is outside minilm: heads 0–11"),
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


# -- noise floors (probes.evidence.edges): compose and patch set every edge beside its floor -----------------------

def _no_nan(text: str) -> dict:
    def refuse(constant):
        raise AssertionError(f"{constant} in the JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def induction(tmp_path_factory):
    from checkpoints import make_induction

    import probes

    path, text = make_induction(tmp_path_factory.mktemp("induction-cli") / "gpt2")
    model = probes.load(str(path))
    ids = model.encode(text).input_ids[0].tolist()
    return model, text, model.tokenizer.decode(ids[1:6] + ids[:1] + ids[6:])  # the first six tokens rotated by one


@pytest.mark.numeric
def test_compose_sets_each_edge_beside_its_floor(induction, capsys):
    from probes.effects.compose import composition_scores
    from probes.evidence.edges import COMPOSITION_RULE, composition_floors

    model, _text, _corrupt = induction
    args = ["compose", "--model", str(model.location), "--receiver", "1.0"]
    assert main([*args, "--json"]) == 0
    got = _no_nan(capsys.readouterr().out)
    frame = composition_floors(composition_scores(model, receivers=[(1, 0)]))
    k = frame[frame.kind == "k"].set_index(["sender_layer", "sender_head"])
    assert got["rule"] == COMPOSITION_RULE and got["kinds"]["k"]["above_floor"] == 1
    assert got["kinds"]["q"]["above_floor"] == 0 and got["kinds"]["k"]["senders"] == 2
    top = got["kinds"]["k"]["top"]
    assert [(r["sender"], r["above_floor"]) for r in top] == [("0.0", True), ("0.1", False)]
    assert [(r["floor"], r["z"]) for r in top] == [(k.loc[(0, 0)].floor, k.loc[(0, 0)].z), (k.loc[(0, 1)].floor,
                                                                                            k.loc[(0, 1)].z)]
    assert got["kinds"]["k"]["random_low"] == k.random_low.iloc[0] and got["kinds"]["k"]["floor"] == k.floor.iloc[0]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"head 0.0    {k.loc[(0, 0)].score:.4f}  floor {k.loc[(0, 0)].floor:.4f}  above the floor" in out
    assert "head 0.1" in out and "below the floor" in out
    assert "1 of 2 senders clear the floor" in out and "0 of 2 senders clear the floor" in out
    assert f"rule: {COMPOSITION_RULE}" in out


@pytest.mark.numeric
def test_compose_names_its_convention(gpt2_dir, llama_dir, bert_dir, capsys):
    import probes
    from probes.effects.compose import composition_scores

    args = ["compose", "--model", str(gpt2_dir), "--receiver", "1.0", "--kind", "v", "--top", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("convention: raw (LayerNorm's centring left out); --convention transformerlens folds it in as "
            "TransformerLens's defaults do") in out
    assert main([*args, "--json"]) == 0
    assert _no_nan(capsys.readouterr().out)["convention"] == "raw"
    assert main([*args, "--json", "--convention", "transformerlens"]) == 0
    got = _no_nan(capsys.readouterr().out)
    assert got["convention"] == "transformerlens" and "centring folded in" in got["convention_about"]
    assert "--convention raw leaves it out" in got["convention_about"] and "centring too" in got["notes"][0]
    folded = composition_scores(probes.load(str(gpt2_dir)), "v", receivers=[(1, 0)], convention="transformerlens")
    top = folded.sort_values("score", ascending=False).iloc[0]
    assert got["kinds"]["v"]["top"][0]["sender"] == f"{top.sender_layer}.{top.sender_head}"
    assert abs(got["kinds"]["v"]["top"][0]["score"] - top.score) <= F64
    assert main([*args, "--convention", "transformerlens"]) == 0
    assert "convention: transformerlens (LayerNorm's centring folded in" in capsys.readouterr().out
    assert main(["compose", "--model", str(llama_dir), "--receiver", "1.0", "--top", "1"]) == 0
    assert "the raw and transformerlens conventions give the same numbers here" in capsys.readouterr().out
    assert main(["compose", "--model", str(bert_dir), "--receiver", "1.0", "--convention", "transformerlens"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "post-norm" in err and "use the raw convention" in err
    with pytest.raises(SystemExit) as stop:
        main([*args, "--convention", "tl"])
    assert stop.value.code == 2 and "invalid choice: 'tl'" in capsys.readouterr().err


@pytest.mark.numeric
def test_patch_sets_each_sender_beside_its_floor(induction, capsys):
    from probes.evidence.edges import patch_floors

    model, text, corrupt = induction
    args = ["patch", "--model", str(model.location), "--text", text, "--corrupt", corrupt, "--receiver", "1.0"]
    assert main([*args, "--json", "--top", "1"]) == 0
    got = _no_nan(capsys.readouterr().out)  # the sender not checked has no floor: null, not NaN
    expected = patch_floors(model, text, corrupt, (1, 0), "k", top=1).frame.set_index(["layer", "head"])
    assert got["nulls"] == 8 and got["null_seed"] == 0 and got["checked"] == 1 and got["ranked_by"] == "loss"
    assert "89th percentile" in got["floor_rule"]
    for row in got["senders"]:
        want = expected.loc[(row["layer"], row["head"])]
        assert row["checked"] == bool(want.checked)
        assert row["pattern_shift_floor"] == (float(want.pattern_shift_floor) if want.checked else None)
        assert row["pattern_shift_above"] == bool(want.pattern_shift_above)
    assert main([*args, "--json", "--nulls", "3", "--null-seed", "5"]) == 0
    got = _no_nan(capsys.readouterr().out)
    expected = patch_floors(model, text, corrupt, (1, 0), "k", count=3, seed=5).frame.set_index(["layer", "head"])
    assert got["nulls"] == 3 and got["null_seed"] == 5 and got["checked"] == 2
    assert {(r["layer"], r["head"]): r["loss_floor"] for r in got["senders"]} == expected.loss_floor.to_dict()
    assert main(args) == 0
    out = capsys.readouterr().out
    # head 1.0 reads no value: the loss (the ranking measure) cannot move, so no sender clears its floor on it
    assert "floor (loss)" in out and "no sender's effect is above what a change elsewhere in the text does" in out
    assert "rule: an effect is above its noise floor" in out


@pytest.mark.numeric
def test_patch_names_the_senders_above_their_floor(minilm, capsys):
    from probes.evidence.edges import patch_floors

    clean, corrupt = "the cat sat on the mat", "the dog sat on the mat"
    assert main(["path-patch", "--text", clean, "--corrupt", corrupt, "--receiver", "3.1", "--into", "k"]) == 0
    out = capsys.readouterr().out
    above = patch_floors(minilm, clean, corrupt, (3, 1), "k").above
    assert len(above)  # on minilm: 2.7, 0.6 and 0.7
    names = ", ".join(f"{a}.{b}" for a, b in zip(above["layer"], above["head"], strict=True))
    assert f"{len(above)} of the 10 senders checked clear their noise floor: {names}" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("    ")]
    assert len(rows) == 10 and sum(r[-1] == "yes" for r in rows) == len(above)


def test_patch_refuses_a_text_too_short_for_its_floor(gpt2_dir, capsys):
    assert main(["patch", "--model", str(gpt2_dir), "--text", "cat", "--corrupt", "dog", "--receiver", "1.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "use a longer text" in err[0] and err[0].startswith("error: ")
