"""probes.jobs: the bounds on a probe table read back for the app."""

from __future__ import annotations

import pytest

from probes import jobs


def million_rows(n: int = 1_000_000) -> bytes:
    """A probe table of ``n`` rows for a 6-layer, 12-head model: every head of about n / 72 labels."""
    return ("label,layer,head,score\n" + "".join(f"label-{i // 72},{(i % 72) // 12},{i % 12},0.{i % 9973:04d}\n"
                                                for i in range(n))).encode()


def test_a_million_row_table_is_read_and_two_million_and_one_are_refused_naming_the_count():
    frame = jobs.read_table(million_rows(), "big.csv", n_layers=6, n_heads=12)
    assert len(frame) == 1_000_000 and frame["label"].nunique() == 13_889
    over = b"label,layer,head,score\n" + b"x,0,0,0.5\n" * 2_000_001
    with pytest.raises(jobs.BadData, match="big.csv: 2,000,001 rows, more than the 2,000,000 a table shown here"):
        jobs.read_table(over, "big.csv")
