"""QK attribution in words (probes.explain.why), from probes.effects.why's numbers: a term reads by what it does to
the score, a share only of a positive score (a negative score's terms read as pushes, never as a share); position
against content reads the larger first, through the band group or the position embedding that carries it; the grid's
caption names its largest cell and says what every bucket of several parts holds; a band group reads as its bands'
ranges. The numbers themselves are tests/effects/test_why.py's."""

import math

import pytest

from probes.effects.why import BIAS_QK, BandGroup, Bucket, qk_attribution
from probes.explain.why import (
    band_label,
    describe,
    grid_caption,
    holds,
    labelled_band_groups,
    percent,
    pushes,
    ranges,
    reading,
    sentence,
)

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry."
TALKS = "The president called for new talks with Iran."  # smollm2's previous-token head 16.0 on " talks" → " new"


def group(name: str, bands: tuple[int, ...]) -> BandGroup:
    return BandGroup(name, bands, 6.28, 6.28, 1.0, 0.5, 0.5)


def test_signs_shares_and_ranges_in_words():
    assert pushes(1.47, 4.83) == "raises the score by 1.47 (+30% of 4.83)"
    assert pushes(-0.5, 4.83) == "pushes the score down by 0.5 (-10% of 4.83)"
    assert pushes(-1.47, -0.81) == "pushes the score down by 1.47 (score -0.81)"  # no share of a negative score
    assert pushes(1.47, 4.83, amount=False) == "raises the score (+30% of 4.83)"
    assert (percent(0.62), percent(-0.0003), percent(0.0)) == ("+62%", "-0.03%", "+0%")  # a small share keeps a digit
    assert ranges([5, 0, 1, 2]) == "0–2, 5" and ranges([3]) == "3"
    assert band_label(group("high", (0, 1))) == "high-frequency bands 0–1 (local position)"
    assert band_label(group("middle", (1,))) == "middle band 1 (position across the text)"
    assert band_label(group("low", (13, 14, 15))) == "low-frequency bands 13–15 (nearly position-free)"
    assert band_label(group("unrotated", (2,))) == "unrotated dimensions, band 2 (no position)"
    assert [describe(p) for p in ("token embedding", "head 0.7", "MLP 3", "biases", BIAS_QK)] == [
        "its token embedding", "the output of head 0.7", "the output of MLP 3",
        "the biases written into the residual stream", "the bias of its projection (and its norm's)"]


def test_a_bucket_says_how_many_parts_it_holds_and_its_largest():
    lump = Bucket("heads of layers 0–7", 72, 0.3, 0.1, "head 9.3", 0.21, "key")
    assert holds(lump, 4.83) == "72 parts, none above 4% of 4.83 on either side (the largest: head 9.3, +0.21 on the " \
                                "key side)"
    assert holds(lump, -2.03) == "72 parts, none above 0.21 (score -2.03) on either side (the largest: head 9.3, " \
                                 "+0.21 on the key side)"
    assert holds(Bucket("MLP 0", 1, 0.3, 0.1, "MLP 0", 0.3, "query"), 4.83) == "1 part"


@pytest.mark.numeric
def test_a_term_reads_as_its_key_and_query_parts_and_what_it_does(minilm64):
    why = qk_attribution(minilm64, SHE, 1, 2, 10, 7)
    row = why.top(1).iloc[0]
    line = sentence(why, row)
    assert line.startswith("key 'xiao': ") and " × query 'she': " in line
    assert line.endswith(f", raises the score by {row.contribution:.3g} (+{row.contribution / why.score:.0%} of "
                         f"{why.score:.3g})")


@pytest.mark.numeric
def test_a_planted_rotary_previous_token_head_reads_as_position_from_high_frequency_bands(planted_rotary):
    model, text = planted_rotary
    previous = qk_attribution(model, text, 0, 0, 9, 8)  # head 0.0: constant q and k, only the turn tells keys apart
    said = reading(previous)
    assert said.startswith("position (the turn by the offset, 1 token back): raises the score by")
    assert "mostly through high-frequency band 0 (local position)" in said.split("; content")[0]
    match = qk_attribution(model, text, 0, 1, 9, 3)  # head 0.1 matches the token in the slow bands
    assert reading(match).startswith("content (q·k with no turn between them")


