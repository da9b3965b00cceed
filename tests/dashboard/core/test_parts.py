"""A part of a link (dashboard/core/parts.py): each field read from a link by its type and its rule, a note for what
cannot be used, the default kept for it; only what differs from the default written back."""

from dataclasses import dataclass

from dashboard.core.parts import LinkPart, choice, parsed, whole


def _even(raw: str) -> str:
    if len(raw) % 2:
        raise ValueError("expected an even number of characters")
    return raw


@dataclass(frozen=True)
class Toy(LinkPart):
    on: bool = False
    ratio: float = 1.0
    count: int = whole(3, least=1)
    colour: str = choice("red", ("red", "blue"))
    later: str = choice("", lambda: ("", "a", "b"))  # read when the link is: a registry that grows
    pair: str = parsed("xx", _even)


def test_every_rule_reads_a_link_and_writes_back_what_differs():
    part, problems = Toy.from_query({"on": "yes", "ratio": "0.5", "count": "7", "colour": "blue", "later": "b",
                                     "pair": "abcd", "elsewhere": "ignored"})
    assert problems == []
    assert part == Toy(on=True, ratio=0.5, count=7, colour="blue", later="b", pair="abcd")
    assert part.to_query() == {"on": "1", "ratio": "0.5", "count": "7", "colour": "blue", "later": "b", "pair": "abcd"}
    assert Toy().to_query() == {} and Toy.from_query(Toy(count=2).to_query()) == (Toy(count=2), [])


def test_what_a_link_cannot_use_is_said_and_the_default_kept():
    part, problems = Toy.from_query({"on": "maybe", "ratio": "-1", "count": "0", "colour": "green", "later": "c",
                                     "pair": "abc"})
    assert part == Toy()
    assert problems == [
        "link parameter on='maybe' ignored: expected 1 or 0",
        "link parameter ratio='-1' ignored: expected a number above 0",
        "link parameter count='0' ignored: expected 1 or more",
        "link parameter colour='green' ignored: expected one of red, blue",
        "link parameter later='c' ignored: expected one of a, b",
        "link parameter pair='abc' ignored: expected an even number of characters",
    ]
    _, problems = Toy.from_query({"count": "٣", "ratio": "inf"})  # int('٣') is 3: a link's numbers are ASCII
    assert problems == ["link parameter ratio='inf' ignored: expected a number above 0",
                        "link parameter count='٣' ignored: expected a whole number"]
