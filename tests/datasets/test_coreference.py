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
    import re

    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "Bob said he would", "pronoun": "he", "antecedent": "Bob"}\n' + line + "\n")
    items = read_jsonl(path)
    assert len(items) == 1 and len(items.bad) == 1
    assert re.search(f"bad.jsonl:2: {says}", str(items.bad[0])), str(items.bad[0])


def test_every_bad_line_is_listed_a_bom_is_fine_and_no_lines_is_an_error(tmp_path):
    path = tmp_path / "items.jsonl"
    good = json.dumps({"text": "Bob said he would", "pronoun": "he", "antecedent": "Bob"})
    paraphrased = json.dumps({"text": "The old man said he would", "pronoun": "he", "antecedent": "the elderly man"})
    elsewhere = json.dumps({"text": "The old man said he would", "pronoun": "he", "antecedent": "the boy"})
    path.write_text("\ufeff" + "\n".join([good, "{oops", paraphrased, good, '{"text": 1}', elsewhere]) + "\n",
                    encoding="utf-8")
    items = read_jsonl(path)
    assert len(items) == 3 and [b.line for b in items.bad] == [2, 5, 6]  # the paraphrase is placed by "man"
    assert "give the antecedent's words as the text has them" in items.bad[2].reason
    (tmp_path / "blank.jsonl").write_text("\n\n")
    with pytest.raises(BadData, match="no items found"):
        read_jsonl(tmp_path / "blank.jsonl")


def test_winobias_from_the_pinned_wheel():
    items = winobias()
    assert len(items) == 2 * 761  # both conditions of every item
    first, anti = items[0], items[1]
    assert " ".join(first.words).startswith("The driver picked up the accountant")
    assert first.words[first.antecedent] == "accountant" and first.words[first.pronoun] == "she"
    assert anti.words[anti.pronoun] == "he" and anti.label == "anti-stereotyped"
    assert all(i.antecedent in i.candidates and i.antecedent < i.pronoun for i in items)


def test_an_antecedent_is_placed_exactly_first_then_ignoring_case_or_a_possessive(gpt2_dir, tmp_path, capsys):
    """WSC273 writes its answers lower-cased ("ann" for "Ann") and sometimes names the owner of a possessive: such
    an item is placed (and counted in one note), an exact match wins over a looser one, and only an antecedent no
    match can place is refused. Synthetic items in WSC273's shape."""
    from probes.cli import main

    rows = [
        {"text": "Nora thanked Lena because she had helped.", "pronoun": "she", "antecedent": "lena"},
        {"text": "The rose that Rose picked was red, so she kept it.", "pronoun": "she", "antecedent": "Rose"},
        {"text": "Omar's sister called because he was late.", "pronoun": "he", "antecedent": "omar"},
        {"text": "Tom met Ida after he had eaten.", "pronoun": "he", "antecedent": "tom"},
        {"text": "Bob said she would come.", "pronoun": "she", "antecedent": "carl"},
    ]
    path = tmp_path / "wsc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    items = read_jsonl(path)
    assert [i.words[i.antecedent] for i in items] == ["Lena", "Rose", "Omar's", "Tom"]
    assert items[1].antecedent == 3  # the name, not the flower before it (word 1)
    assert [b.line for b in items.bad] == [5] and "'carl'" in items.bad[0].reason
    assert items.notes == [f"{path}: 2 antecedent(s) found in the text only when case is ignored (e.g. 'ann' for "
                           "'Ann')", f"{path}: 1 antecedent(s) found in the text only as a possessive (e.g. 'Ann' in "
                           "\"Ann's\")"]
    assert main(["profile", "--model", str(gpt2_dir), "--probe", "coreference", "--data", str(path),
                 "--out", str(tmp_path / "c.csv")]) == 0
    err = capsys.readouterr().err
    assert f"note: coreference: {items.notes[0]}" in err and f"note: coreference: {items.notes[1]}" in err


def test_a_paraphrased_antecedent_is_placed_by_its_head_noun_and_every_drop_is_counted_by_reason(tmp_path, capsys,
                                                                                                 gpt2_dir):
    """Winograd-style items name their antecedent in other words than the text ("the suitcase" for "the brown
    suitcase"): placed by the head noun, counted in a note, never dropped; what is still dropped is counted by
    reason."""
    from probes.cli import main

    rows = [
        {"text": "The trophy did not fit in the brown suitcase because it was small.", "pronoun": "it",
         "antecedent": "the suitcase"},
        {"text": "The old man helped the boy because he was kind.", "pronoun": "he", "antecedent": "the man"},
        {"text": "The cat sat down because it was tired.", "pronoun": "it", "antecedent": "the cat"},
        {"text": "Bob said she would come.", "pronoun": "she", "antecedent": "the carl"},
        {"text": "Ann said she would come.", "pronoun": "she", "antecedent": "the bob"},
    ]
    path = tmp_path / "wsc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    items = read_jsonl(path)
    assert [i.words[i.antecedent] for i in items] == ["suitcase", "man", "cat"]
    assert f"{path}: 2 antecedent(s) found in the text only by their head noun (e.g. 'the suitcase' for 'the brown " \
           "suitcase')" in items.notes
    assert [b.line for b in items.bad] == [4, 5]
    assert main(["profile", "--model", str(gpt2_dir), "--probe", "coreference", "--data", str(path), "--out",
                 str(tmp_path / "c.csv")]) == 0
    err = capsys.readouterr().err
    assert "skipped 2 bad item(s)" in err and "2 × the antecedent '…' followed by the pronoun '…' is not in the text" \
        in err
    assert (tmp_path / "c.csv.bad.txt").read_text().count("wsc.jsonl:") == 2
