import json

import pytest

from probes.datasets.coreference import read_jsonl, winobias
from probes.errors import BadData


def test_user_jsonl(tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"text": "Xiaoming gave the apple to Xiaohong because she was hungry.",
                                "pronoun": "she", "antecedent": "Xiaohong"}) + "\n\n")
    (item,) = read_jsonl(path)
    assert item.words[item.pronoun] == "she" and item.words[item.antecedent] == "Xiaohong"
    assert item.candidates == [3, 5] and item.label == "coreference"  # "apple" (after "the") and Xiaohong


@pytest.mark.parametrize("line, says", [
    ('{"text": "a b", "pronoun": "she"}', "missing field\\(s\\) antecedent"),
    ("{not json", "not JSON"),
    ('{"text": "she saw Bob", "pronoun": "she", "antecedent": "Bob"}', "the antecedent 'Bob' followed by .* not in"),
    ('{"text": 5, "pronoun": "she", "antecedent": "x"}', "text is int, not text"),
    ('{"text": "Bob said he", "pronoun": "he", "antecedent": ["Bob"]}', "antecedent is list, not text"),
])
def test_bad_lines_name_file_and_line(tmp_path, line, says):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "Bob said he would", "pronoun": "he", "antecedent": "Bob"}\n' + line + "\n")
    with pytest.raises(BadData, match=f"bad.jsonl:2: {says}"):
        read_jsonl(path)


def test_winobias_from_the_pinned_wheel():
    items = winobias()
    assert len(items) == 2 * 761  # both conditions of every item
    first, anti = items[0], items[1]
    assert " ".join(first.words).startswith("The driver picked up the accountant")
    assert first.words[first.antecedent] == "accountant" and first.words[first.pronoun] == "she"
    assert anti.words[anti.pronoun] == "he" and anti.label == "anti-stereotyped"
    assert all(i.antecedent in i.candidates and i.antecedent < i.pronoun for i in items)
