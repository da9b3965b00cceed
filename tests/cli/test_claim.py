"""``python -m probes claim``: which head answers a question, judged on items it was not chosen on; planted heads
whose truth is known, the JSON a program reads, and every bad input as one line and exit 2."""

from __future__ import annotations

import json

import pytest
from checkpoints import PRONOUN_TEXT

from probes.cli import main

STORY = "Xiaoming gave the apple to Xiaohong because she was hungry."


def test_a_planted_gender_head_is_supported_and_the_nearer_name_head_is_not(pronoun_dir, gender_file, capsys):
    assert main(["claim", "--model", str(pronoun_dir), "--data", str(gender_file), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["head"] == "0.1" and got["verdict"] == "supported" and got["n"] == 40 and got["seed"] == 0
    assert got["accuracy"] == 1.0 and got["low"] > max(got["baselines"].values())
    assert set(got["baselines"]) == {"chance", "the most recent candidate", "the first-mentioned candidate"}
    assert got["controls"] == {"gender.jsonl": 80} and got["text_margin"] is None
    assert main(["claim", "--model", str(pronoun_dir), "--data", str(gender_file), "--head", "0.0"]) == 0
    out = capsys.readouterr().out
    assert "judged on all 80 items (the head was given)" in out
    assert "verdict: no better than the most recent candidate:" in out
    assert "Head 0.0 follows the nearer candidate: on 80 items it picks the answer" in out


def test_on_a_sentence_the_controls_judge_it_and_the_text_is_reported_beside(pronoun_dir, capsys):
    assert main(["claim", "--model", str(pronoun_dir), "--text", PRONOUN_TEXT, "--query", "she", "--key", "Xiaohong",
                 "--against", "Xiaoming", "--head", "0.0", "--controls", "60", "--seed", "4", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["n"] == 60 and got["seed"] is None  # a given head: every item judged, no split
    assert got["verdict"] == "baseline" and got["agreement"]["the most recent candidate"] > 0.9
    # on the sentence itself the nearer name is the answer: one sentence decides nothing
    assert got["text_margin"] > 0.5
    assert sum(got["controls"].values()) == 60 and "your sentence: verb flipped" in got["controls"]


def test_the_offline_default_gets_a_verdict_not_a_crown(capsys):
    assert main(["claim", "--text", STORY, "--query", "she", "--key", "Xiaohong", "--against", "Xiaoming"]) == 0
    out = capsys.readouterr().out
    assert "finds what 'she' refers to: chosen on 48 of 96 controls (seed 0;" in out
    assert "verdict: " in out
    assert "(on the text alone the largest margin is head 1.2's: one sentence, not evidence)" in out


@pytest.mark.parametrize("args, message", [
    ([], "say what to judge"),
    (["--text", STORY, "--query", "she"], "needs --key, --against too"),
    (["--text", "   ", "--query", "she", "--key", "a", "--against", "b"], "the text is empty"),
    (["--text", STORY, "--query", "they", "--key", "Xiaohong", "--against", "Xiaoming"],
     "the pronoun 'they' is not a word of the text: ask about words of the text"),
    (["--text", STORY, "--query", "she", "--key", "Xiaohong", "--against", "Xiaoming", "--head", "9.0"],
     "--head 9.0 is outside minilm"),
    (["--data", "nowhere.jsonl"], "no file 'nowhere.jsonl'"),
    (["--data", "x.jsonl", "--text", STORY], "not both"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(["claim", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_bad_lines_are_named_skipped_or_with_strict_fatal_and_too_few_items_say_so(pronoun_dir, gender_file, tmp_path,
                                                                                      capsys):
    rows = gender_file.read_text().splitlines()[:40]
    path = tmp_path / "some.jsonl"
    path.write_text("\n".join(rows + ['{"text": "Mary met Tom.", "pronoun": "she", "candidates": ["Mary", "Tom"]}',
                                      '{"text": "Mary met Tom, she said.", "pronoun": "she", "candidates": ["Mary", '
                                      '"Tom"], "answer": "Anna"}']) + "\n")
    assert main(["claim", "--model", str(pronoun_dir), "--data", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"claim: skipped 2 bad item(s) of {path} (--strict to stop instead; 1 × missing field(s) answer; 1 × the " \
           "answer '…' is not among the candidates ('…', '…')):" in captured.err
    assert f"{path}:41: missing field(s) answer" in captured.err
    assert f"{path}:42: the answer 'Anna' is not among the candidates ('Mary', 'Tom')" in captured.err
    assert "verdict: too few items (n = 20 < 30): nothing can be concluded" in captured.out
    assert main(["claim", "--model", str(pronoun_dir), "--data", str(path), "--strict"]) == 2
    assert "2 bad item(s) in" in capsys.readouterr().err
