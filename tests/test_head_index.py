"""One parser and one set of range checks for heads, with one error type (probes.head_index)."""

import pytest

import probes
from probes import hf
from probes.errors import BadOption, OutOfRange
from probes.head_index import (
    check_head,
    check_heads,
    check_layer,
    check_position,
    check_receiver,
    head_numbers,
    parse_head,
    parse_heads,
    read_heads,
    read_heads_or_all,
)


def test_a_head_is_two_ascii_whole_numbers_joined_by_a_dot():
    assert parse_head(" 1.2 ", 6, 12) == (1, 2) and head_numbers("10.11") == (10, 11)
    for bad in ("1-2", "1.2.3", "1.", ".2", "a.b", "1.²", "٣.1", "-1.2", ""):
        assert head_numbers(bad) is None
        with pytest.raises(BadOption, match=r"write it as LAYER\.HEAD"):
            parse_head(bad, 6, 12, "--head")
    assert parse_heads("1.2, 5.4,", 6, 12) == [(1, 2), (5, 4)]
    with pytest.raises(BadOption, match="no heads given"):
        parse_heads(" , ", 6, 12)
    with pytest.raises(BadOption, match=r"^head '1\.x': write each head as LAYER\.HEAD, two whole numbers"):
        parse_heads("1.2,1.x", 6, 12)
    with pytest.raises(BadOption, match=r"^head '1{37}\.\.\.': write"):
        read_heads("1" * 60)  # a refusal is one short line


def test_a_head_list_is_read_before_the_model_and_checked_after():
    told: list[str] = []
    # numbers only (a command reads its options before it loads the model): 99.0 is a head of some model
    assert read_heads("0.1, 99.0,0.1", notify=told.append) == [(0, 1), (99, 0)]
    assert told == ["head 0.1 is named more than once: it is used once"]
    assert read_heads_or_all(" all ") is None and read_heads_or_all("2.3") == [(2, 3)]
    with pytest.raises(BadOption, match="^no senders given"):
        read_heads_or_all(",", "sender")
    with pytest.raises(OutOfRange, match="head 99.0 is outside minilm: layers 0–5"):
        check_heads(read_heads("0.1,99.0"), 6, 12, where="minilm")
    assert parse_heads("1.2,1.2", 6, 12, notify=told.append) == [(1, 2)] and len(told) == 2


def test_every_range_is_refused_with_one_type_naming_the_ranges():
    with pytest.raises(OutOfRange, match="head 1.12 is outside minilm: layers 0–5, heads 0–11"):
        parse_heads("1.2,1.12", 6, 12, where="minilm")
    with pytest.raises(OutOfRange, match="layer 6 is outside the trace: layers 0–5"):
        check_layer(6, 6, "the trace")
    with pytest.raises(OutOfRange, match="receiver 0.3 is in layer 0"):
        check_receiver((0, 3), 6, 12)
    with pytest.raises(OutOfRange, match="token 7 is outside the text's 7 tokens"):
        check_position(7, 7)
    assert check_heads([(5, 11), (0, 0)], 6, 12) == [(5, 11), (0, 0)]
    check_position(None, 3)  # no position asked for: nothing to refuse
    with pytest.raises(OutOfRange, match="head -1.0 is outside"):
        check_head((-1, 0), 6, 12)
    # one type: a BadOption (the CLI's exit 2, the app's st.error) and an IndexError (code that indexes)
    assert issubclass(OutOfRange, BadOption) and issubclass(OutOfRange, IndexError)


def test_traces_and_readers_refuse_with_the_same_type(minilm):
    trace = hf.forward(minilm, minilm.encode("hello"))
    for call in (lambda: trace.attention(6, 0), lambda: trace.qkv(0, 12), lambda: trace.attention(0, 0, item=1)):
        with pytest.raises(OutOfRange):
            call()
    from probes.effects.why import qk_attribution

    with pytest.raises(OutOfRange, match="outside minilm: heads 0–11"):
        qk_attribution(minilm, "hello there", 0, 12, 1, 0)
    assert isinstance(probes.OutOfRange(""), probes.ProbesError)


def test_a_key_the_mask_hides_is_refused_by_the_rule_that_hides_it():
    from probes.head_index import check_seen_key

    assert check_seen_key(3, 5, True, (1, 2), causal=True, window=None) == 3
    with pytest.raises(OutOfRange, match=r"^key token 7 is after the query: a causal model's query sees only the "
                                         r"past, so head 1\.2 gives it no score: pick a key at or before token 5$"):
        check_seen_key(7, 5, False, (1, 2), causal=True, window=None)
    with pytest.raises(OutOfRange, match=r"outside layer 1's sliding window of 4 tokens, so head 1\.2 gives it no "
                                         r"score: pick a key from token 6 to 9$"):
        check_seen_key(2, 9, False, (1, 2), causal=True, window=4)
    # an encoder's window reaches both ways: a later key is outside it, not "after the query"
    with pytest.raises(OutOfRange, match=r"key token 15 is outside layer 1's sliding window of 4 tokens, .*: pick a "
                                         r"key within 3 tokens of token 9$"):
        check_seen_key(15, 9, False, (1, 2), causal=False, window=4)


RANGE_WORDS = ("is outside", "out of range")  # how a range error reads: head_index alone writes them


def range_messages(path) -> list[str]:
    """The strings and f-strings of a module (docstrings aside) that say a range's words: a range message written
    by hand, where it should come from :mod:`probes.head_index`."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    documented = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    pieces = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # f"{what} {i} is outside …": its literal pieces with {} between
            text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                           for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documented | pieces:
            text = node.value
        else:
            continue
        if any(words in text.lower() for words in RANGE_WORDS):
            found.append((node.lineno, f"{path.name}:{node.lineno}: {text}"))
    return [hit for _, hit in sorted(found)]


def test_every_range_message_comes_from_head_index():
    from pathlib import Path

    import probes.head_index

    library = Path(probes.__file__).parent
    modules = [p for p in library.rglob("*.py") if p != Path(probes.head_index.__file__)]
    assert len(modules) > 50
    assert [hit for module in modules for hit in range_messages(module)] == []
    assert range_messages(Path(probes.head_index.__file__))  # (the walk reads head_index's own)


def test_the_range_message_walk_sees_one(tmp_path):
    sample = tmp_path / "reader.py"
    sample.write_text('"""Refuses a query that is outside the text."""\n\n\ndef check(q, n):\n'
                      '    """q is outside n: refused."""\n    if q >= n:\n'
                      '        raise ValueError(f"query {q} is outside the text (0–{n - 1})")\n'
                      '    return "Out of range" if q < 0 else q\n', encoding="utf-8")
    assert range_messages(sample) == ["reader.py:7: query {} is outside the text (0–{})",
                                      "reader.py:8: Out of range"]
