"""The noise floor of an edge: how large a composition score or a path-patching effect is when nothing is there, so
that an edge is drawn (and called an edge) only above it.

**Composition** (:func:`composition_floors`). :func:`probes.effects.compose.composition_scores` scores every earlier
head onto a receiver beside random Gaussian matrices of the same shapes (mean and sd over its draws). One receiver
has m senders (hundreds in a large model), so the largest of m random-sized scores is far above the random mean: the
floor is Bonferroni's, mean + z·sd with z = Φ⁻¹(1 − α/m) (SciPy's ``norm.isf(α / m)``): were every sender a random
matrix, the chance that any one of them clears the floor is at most α (5 %), so at most about one receiver in twenty
gets a false edge. Beside it, the band where random matrices fall (mean ∓ 1.96·sd, 95 %).

**Path patching** (:func:`null_corruptions`, :func:`patch_floors`). A sender's effect through a path is measured
against the same patch from *null* corruptions: the clean text with as many tokens changed as the user's corrupted
text changes, at other positions (never one the user changed, never a special token), each replaced by another
token of the clean text itself. What a change elsewhere in the text does through the same path is what an effect
must beat. A checked sender's floor is the largest |effect| over the nulls: with 8 nulls a sender whose corruption is
no different from a null clears it with chance 1/9 (the floor is about the 89th percentile of the null effects).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..errors import BadOption
from ..seam import reader

if TYPE_CHECKING:
    from ..models import Encoding
    from ..seam import ModelLike

ALPHA = 0.05  # the chance that a receiver gets one false composition edge
RANDOM_BAND = 1.96  # random matrices' 95 % band: mean ∓ 1.96·sd
COMPOSITION_RULE = ("an edge is above its noise floor when its score exceeds what random matrices of the same shapes "
                    "score (mean) by z standard deviations, z = Φ⁻¹(1 − 0.05 ÷ m) for the m senders scored onto the "
                    "receiver (Bonferroni: were every sender random, at most 1 receiver in 20 would get one false "
                    "edge)")
NULLS = 8  # null corruptions per path-patching check (the fewest that makes the floor the 89th percentile)
CHECKED = 10  # senders checked against their floor, the largest effects first
FLOORED = ("loss", "logit_diff", "pattern_shift", "pattern_change")  # the change measures given a floor (if present)


def composition_floors(frame: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """The frame of :func:`~probes.effects.compose.composition_scores` with each score's noise floor: ``z`` (score −
    baseline_mean) ÷ baseline_sd; ``senders`` m, the senders scored onto that receiver for that kind (NaN scores, heads
    with an all-zero map, not counted); ``z_crit`` = Φ⁻¹(1 − alpha/m); ``floor`` = baseline_mean + z_crit·baseline_sd;
    ``random_low``, ``random_high`` = baseline_mean ∓ 1.96·baseline_sd (where 95 % of random matrices score);
    ``above_floor``: score > floor (False for a NaN score). A copy; the rows and their order are kept."""
    if not 0 < alpha < 1:
        raise BadOption(f"alpha={alpha}: the chance of one false edge per receiver is a number between 0 and 1 "
                        "(0.05 by default)")
    from scipy.stats import norm

    out = frame.copy()
    mean, sd = out["baseline_mean"].astype(float), out["baseline_sd"].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["z"] = (out["score"] - mean) / sd
    keys = ["receiver_layer", "receiver_head", "kind"]
    m = out.groupby(keys)["score"].transform("count").astype(int)
    out["senders"] = m
    out["z_crit"] = norm.isf(alpha / m.clip(lower=1).to_numpy(dtype=float))
    out["floor"] = mean + out["z_crit"] * sd
    out["random_low"], out["random_high"] = mean - RANDOM_BAND * sd, mean + RANDOM_BAND * sd
    out["above_floor"] = (out["score"] > out["floor"]).fillna(False).astype(bool)
    return out


def _encode(model: ModelLike, text: str | Encoding) -> Encoding:
    return model.encode(text) if isinstance(text, str) else text


def _pair(model: ModelLike, clean: str | Encoding, corrupted: str | Encoding) -> tuple[Encoding, Encoding]:
    """The two encodings, refused as :func:`probes.effects.path_patching.path_patch` refuses them when their
    lengths differ."""
    enc, enc_c = _encode(model, clean), _encode(model, corrupted)
    if enc.input_ids.shape != enc_c.input_ids.shape or enc.input_ids.shape[0] != 1:
        raise BadOption(f"path patching needs two texts of the same length in tokens: the clean one has "
                        f"{enc.input_ids.shape[-1]}, the corrupted {enc_c.input_ids.shape[-1]} on {model.name} "
                        "(change words for words of one token each)")
    return enc, enc_c


def changed_positions(model: ModelLike, clean: str | Encoding, corrupted: str | Encoding) -> list[int]:
    """The token positions where the corrupted text's ids differ from the clean text's (same length, else BadOption)."""
    enc, enc_c = _pair(model, clean, corrupted)
    return [int(i) for i in (enc.input_ids[0] != enc_c.input_ids[0]).nonzero().flatten().tolist()]


def null_corruptions(model: ModelLike, clean: str | Encoding, corrupted: str | Encoding, count: int = NULLS,
                     seed: int = 0) -> list:
    """``count`` null corruptions of ``clean`` (a text or its :class:`~probes.models.Encoding`): its encoding with as
    many tokens changed as ``corrupted`` changes (m), at m other positions chosen at random among the real,
    non-special tokens the user's corruption left alone, each replaced by a token drawn from the clean text's own real
    non-special tokens that differs from the one there (a seeded NumPy generator: the same seed gives the same
    encodings). The same patch from these texts is what a change of m tokens elsewhere in the sentence does through
    the same path: a sender's noise floor. Each null's ``tokens`` take the drawn token's readable piece (its character
    offsets are where that token sits in the clean text) and its ``texts`` the decoded ids. Nulls may repeat on a
    short text. BadOption: texts of different lengths, no changed token, ``count`` < 2, or fewer than m other
    positions to change."""
    if count < 2:
        raise BadOption(f"count={count}: a noise floor needs 2 null corruptions or more ({NULLS} by default)")
    enc, enc_c = _pair(model, clean, corrupted)
    ids = enc.input_ids[0]
    n = int(enc.attention_mask[0].sum())
    changed = set(changed_positions(model, enc, enc_c))
    if not changed:
        raise BadOption("the corrupted text has the same tokens as the clean one: change a word (for another of one "
                        "token) so that there is something to patch from")
    tokens = enc.tokens[0] if enc.tokens else []
    real = [i for i in range(n) if not (i < len(tokens) and tokens[i].special)]
    donors: dict[int, int] = {}  # each distinct real token id -> the first position holding it
    for i in real:
        donors.setdefault(int(ids[i]), i)
    if len(donors) < 2:
        raise BadOption("the clean text has one distinct token, so a null corruption has no other token of the text's "
                        "own to put in its place: use a longer text, with different words")
    others = [i for i in real if i not in changed]
    m = len(changed)
    if len(others) < m:
        raise BadOption(f"the corrupted text changes {m} token{'s' if m > 1 else ''} of {len(real)}, which leaves "
                        f"{len(others)} other token{'s' if len(others) != 1 else ''} to change for its noise floor "
                        f"(the same patch from a change elsewhere in the text): use a longer text, or change fewer "
                        "tokens")
    rng = np.random.default_rng(seed)
    pool = np.array(sorted(donors))
    nulls = []
    for _ in range(count):
        new_ids, new_tokens = enc.input_ids.clone(), list(tokens)
        for pos in sorted(int(p) for p in rng.choice(others, size=m, replace=False)):
            choices = pool[pool != int(ids[pos])]
            token = int(rng.choice(choices))
            new_ids[0, pos] = token
            if new_tokens:
                new_tokens[pos] = tokens[donors[token]]
        text = model.tokenizer.decode(new_ids[0, :n].tolist(), skip_special_tokens=True)
        nulls.append(replace(enc, input_ids=new_ids, tokens=[new_tokens] if tokens else enc.tokens, texts=[text]))
    return nulls


def patch_rule(measure: str, count: int = NULLS) -> str:
    """The path-patching floor's rule in words, for captions and the command line."""
    share = 100 * count / (count + 1)
    return (f"an effect is above its noise floor when its |{measure}| exceeds the largest |{measure}| of the same "
            f"patch from {count} corruptions of the same length that change as many tokens elsewhere in the text "
            f"(with {count} of them, about the {share:.0f}th percentile of what a change elsewhere does: a sender "
            f"that does no more than that clears it once in {count + 1})")


