"""Readable tokens and token <-> word alignment.

Tokenizers store tokens in their own alphabets: GPT-2's byte-level BPE writes a leading space as
``Ġ`` and splits a Chinese character or an emoji over several tokens whose raw strings are mojibake
(``å°``); SentencePiece writes ``▁`` and falls back to ``<0xE5>`` byte tokens; WordPiece marks
word-internal pieces with ``##``. :func:`readable_tokens` turns any of them into what a person
should see:

* byte-level and SentencePiece tokens are decoded to text, a leading space stays a real space;
* a character split over k tokens is shown on each of them as ``小(1/3)``, ``小(2/3)``, ``小(3/3)``;
* WordPiece keeps its ``##`` (it is how the model sees the word) and ``[UNK]`` shows what it hid,
  e.g. ``[UNK:🙂]``;
* special tokens keep their names and are flagged in :class:`Token.special`.

:func:`word_spans` and :func:`align_to_words` map tokens to the words of the text by character
offsets; the probes use them to turn piece-level attention into word-level attention.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Token:
    text: str  # readable string
    start: int  # character offsets into the encoded text (start == end for special tokens)
    end: int
    special: bool
    segment: int = 0  # 0 for the first text, 1 for the second of a pair


@lru_cache(maxsize=1)
def _byte_of_unicode() -> dict[str, int]:
    """Inverse of GPT-2's reversible bytes -> printable-unicode table.

    Printable Latin-1 bytes map to themselves; the other 68 bytes (controls, space, ...) are moved
    to code points 256, 257, ... in byte order. That is why a space appears as ``Ġ`` (256 + 32).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def tokenizer_style(tokenizer) -> str:
    """'bytelevel', 'sentencepiece' or 'wordpiece' (anything else is treated like WordPiece).
    Read once per tokenizer from its serialised pipeline (which is large: the whole vocabulary)."""
    cached = getattr(tokenizer, "_probes_style", None)
    if cached is None:
        cached = _style(tokenizer)
        try:
            tokenizer._probes_style = cached
        except AttributeError:
            pass
    return cached


