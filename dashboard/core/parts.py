"""A part of a link: a frozen dataclass whose fields are parameters of the page's URL, each read by its type and by
its field's rule. The link's core (:class:`~dashboard.core.state.ViewState`) is one; each page declares its own in
its folder's ``state.py``. No Streamlit here: parts are tested as plain data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Self


def choice(default: str, options: Iterable[str] | Callable[[], Iterable[str]]) -> Any:
    """A field whose value in a link is one of ``options`` (or of what ``options()`` gives when the link is read:
    a registry that grows as pages register)."""
    return field(default=default, metadata={"options": options})


def whole(default: int, least: int = 0) -> Any:
    """A whole number, ``least`` or more, in a link."""
    return field(default=default, metadata={"least": least})


def parsed(default: Any, parse: Callable[[str], Any]) -> Any:
    """A field read from a link by ``parse`` (the raw text → the value, or :class:`ValueError` saying what a link
    must hold instead)."""
    return field(default=default, metadata={"parse": parse})


@dataclass(frozen=True)
class LinkPart:
    """One part of a link: a frozen dataclass whose fields are parameters of the link, each read by its type (a
    bool, a number above 0, a whole number, a string) and by its field's rule (:func:`choice`, :func:`whole`,
    :func:`parsed`). ``WRITTEN``: fields written into every link, even at their default."""

    WRITTEN: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_query(cls, params: Mapping[str, Any], **base: Any) -> tuple[Self, list[str]]:
        """This part of the view a link describes (``base``: the fields' starting values, where not the defaults),
        and a note for each of its parameters that could not be used (the starting value is kept for it): a
        hand-edited link never breaks the app."""
        state, problems = cls(**base), []
        values = {}
        for f in fields(cls):
            if f.name not in params:
                continue
            raw = params[f.name]
            raw = raw[-1] if isinstance(raw, list) else str(raw)
            try:
                values[f.name] = _parse(f, raw, getattr(state, f.name))
            except ValueError as exc:
                problems.append(f"link parameter {f.name}={raw[:40]!r} ignored: {exc}")
        return replace(state, **values), problems

    def to_query(self) -> dict[str, str]:
        """Query parameters of this part: every field that differs from the default (and those always written)."""
        default = type(self)()
        out = {}
        for name, value in asdict(self).items():
            if name not in self.WRITTEN and value == getattr(default, name):
                continue
            out[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return out


def _ascii_number(raw: str, convert, said: str):
    """``raw`` read by ``convert`` (int or float), or a ValueError that ``said``: int() and float() take '٣' (3),
    and a number in a link is ASCII."""
    try:
        if not raw.isascii():
            raise ValueError(raw)
        return convert(raw)
    except ValueError:
        raise ValueError(said) from None


def _parse(f: Field, raw: str, default: Any) -> Any:
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise ValueError("expected 1 or 0")
    if isinstance(default, float):
        number = _ascii_number(raw, float, "expected a number")
        if not number > 0 or number != number or number == float("inf"):
            raise ValueError("expected a number above 0")
        return number
    if isinstance(default, int):
        value = _ascii_number(raw, int, "expected a whole number")
        least = f.metadata.get("least", 0)
        if value < least:
            raise ValueError(f"expected {least} or more")
        return value
    options = f.metadata.get("options")
    if options is not None:
        allowed = list(options() if callable(options) else options)
        if raw not in allowed:
            raise ValueError(f"expected one of {', '.join(a for a in allowed if a)}")
    if "parse" in f.metadata:
        return f.metadata["parse"](raw)
    return raw
