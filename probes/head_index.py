"""Heads named by number: ``"1.2"`` is layer 1, head 2. One parser and one set of range checks, with one error
type (:class:`~probes.errors.OutOfRange`, a :class:`~probes.errors.BadOption`), for every command, page, trace and
reader; nothing else writes a range's message.

It sits on the bottom floor: it knows sizes (``n_layers``, ``n_heads``), not models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .errors import BadOption, OutOfRange

Head = tuple[int, int]  # (layer, head)


def _span(n: int) -> str:
    return f"0–{n - 1}" if n > 0 else "none"


def check_layer(layer: int, n_layers: int, where: str = "the model", what: str = "layer") -> int:
    """``layer`` inside a model (or trace) of ``n_layers``; else :class:`OutOfRange` naming ``what`` and ``where``."""
    if not 0 <= layer < n_layers:
        raise OutOfRange(f"{what} {layer} is outside {where}: layers {_span(n_layers)}")
    return layer


def check_head(head: Head, n_layers: int, n_heads: int, what: str = "head", where: str = "the model") -> Head:
    """A (layer, head) inside a model of ``n_layers`` × ``n_heads``; else :class:`OutOfRange` naming it (``what``)
    and the model's ranges (``where``: the model)."""
    layer, index = head
    if not (0 <= layer < n_layers and 0 <= index < n_heads):
        raise OutOfRange(f"{what} {layer}.{index} is outside {where}: layers {_span(n_layers)}, heads "
                         f"{_span(n_heads)}")
    return layer, index


def check_layer_head(layer: int, head: int | None, n_layers: int, n_heads: int, where: str = "the model") -> None:
    """A layer, and a head of it where one is given (None: the whole layer), inside ``where``."""
    check_layer(layer, n_layers, where)
    if head is not None and not 0 <= head < n_heads:
        raise OutOfRange(f"head {head} is outside {where}: heads {_span(n_heads)}")


def check_index(index: int, n: int, what: str, within: str) -> int:
    """An item of a batch, a step of a generation, a query row…: ``0 <= index < n``."""
    if not 0 <= index < n:
        raise OutOfRange(f"{what} {index} is outside {within} ({_span(n)})")
    return index


def check_receiver(receiver: Head, n_layers: int, n_heads: int, where: str = "the model") -> Head:
    """A head that reads other heads' outputs (composition, path patching, QK attribution by sender): inside the
    model and not in layer 0."""
    layer, head = check_head(receiver, n_layers, n_heads, "receiver", where)
    if layer == 0:
        raise OutOfRange(f"receiver {layer}.{head} is in layer 0: no head writes before it (give a receiver in layer "
                         "1 or later)")
    return layer, head


def _quoted(spec: str) -> str:
    """What the user typed, quoted, and cut short when it is long (a refusal is one line)."""
    return repr(spec if len(spec) <= 40 else spec[:37] + "...")


def parse_head(spec: str, n_layers: int, n_heads: int, what: str = "head", where: str = "the model") -> Head:
    """``"1.2"`` -> (1, 2): one LAYER.HEAD, checked against the model's size (``what`` names it in a refusal,
    ``where`` the model). The one parser of a head every command and page uses."""
    numbers = head_numbers(spec)
    if numbers is None:
        raise BadOption(f"{what} {_quoted(spec)}: write it as LAYER.HEAD (e.g. 1.2)")
    return check_head(numbers, n_layers, n_heads, what, where)


def head_numbers(spec: str) -> Head | None:
    """``"1.2"`` -> (1, 2), unchecked against any model; None where it is not two whole numbers joined by a dot."""
    parts = spec.strip().split(".")
    # ASCII digits only: int() takes '٣' (3) and str.isdigit() takes '²', which int() refuses
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


ALL = "all"  # what a head list may say instead (read_heads_or_all): every head the reader considers


def read_heads(spec: str, what: str = "head", notify: Callable[[str], None] | None = None) -> list[Head]:
    """``"1.2,5.4"`` -> [(1, 2), (5, 4)], unchecked against any model's size (a command reads its options before it
    loads the model; :func:`check_heads` once it has): each a LAYER.HEAD of two whole numbers (:func:`head_numbers`),
    at least one; a head named twice is kept once, and ``notify`` told so."""
    found: list[Head] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        pair = head_numbers(part)
        if pair is None:
            raise BadOption(f"{what} {_quoted(part)}: write each {what} as LAYER.HEAD, two whole numbers "
                            "(e.g. 1.2,5.4)")
        if pair in found:
            if notify is not None:
                notify(f"{what} {pair[0]}.{pair[1]} is named more than once: it is used once")
            continue
        found.append(pair)
    if not found:
        raise BadOption(f"no {what}s given: write them as LAYER.HEAD, separated by commas (e.g. 1.2,5.4)")
    return found


def read_heads_or_all(spec: str, what: str = "head", notify: Callable[[str], None] | None = None) -> list[Head] | None:
    """:data:`ALL` (None: every head) or :func:`read_heads`."""
    return None if spec.strip() == ALL else read_heads(spec, what, notify)


def parse_heads(spec: str, n_layers: int, n_heads: int, what: str = "head", where: str = "the model",
                notify: Callable[[str], None] | None = None) -> list[Head]:
    """``"1.2,5.4"`` -> [(1, 2), (5, 4)] (:func:`read_heads`), each checked against the model's size
    (:func:`check_heads`)."""
    return check_heads(read_heads(spec, what, notify), n_layers, n_heads, what, where)


def check_heads(heads: Sequence[Head], n_layers: int, n_heads: int, what: str = "head",
                where: str = "the model") -> list[Head]:
    """Each of ``heads`` checked (:func:`check_head`)."""
    return [check_head((int(layer), int(head)), n_layers, n_heads, what, where) for layer, head in heads]


def check_position(position: int | None, n: int) -> None:
    """A token position of a text of ``n`` tokens (None: none asked for)."""
    if position is not None and not 0 <= position < n:
        raise OutOfRange(f"token {position} is outside the text's {n} tokens ({_span(n)})")


def check_seen_key(key: int, query: int, seen: bool, head: Head, causal: bool, window: int | None) -> int:
    """A key token that query token ``query`` of head ``head`` sees: ``seen`` is the layer's own mask there (the
    caller's, which knows the family's rules); else :class:`OutOfRange` saying which rule hides the key (a causal
    model's future, a sliding ``window``) and which keys to pick instead."""
    if seen:
        return key
    layer, index = head
    if causal and key > query:
        why, pick = "is after the query: a causal model's query sees only the past", f"at or before token {query}"
    else:  # a key the mask hides otherwise is outside the layer's sliding window (|i − j| < window are seen)
        reach = (window or 1) - 1
        why = f"is outside layer {layer}'s sliding window of {window} tokens"
        pick = f"from token {max(query - reach, 0)} to {query}" if causal else f"within {reach} tokens of token {query}"
    raise OutOfRange(f"key token {key} {why}, so head {layer}.{index} gives it no score: pick a key {pick}")
