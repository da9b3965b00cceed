"""Which items a data name means: the built-in names (:data:`BUILTIN`) and files by their extension (.conllu,
.jsonl, .txt), read by :func:`read_items`; the words and default model inputs (:func:`texts`) of an item; and
which kind of data a name is (:func:`coreference_data`, :func:`sentence_data`). The probes
(:mod:`probes.heads.registry`), ``importance``, ``ablate`` and the app all read their data through here."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..errors import BadData

BUILTIN = ("ewt-dev", "ewt-train", "ewt-test", "winobias")


def words(item) -> list[str]:
    """The words of a data item: a parsed sentence, a coreference item, or a list of words (.txt)."""
    return list(getattr(item, "words", item))


def texts(items: Iterable) -> list[str]:
    """The default model inputs: each item's words joined by single spaces."""
    return [" ".join(words(i)) for i in items]


def read_items(data: str) -> list:
    """A data set: a built-in name or a path (.conllu, .jsonl, or .txt with one sentence a line)."""
    from . import coreference, dependencies

    if data.startswith("ewt-"):
        return dependencies.ewt(data.removeprefix("ewt-"))
    if data == "winobias":
        return coreference.winobias()
    path = Path(data)
    if path.is_dir():
        raise BadData(f"{data!r} is a folder, not a data file: give a file or one of {', '.join(sorted(BUILTIN))}")
    if not path.is_file():
        raise BadData(f"no data file {data!r}: give a path or one of {', '.join(sorted(BUILTIN))}")
    if path.suffix == ".conllu":
        return dependencies.read_conllu(path)
    if path.suffix == ".jsonl":
        return coreference.read_jsonl(path)
    if path.suffix == ".txt":
        from .utf8 import read_text

        lines = [line.strip() for line in read_text(path).splitlines()]  # not UTF-8: BadData naming the line
        items = [line.split() for line in lines if line]
        if not items:
            raise BadData(f"{path}:1: no sentences (one per line)")
        return items
    raise BadData(f"{path}: unknown data format {path.suffix!r}: use .conllu, .jsonl or .txt")


def coreference_data(data: str) -> bool:
    """Pronoun/antecedent items: the built-in WinoBias or a .jsonl file."""
    return data.endswith(".jsonl") or data == "winobias"


def sentence_data(data: str) -> bool:
    """Sentences (parsed or plain): everything but coreference items."""
    return not coreference_data(data)
