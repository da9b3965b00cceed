"""The controls of a question asked on one sentence: how each is made, and that no head-free rule can pass them."""

from __future__ import annotations

from collections import Counter

from probes.evidence.controls import controls, recipes, variants, winobias_questions

STORY = "Xiaoming gave the apple to Xiaohong because she was hungry."


def test_the_sentence_is_flipped_and_swapped_with_the_answer_following_the_meaning():
    made = {q.made: q for q in variants(STORY, "she", "Xiaohong", "Xiaoming")}
    flipped = made["your sentence: verb flipped"]
    assert flipped.text == "Xiaoming took the apple from Xiaohong because she was hungry."
    assert flipped.answer == "Xiaoming"
    swapped = made["your sentence: candidates swapped (pronoun he)"]
    assert swapped.text == "Xiaohong gave the apple to Xiaoming because he was hungry." and swapped.answer == "Xiaoming"
    both = made["your sentence: candidates swapped, verb flipped (pronoun he)"]
    assert both.text == "Xiaohong took the apple from Xiaoming because he was hungry." and both.answer == "Xiaohong"


def test_passive_and_chinese_flips():
    (q,) = [q for q in variants("Anna thanked Mary because she had helped.", "she", "Mary", "Anna")
            if q.made.endswith("verb flipped")]
    assert q.text == "Anna was thanked by Mary because she had helped." and q.answer == "Anna"
    (z,) = [q for q in variants("小明把苹果给了小红，因为她很饿", "她", "小红", "小明")
            if q.made.endswith("verb flipped")]
    assert z.text == "小明从小红那里拿了苹果，因为她很饿" and z.answer == "小明"


def test_ninety_six_controls_balanced_so_that_position_cannot_pass_them():
    items, notes = controls(STORY, "she", "Xiaohong", "Xiaoming")
    assert len(items) == 96 and not notes
    assert len({(q.text, q.query) for q in items}) == 96  # each sentence once
    assert STORY not in {q.text for q in items}  # the sentence itself is never judged on
    groups = recipes(Counter(q.made for q in items))
    assert set(groups) == {"your sentence", "templates: your words", "templates: other names", "WinoBias"}
    assert groups["your sentence"] == 3 and groups["WinoBias"] >= 16
    first = sum(q.answer_index == 0 for q in items if q.made.startswith("template"))
    templated = sum(q.made.startswith("template") for q in items)
    assert abs(first - templated / 2) <= 2  # templates: half the answers first, half second
    pronouns = Counter(q.query.lower() for q in items)
    assert pronouns["she"] >= 30 and pronouns["he"] >= 30  # the pronoun's gender swapped where the names allow
    wino = Counter(q.made for q in items if q.made.startswith("WinoBias"))
    assert abs(wino["WinoBias: pro-stereotyped"] - wino["WinoBias: anti-stereotyped"]) <= 1  # both pronoun types
    assert controls(STORY, "she", "Xiaohong", "Xiaoming")[0] == items  # the same seed, the same controls
    assert controls(STORY, "she", "Xiaohong", "Xiaoming", seed=1)[0] != items


def test_other_names_are_of_one_gender_so_gender_never_decides():
    from probes.evidence.controls import NAMES

    items, _ = controls(STORY, "she", "Xiaohong", "Xiaoming", winobias=False)
    for q in items:
        if "other names" in q.made:
            gender = "f" if q.query == "she" else "m"
            assert set(q.candidates) <= set(NAMES[("en", gender)])


def test_a_word_the_recipes_do_not_know_gets_only_its_swap_and_says_so():
    items, notes = controls("The cat sat on the mat.", "sat", "cat", "mat")
    assert [q.text for q in items] == ["The mat sat on the cat."] and items[0].answer == "mat"
    assert "not a pronoun the built-in controls know" in notes[0] and "upload your own questions" in notes[0]


def test_winobias_questions_name_whole_occupations():
    found = winobias_questions()
    assert len(found) > 1000
    two_words = [q for q in found if any(" " in c for c in q.candidates)]
    assert two_words and all(" " in c or c.isalpha() for q in two_words for c in q.candidates)
    q = next(q for q in found if "construction worker" in q.candidates)
    assert q.text.startswith("The construction worker") and "construction" not in q.candidates
    assert all(q.answer in q.candidates and len(q.candidates) == 2 for q in found)