def _style(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "wordpiece"
    spec = json.loads(backend.to_str())
    kinds = set()
    for part in ("decoder", "pre_tokenizer", "model"):
        node = spec.get(part) or {}
        kinds.add(node.get("type"))
        for child in node.get("decoders", []) + node.get("pretokenizers", []):
            kinds.add(child.get("type"))
    if "ByteLevel" in kinds:
        return "bytelevel"
    if "Metaspace" in kinds or "ByteFallback" in kinds or ("Replace" in kinds and "Fuse" in kinds):
        return "sentencepiece"
    return "wordpiece"


def _token_bytes(raw: str, style: str) -> bytes:
    if style == "bytelevel":
        table = _byte_of_unicode()
        if all(ch in table for ch in raw):
            return bytes(table[ch] for ch in raw)
        return raw.encode("utf-8")
    m = _SP_BYTE.match(raw)
    if m:
        return bytes([int(m.group(1), 16)])
    return raw.replace("▁", " ").encode("utf-8")


def _decode_pieces(pieces: list[bytes]) -> list[str]:
    """Decode a run of byte strings to one label each, naming characters that straddle pieces."""
    stream = b"".join(pieces)
    bounds, pos = [], 0
    for p in pieces:
        bounds.append((pos, pos + len(p)))
        pos += len(p)
    # character byte ranges of the whole stream; invalid bytes become \xNN escapes of one byte each
    chars: list[tuple[str, int, int]] = []
    i = 0
    while i < len(stream):
        for width in (1, 2, 3, 4):
            try:
                ch = stream[i : i + width].decode("utf-8")
            except UnicodeDecodeError:
                continue
            chars.append((ch, i, i + width))
            i += width
            break
        else:
            chars.append((f"\\x{stream[i]:02x}", i, i + 1))
            i += 1
    labels = []
    for k, (lo, hi) in enumerate(bounds):
        label = []
        for ch, c_lo, c_hi in chars:
            if c_hi <= lo or c_lo >= hi:
                continue
            if lo <= c_lo and c_hi <= hi:
                label.append(ch)
                continue
            owners = [j for j, (a, b) in enumerate(bounds) if a < c_hi and b > c_lo]
            part = owners.index(k) + 1
            label.append(f"{ch}({part}/{len(owners)})")
        labels.append("".join(label))
    return labels


def _visible(text: str) -> str:
    """Show control characters as their escapes so a label never breaks a table or a chart."""
    return "".join(
        ch if not unicodedata.category(ch).startswith("C") or ch == " " else repr(ch)[1:-1] for ch in text
    )


def readable_tokens(tokenizer, input_ids, offsets, text: str, text_pair: str | None = None,
                    sequence_ids=None) -> list[Token]:
    """Readable :class:`Token` for each id of one encoded sequence (padding included, flagged special).

    ``offsets`` are the fast tokenizer's ``offset_mapping``; ``sequence_ids`` say which text each
    token came from (None for special tokens).
    """
    ids = [int(i) for i in input_ids]
    raws = tokenizer.convert_ids_to_tokens(ids)
    special_ids = set(tokenizer.all_special_ids)
    style = tokenizer_style(tokenizer)
    if sequence_ids is None:
        sequence_ids = [None if i in special_ids else 0 for i in ids]
    out: list[Token | None] = [None] * len(ids)

    # decode byte-based styles in runs of non-special tokens, so split characters are reassembled
    run: list[int] = []

    def flush():
        if not run:
            return
        labels = _decode_pieces([_token_bytes(raws[j], style) for j in run])
        for j, label in zip(run, labels, strict=True):
            out[j] = _make(j, label)
        run.clear()

    def _make(j: int, label: str) -> Token:
        start, end = (int(x) for x in offsets[j])
        seg = sequence_ids[j] or 0
        return Token(_visible(label), start, end, False, seg)

    for j, (tid, raw) in enumerate(zip(ids, raws, strict=True)):
        if tid in special_ids and sequence_ids[j] is None:
            flush()
            out[j] = Token(raw, 0, 0, True, 0)
            continue
        if style in ("bytelevel", "sentencepiece"):
            if run and sequence_ids[run[-1]] != sequence_ids[j]:
                flush()
            run.append(j)
            continue
        label = raw
        if raw == getattr(tokenizer, "unk_token", None):
            start, end = (int(x) for x in offsets[j])
            source = (text if (sequence_ids[j] or 0) == 0 else (text_pair or ""))[start:end]
            label = f"{raw[:-1]}:{source}{raw[-1]}" if source and raw.endswith("]") else raw
        out[j] = _make(j, label)
    flush()
    return [t for t in out if t is not None]


_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Chinese characters (CJK unified ideographs)
_WORD = re.compile(
    rf"[{_HAN}]+"  # a run of Chinese characters: split into words by jieba (_chinese_words)
    r"|[\u3040-\u30ff\uac00-\ud7af]"  # one kana / hangul character
    r"|[^\W_]+(?:['’][^\W_]+)*"  # letters and digits, with inner apostrophes (don't, O'Neil)
    r"|\S",  # any other visible character (punctuation, emoji) on its own
)
_HAN_RUN = re.compile(rf"[{_HAN}]+")


def unknown_tokens(tokenizer, ids) -> int:
    """How many of ``ids`` are the tokenizer's unknown token ([UNK]): text its vocabulary cannot read (0 for a
    byte-level tokenizer, which has none)."""
    unk = getattr(tokenizer, "unk_token_id", None)
    return 0 if unk is None else sum(int(i) == unk for i in ids)


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words of ``text``: runs of letters/digits, Chinese words (a run of Chinese
    characters cut into words by jieba: 小明把苹果给了小红 is 小明 · 把 · 苹果 · 给 · 了 · 小红), single kana or
    hangul characters and single punctuation or symbol characters.

    Chinese is written without spaces, and no tokenizer here marks its words: WordPiece cuts it into characters,
    byte-level BPE into bytes of characters, so the pieces' offsets cannot say that 小红 is one word. jieba (a
    dictionary and an HMM for names it does not know, such as 小红) can."""
    spans = []
    for m in _WORD.finditer(text):
        if _HAN_RUN.fullmatch(m.group()):
            spans += [(m.start() + lo, m.start() + hi) for lo, hi in _chinese_words(m.group())]
        else:
            spans.append(m.span())
    return spans


@lru_cache(maxsize=4096)
def _chinese_words(run: str) -> tuple[tuple[int, int], ...]:
    """Spans of the words of a run of Chinese characters (jieba, its default dictionary and HMM). jieba reads
    its dictionary once per process, on the first Chinese text (about a second)."""
    import jieba

    jieba.setLogLevel(logging.WARNING)  # not its "Building prefix dict…" lines on every start
    return tuple((start, end) for _, start, end in jieba.tokenize(run))


def align_to_words(tokens: list[Token], spans: list[tuple[int, int]], segment: int = 0) -> list[int]:
    """For each token, the index of the word span it overlaps (first match), or -1.

    Special tokens, padding and tokens of the other segment get -1. A token that covers only
    whitespace (GPT-2's lone ``' '``) also gets -1.
    """
    starts = [s for s, _ in spans]

    word_of = []
    for tok in tokens:
        if tok.special or tok.segment != segment or tok.start == tok.end:
            word_of.append(-1)
            continue
        i = bisect.bisect_right(starts, tok.start) - 1
        found = -1
        for w in (i, i + 1):
            if 0 <= w < len(spans) and spans[w][0] < tok.end and tok.start < spans[w][1]:
                found = w
                break
        word_of.append(found)
    return word_of


def covered_words(tokens: list[Token], text: str) -> list[tuple[str, list[int]]]:
    """The words of ``text`` (:func:`word_spans`) with the indices of the tokens (a text's real tokens, as a
    Trace lists them) each covers, in order; words no token covers are left out."""
    out = []
    for lo, hi in word_spans(text):
        covered = span_tokens(tokens, (lo, hi))
        if covered:
            out.append((text[lo:hi], covered))
    return out


def word_occurrences(text: str, word: str) -> list[tuple[int, int]]:
    """The character spans of every whole-word occurrence of ``word`` in ``text``, in order (case-insensitive; a
    Chinese word: the text's words (:func:`word_spans`) that it is, else its occurrences anywhere)."""
    if not word:
        return []
    if any("\u3400" <= ch <= "\u9fff" for ch in word):
        whole = [(lo, hi) for lo, hi in word_spans(text) if text[lo:hi] == word]
        return whole or [m.span() for m in re.finditer(re.escape(word), text)]
    return [m.span() for m in re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text, flags=re.IGNORECASE)]


def span_tokens(tokens: list[Token], span: tuple[int, int], segment: int = 0) -> list[int]:
    """The indices (among ``tokens``, a text's real tokens) of the pieces that cover the character ``span``."""
    lo, hi = span
    return [i for i, t in enumerate(tokens) if not t.special and t.segment == segment and t.start < hi and lo < t.end]


def word_positions(tokens: list[Token], text: str, word: str) -> list[int]:
    """The indices (among ``tokens``, a text's real tokens) of the pieces of the first whole-word occurrence of
    ``word`` in ``text`` (:func:`word_occurrences`); [] when the text does not hold it."""
    found = word_occurrences(text, word)
    return span_tokens(tokens, found[0]) if found else []