@dataclass
class PatchEvidence:
    """Path patching with noise floors. ``frame``: the :class:`~probes.effects.path_patching.PathPatch` frame (one
    row per sender) with ``checked`` and, for each measure of :data:`FLOORED` it has, ``<measure>_floor`` (the largest
    |effect| over the nulls), ``<measure>_null_mean`` and ``<measure>_null_sd`` (the nulls' signed effects) and
    ``<measure>_above`` (|effect| > floor); NaN and False for senders not checked. ``measure``: the ranking measure
    (``loss`` where there is one, else ``pattern_shift``); ``nulls``: how many null corruptions; ``checked``: the
    senders checked (largest effect first); ``rule``: the floor's rule in words."""

    frame: pd.DataFrame
    measure: str
    nulls: int
    seed: int
    checked: list[tuple[int, int]]
    rule: str
    result: object = field(default=None, repr=False)  # the PathPatch of the user's corruption

    @property
    def above(self) -> pd.DataFrame:
        """The checked senders whose effect is above their floor, largest effect first."""
        got = self.frame[self.frame["checked"] & self.frame[f"{self.measure}_above"]]
        return got.reindex(got[self.measure].abs().sort_values(ascending=False).index)


@reader
def patch_floors(model: ModelLike, clean: str | Encoding, corrupted: str | Encoding, receiver: tuple[int, int],
                 into: str = "k", result=None, count: int = NULLS, seed: int = 0,
                 senders: Sequence[tuple[int, int]] | None = None,
                 top: int | None = CHECKED, progress: Callable[[int, int], None] | None = None,
                 batch: int | None = None, position: int | None = None,
                 targets: tuple[int, int] | None = None) -> PatchEvidence:
    """Path patching of ``senders`` into receiver ``(layer, head)``'s ``into`` from ``corrupted`` (or ``result``, that
    :class:`~probes.effects.path_patching.PathPatch` computed already: ``senders`` is then not used), and the noise
    floor of the ``top`` largest effects (by :meth:`PathPatch.ranked`'s measure; None: every sender): the same patch
    from ``count`` :func:`null_corruptions` (``seed``), each a :func:`~probes.effects.path_patching.path_patch` of only
    the checked senders. ``batch``, ``position``, ``targets``: as in ``path_patch`` (give the user's run's, so the
    nulls measure the same thing); ``progress(done, total)``: after each null run. The null runs cost ``count`` ×
    (two passes and one pass per ``batch`` of checked senders)."""
    from ..effects.path_patching import path_patch

    nulls = null_corruptions(model, clean, corrupted, count, seed)  # bad input fails before any pass
    enc = _encode(model, clean)
    if result is None:
        result = path_patch(model, enc, corrupted, receiver, into, senders=senders, position=position,
                            targets=targets, batch=batch)
    frame = result.frame.copy()
    measure = "loss" if "loss" in frame else "pattern_shift"
    ranked = result.ranked(measure)
    picked = ranked if top is None else ranked.head(max(int(top), 0))
    checked = [(int(a), int(b)) for a, b in zip(picked["layer"], picked["head"], strict=True)]
    floored = [c for c in FLOORED if c in frame]
    effects = {c: np.full((count, len(checked)), np.nan) for c in floored}
    if checked:
        for i, null in enumerate(nulls):
            got = path_patch(model, enc, null, receiver, into, senders=checked, position=position, targets=targets,
                             batch=batch).frame.set_index(["layer", "head"]).loc[checked]
            for c in floored:
                effects[c][i] = got[c].to_numpy(dtype=float)
            if progress is not None:
                progress(i + 1, count)
    at = pd.MultiIndex.from_frame(frame[["layer", "head"]]).get_indexer(pd.MultiIndex.from_tuples(checked, names=[
        "layer", "head"])) if checked else np.array([], dtype=int)
    frame["checked"] = False
    frame.loc[frame.index[at], "checked"] = True
    for c in floored:
        null = effects[c]
        values = {"floor": np.abs(null).max(0), "null_mean": null.mean(0), "null_sd": null.std(0, ddof=1)}
        for suffix, value in values.items():
            column = np.full(len(frame), np.nan)
            column[at] = value
            frame[f"{c}_{suffix}"] = column
        frame[f"{c}_above"] = (frame[c].abs() > frame[f"{c}_floor"]).fillna(False).astype(bool)
    return PatchEvidence(frame, measure, count, int(seed), checked, patch_rule(measure, count), result)