@pytest.mark.numeric
def test_minilm_story_head_reads_as_position_through_its_position_embedding(minilm64):
    said = reading(qk_attribution(minilm64, SHE, 1, 2, 10, 7))
    assert said.startswith("position (the position embedding's terms") and "no rotary bands" in said


@pytest.mark.numeric
def test_a_negative_score_reads_as_pushes_never_as_a_share(minilm64):
    why = qk_attribution(minilm64, SHE, 1, 2, 10, 2)  # "she" on "##ming": a negative score
    assert why.score < 0
    said = [sentence(why, row) for row in why.top(10).itertuples()] + [reading(why), grid_caption(why)]
    assert all("%" not in line for line in said)
    for row in why.top(10).itertuples():
        verb = "raises the score by" if row.contribution > 0 else "pushes the score down by"
        assert sentence(why, row).endswith(f"{verb} {abs(row.contribution):.3g} (score {why.score:.3g})")
    # and a positive score keeps its shares, signed as the term is
    positive = qk_attribution(minilm64, SHE, 1, 2, 10, 7)
    lowering = positive.top(5).query("contribution < 0").iloc[0]
    assert sentence(positive, lowering).endswith(f"pushes the score down by {-lowering.contribution:.3g} "
                                                 f"({lowering.contribution / positive.score:+.0%} of "
                                                 f"{positive.score:.3g})")


@pytest.mark.numeric
def test_the_grid_caption_says_what_each_bucket_holds(minilm64, planted_rotary, smollm2):
    model, text = planted_rotary
    for why in (qk_attribution(minilm64, SHE, 1, 2, 10, 7), qk_attribution(minilm64, SHE, 4, 0, 10, 2),
                qk_attribution(model, text, 1, 1, 9, 3), qk_attribution(smollm2, SHE, 15, 7, 11, 9)):
        grid, buckets, caption = why.grid(3), why.buckets(3), grid_caption(why, 3)
        for row in buckets[buckets.parts > 1].itertuples():  # no lump is silent
            assert f"{row.bucket}: {row.parts} parts, none above " in caption
        big = grid.loc[grid.contribution.abs().idxmax()]
        assert f"the largest cell, {big.query_part} × {big.key_part}: " in caption
    # smollm2 (30 layers): heads and MLPs in bands of 8 layers, each lump named and counted
    assert "heads of layers 0–7: 72 parts" in grid_caption(why, 3)
    one = qk_attribution(model, text, 0, 1, 9, 3)  # layer 0 reads the embeddings alone: every cell one part × one
    assert grid_caption(one).endswith("; every cell is one part × one part.")


@pytest.mark.numeric
def test_smollm2_previous_token_head_reads_as_position_and_its_story_head_as_content(smollm2):
    query = [t.text for t in smollm2.encode(TALKS).tokens[0]].index(" talks")
    why = qk_attribution(smollm2, TALKS, 16, 0, query, query - 1)
    assert reading(why).startswith("position (the turn by the offset, 1 token back)")
    assert "mostly through high-frequency band 0 (local position)" in reading(why)
    assert reading(qk_attribution(smollm2, SHE, 15, 7, 11, 9)).startswith("content")  # " she" on "ong"
    groups = labelled_band_groups(why)  # the table the CLI's JSON and --bands-csv carry: the numbers, and the words
    assert list(groups.columns) == ["group", "label", *why.band_groups().columns[1:]]
    assert groups.drop(columns="label").equals(why.band_groups())
    assert list(groups.label) == ["high-frequency band 0 (local position)",
                                  "middle bands 1–12 (position across the text)",
                                  "low-frequency bands 13–31 (nearly position-free)"]
    assert not math.isnan(groups.share[0])  # a positive score: shares
