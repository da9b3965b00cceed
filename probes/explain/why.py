"""QK attribution in words: the sentences ``python -m probes why`` prints and Explore's "Why this weight?" shows,
made here once from the numbers and readings of :mod:`probes.effects.why` (which says none itself).

**Signs.** A term is said by what it does to the score ("raises the score by 1.47", "pushes the score down by
0.5"), and as a share of the score only when the score is positive: a share of a negative score would flip the
term's sign, so there the score is given instead ("pushes the score down by 1.47 (score -0.81)").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ..effects.why import BIAS_QK

if TYPE_CHECKING:
    from ..effects.why import BandGroup, Bucket, QKAttribution

GROUPS = {"high": "high-frequency bands {} (local position)", "middle": "middle bands {} (position across the text)",
          "low": "low-frequency bands {} (nearly position-free)", "unrotated": "unrotated dimensions {} (no position)"}


def percent(share: float) -> str:
    """A signed share as a percentage, a small one with its first digit rather than as "+0%": "+62%", "-0.03%"."""
    return f"{share:+.0%}" if abs(share) >= 0.005 or share == 0 else f"{share * 100:+.1g}%"


def pushes(value: float, score: float, amount: bool = True) -> str:
    """What a term does to the score, in words that keep its sign: "raises the score by 1.47 (+30% of 4.83)",
    "pushes the score down by 0.5 (-10% of 4.83)"; a share only of a positive score (of a negative one it would read
    with the term's sign flipped): "pushes the score down by 1.47 (score -0.81)". ``amount=False``: without the
    size ("raises the score (+30% of 4.83)"), for a line that prints the term beside it."""
    verb = "raises the score" if value >= 0 else "pushes the score down"
    size = f" by {abs(value):.3g}" if amount else ""
    of = f"{percent(value / score)} of {score:.3g}" if score > 0 else f"score {score:.3g}"
    return f"{verb}{size} ({of})"


def ranges(indices) -> str:
    """Band numbers as ranges: [0, 1, 2, 5] -> "0–2, 5"."""
    out: list[list[int]] = []
    run: list[int] = []
    for i in sorted(indices):
        if run and i != run[-1] + 1:
            out.append(run)
            run = []
        run.append(i)
    out += [run] if run else []
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in out)


def band_label(group: BandGroup) -> str:
    """A band group in words: "high-frequency bands 0–1 (local position)", "middle band 1 (position across the
    text)", "unrotated dimensions, band 2 (no position)"."""
    label = GROUPS[group.group].format(ranges(group.bands))
    if len(group.bands) == 1:
        label = label.replace("bands ", "band ", 1).replace("dimensions ", "dimensions, band ", 1)
    return label


def labelled_band_groups(why: QKAttribution) -> pd.DataFrame:
    """``why.band_groups()`` with each group's words (:func:`band_label`) as a ``label`` column after ``group``: the
    table the CLI's JSON and --bands-csv carry, and the app's list of groups."""
    frame = why.band_groups()
    frame.insert(1, "label", [band_label(g) for g in why.band_group_records()])
    return frame


def describe(part: str) -> str:
    """A part's name as words after "key 'x':"."""
    if part.endswith("embedding"):
        return f"its {part}"
    if part.startswith(("head ", "MLP ")):
        return f"the output of {part}"
    if part == "biases":
        return "the biases written into the residual stream"
    if part == BIAS_QK:
        return "the bias of its projection (and its norm's)"
    return part


def reading(why: QKAttribution) -> str:
    """Position against content in one line, the larger first (:meth:`~probes.effects.why.QKAttribution.
    position_reading`): "position (the turn by the offset, 1 token back): raises the score by 6.61 (+227% of 2.92),
    mostly through high-frequency bands 0–1 (local position): +6.16; content (q·k with no turn between them, offset
    0): pushes the score down by 3.69 (-127% of 2.92)"."""
    said = why.position_reading()
    position, content = pushes(said.position, said.score), pushes(said.content, said.score)
    if said.through is not None:
        back = abs(said.offset)
        gap = "none: the key is the query" if back == 0 else \
            f"{back} token{'s' if back > 1 else ''} {'back' if said.offset > 0 else 'ahead'}"
        halves = {"position": f"position (the turn by the offset, {gap}): {position}, mostly through "
                              f"{band_label(said.through)}: {said.through.position:+.3g}",
                  "content": f"content (q·k with no turn between them, offset 0): {content}"}
        note = ""
    else:
        halves = {"position": f"position (the position embedding's terms, with any part on either side): {position}",
                  "content": f"content (every other term): {content}"}
        note = " (positions here are a learned table, a part of the stream: there are no rotary bands)"
    order = ("position", "content") if said.leads == "position" else ("content", "position")
    return "; ".join(halves[k] for k in order) + note


def holds(bucket: Bucket, score: float) -> str:
    """What a bucket of the grid holds, in words: "1 part", or "72 parts, none above 4% of 4.83 on either side (the
    largest: head 9.3, +0.21 on the key side)" (of a score that is not positive: "none above 0.21 (score -2.03)")."""
    if bucket.parts == 1:
        return "1 part"
    value = bucket.largest_total
    bound = f"{percent(abs(value) / score)[1:]} of {score:.3g}" if score > 0 else \
        f"{abs(value):.3g} (score {score:.3g})"
    return (f"{bucket.parts} parts, none above {bound} on either side (the largest: {bucket.largest}, "
            f"{value:+.3g} on the {bucket.largest_side} side)")


def grid_caption(why: QKAttribution, n: int = 3) -> str:
    """The bucketed grid (:meth:`~probes.effects.why.QKAttribution.grid_reading`) in words: what its cells of one
    named part × one named part explain, its largest cell, and what each bucket of several parts holds
    (:func:`holds`: "heads of layers 0–7: 72 parts, none above 5% of 2.92 on either side (the largest: head 1.7,
    -0.151 on the query side)")."""
    grid, score = why.grid_reading(n), why.score
    line = (f"The cells of one named part × one named part, together: {pushes(grid.named_total, score)}; the "
            f"largest cell, {grid.largest_query} × {grid.largest_key}: {pushes(grid.largest_contribution, score)}")
    several = [b for b in grid.buckets if b.parts > 1]
    if not several:
        return line + "; every cell is one part × one part."
    return line + ". Buckets of several parts: " + "; ".join(f"{b.bucket}: {holds(b, score)}" for b in several) + "."


def sentence(why: QKAttribution, row) -> str:
    """One term (a row of ``why.top()`` or ``why.frame()``) in words: "key 'Xiaohong': the output of head 0.7 ×
    query 'she': its token embedding, raises the score by 2.1 (+49% of 4.3)" (never a share of a negative score:
    see :func:`pushes`)."""
    return (f"key {why.tokens[why.key]!r}: {describe(row.key_part)} × query {why.tokens[why.query]!r}: "
            f"{describe(row.query_part)}, {pushes(row.contribution, why.score)}")
