"""The corpus reader: three formats streamed in chunks, bad rows named by line, and the window rule."""

import codecs
import json

import pandas as pd
import pytest

from probes.corpus.reader import Corpus, cut, wrapping
from probes.errors import BadData, BadOption


def _all(corpus: Corpus, size: int):
    scan = corpus.scan(size)
    return scan, [pair for chunk in scan.chunks for pair in corpus.read(chunk)]


def test_a_text_file_is_one_text_a_line_with_blank_lines_skipped(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("first text\n\nsecond, with ünïcode 小明\n   \nthird\r\nfourth\n")
    scan, texts = _all(Corpus(str(path)), 3)
    assert texts == [(1, "first text"), (3, "second, with ünïcode 小明"), (5, "third"), (6, "fourth")]
    assert (scan.texts, scan.blank, scan.bad) == (4, 2, [])
    assert [(c.first, c.count) for c in scan.chunks] == [(1, 3), (6, 1)]


def test_each_chunk_is_read_from_where_it_starts(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("".join(f"text number {i}\n" for i in range(25)))
    corpus = Corpus(str(path))
    scan = corpus.scan(10)
    assert [c.count for c in scan.chunks] == [10, 10, 5]
    assert corpus.read(scan.chunks[2]) == [(21 + i, f"text number {20 + i}") for i in range(5)]


def test_jsonl_bad_rows_are_named_by_line_and_reason(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [json.dumps({"text": "good one"}), "{not json", json.dumps(["a list"]), json.dumps({"body": "x"}),
            json.dumps({"text": 5}), json.dumps({"text": "  "}), "", json.dumps({"text": "good two", "id": 9})]
    path.write_text("\n".join(rows) + "\n")
    scan, texts = _all(Corpus(str(path)), 10)
    assert texts == [(1, "good one"), (8, "good two")]
    assert scan.bad == ["c.jsonl line 2: not JSON (Expecting property name enclosed in double quotes, column 2)",
                        "c.jsonl line 3: a JSON list, not an object with a 'text' field",
                        "c.jsonl line 4: no 'text' field (it has 'body')",
                        "c.jsonl line 5: 'text' is a int, not text",
                        "c.jsonl line 6: 'text' is empty"]
    assert _all(Corpus(str(path), field="body"), 10)[1] == [(4, "x")]


def test_a_line_that_is_not_utf8_is_a_bad_row(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"fine\n\xff\xfe broken\nalso fine\n")
    scan, texts = _all(Corpus(str(path)), 5)
    assert texts == [(1, "fine"), (3, "also fine")]
    assert scan.bad == ["c.txt line 2: not UTF-8 text (byte 1 of the line is 0xFF): save the file as UTF-8 and rerun"]


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
@pytest.mark.parametrize("mark, codec, name", [
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32")])
def test_a_utf16_or_utf32_file_is_refused_as_a_whole(tmp_path, suffix, mark, codec, name):
    path = tmp_path / f"c{suffix}"
    lines = ["first text", "second text"] if suffix == ".txt" else [json.dumps({"text": t}) for t in ("a", "b")]
    path.write_bytes(mark + "\n".join(lines).encode(codec))  # read as UTF-8: line 1 bad, line 2 full of NULs
    with pytest.raises(BadData) as refused:
        Corpus(str(path))
    assert str(refused.value) == (f"{path} is {name} text (it starts with a {name} byte-order mark), not UTF-8: "
                                  "save the file as UTF-8 and rerun")


@pytest.mark.parametrize("suffix", [".txt", ".jsonl"])
def test_a_utf8_byte_order_mark_is_dropped(tmp_path, suffix):
    path = tmp_path / f"c{suffix}"
    lines = ["first text", "second text"] if suffix == ".txt" else [json.dumps({"text": t}) for t in
                                                                     ("first text", "second text")]
    path.write_bytes(codecs.BOM_UTF8 + "\n".join(lines).encode())
    scan, texts = _all(Corpus(str(path)), 1)
    assert texts == [(1, "first text"), (2, "second text")] and scan.bad == []
    assert [c.offset for c in scan.chunks] == [0, len(codecs.BOM_UTF8) + len(lines[0]) + 1]


def test_a_line_with_a_nul_is_a_bad_row(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"fine\n" + "utf-16 text\n".encode("utf-16-le") + b"\nalso fine\n")  # no byte-order mark
    scan, texts = _all(Corpus(str(path)), 5)
    assert texts == [(1, "fine"), (4, "also fine")]
    assert scan.bad == ["c.txt line 2: a NUL character at byte 2 of the line (UTF-16 text without a byte-order mark, "
                        "or not a text file): save the file as UTF-8 and rerun",
                        "c.txt line 3: a NUL character at byte 1 of the line (UTF-16 text without a byte-order mark, "
                        "or not a text file): save the file as UTF-8 and rerun"]


def test_parquet_is_read_by_row_groups_with_null_and_empty_cells_reported(tmp_path):
    path = tmp_path / "c.parquet"
    frame = pd.DataFrame({"body": [f"text {i}" if i % 7 else None for i in range(30)], "n": range(30)})
    frame.loc[3, "body"] = ""
    frame.to_parquet(path, row_group_size=8)
    scan, texts = _all(Corpus(str(path), field="body"), 4)
    want = [(i, f"text {i}") for i in range(30) if i % 7 and i != 3]
    assert texts == want
    want_bad = [f"c.parquet row {i}: 'body' is " + ("empty" if i == 3 else "null") for i in (0, 3, 7, 14, 21, 28)]
    assert scan.bad == want_bad
    with pytest.raises(BadData, match=r"no column 'text' \(it has body, n\).*--field"):
        Corpus(str(path)).scan(4)
    with pytest.raises(BadData, match="column 'n' holds int64, not text"):
        Corpus(str(path), field="n").scan(4)


def test_unknown_missing_or_broken_files_say_what_to_give(tmp_path):
    with pytest.raises(BadData, match="no such file"):
        Corpus(str(tmp_path / "nope.txt"))
    (tmp_path / "c.csv").write_text("a,b\n")
    with pytest.raises(BadData, match="unknown corpus format '.csv'"):
        Corpus(str(tmp_path / "c.csv"))
    (tmp_path / "c.parquet").write_text("not parquet")
    with pytest.raises(BadData, match="not a readable Parquet file"):
        Corpus(str(tmp_path / "c.parquet")).scan(4)


def test_a_file_changed_between_scan_and_read_is_refused(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("one\ntwo\nthree\n")
    corpus = Corpus(str(path))
    scan = corpus.scan(2)
    path.write_text("one\n")
    with pytest.raises(BadData, match="changed while it was read"):
        corpus.read(scan.chunks[1])


def test_windows_cover_every_token_once_each_wrapped_in_the_models_special_tokens(minilm, smollm2):
    text = "Xiaoming gave the apple to Xiaohong because she was hungry. " * 12
    for model, window in ((minilm, 32), (smollm2, 32)):
        before, after = wrapping(model)
        whole = model.tokenizer(text, add_special_tokens=False)["input_ids"]
        windows = cut(model, [(7, text), (8, "Short one.")], window)
        first = [w for w in windows if w.text_id == 7]
        assert all(len(w.piece.ids) <= window for w in windows)
        assert [w.index for w in first] == list(range(len(first)))
        inner = [w.piece.ids[len(before):len(w.piece.ids) - len(after)] for w in first]
        assert sum(inner, []) == whole  # nothing dropped, nothing twice
        assert all(w.piece.ids[:len(before)] == before and w.piece.ids[len(w.piece.ids) - len(after):] == after
                   for w in windows)
        assert windows[-1].context == "Short one."
        assert first[1].context == text[first[1].start:first[1].end] and first[1].start > 0
    assert wrapping(minilm) == ([101], [102]) and wrapping(smollm2) == ([], [])
    windows = cut(minilm, [(7, text)], 32)
    enc = minilm.batch([w.piece for w in windows[:2]], [w.text for w in windows[:2]])
    assert [t.text for t in enc.tokens[0][:4]] == ["[CLS]", "xiao", "##ming", "gave"]


def test_a_window_too_small_or_beyond_the_context_is_refused(minilm):
    with pytest.raises(BadOption, match="leaves no room"):
        cut(minilm, [(1, "a text")], 2)
    with pytest.raises(BadOption, match="longer than minilm's context window of 512"):
        cut(minilm, [(1, "a text")], 1024)
