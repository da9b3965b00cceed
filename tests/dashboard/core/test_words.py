"""The app's words for identifiers, and numbers for people (dashboard/words.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dashboard.core import words
from probes.effects.measures import ABOUT
from probes.heads.patterns import CLASSES
from probes.heads.positional import PROFILE


def test_every_measure_and_probe_label_is_said_in_words():
    assert words.said("token_change") == "change of the query token"
    assert words.said("loss") == "loss on the text"
    assert all(words.said(m) != m for m in ABOUT)  # every measure an ablation shows
    assert words.said("offset-1").startswith("previous token") and words.said("offset+1").startswith("next token")
    assert words.said("offset-1") != words.said("previous")  # one menu holds both: told apart
    assert {words.said(f"offset{o:+d}") for o in PROFILE if o} == {
        "previous token (1 token back)", "next token (1 token ahead)",
        *(f"{n} tokens {way}" for n in range(2, 6) for way in ("back", "ahead"))}
    assert words.said("mean_attention") == "mean attention" and words.said("sink").startswith("attention sink")
    assert words.said("vertical+diagonal") == "vertical and diagonal" and all("_" not in words.said(c) for c in CLASSES)
    assert words.said("nsubj (dep→head)") == "nsubj, nominal subject (dependent → head)"  # the relation stays
    assert words.said("a label nobody knows") == "a label nobody knows"  # shown as it is


def test_sources_and_backends_are_said_in_words():
    assert words.said("hf vs scratch/eager") == "Hugging Face vs ours (eager)"
    assert words.versus("hf", "scratch/sdpa") == "Hugging Face vs ours (sdpa)"
    assert words.opening("hf") == "Hugging Face" and words.opening("loss") == "Loss on the text"


def test_a_difference_of_zero_is_identical_and_bytes_are_sizes():
    assert words.difference(0.0) == "0 (identical)" and words.difference(None) == "n/a"
    assert words.difference(1.5e-7) == "1.5e-07" and words.difference(2e-12, 0) == "2e-12"
    assert words.size(512) == "512 bytes" and words.size(599_040) == "585 KiB"
    assert words.size(1_794_048) == "1.71 MiB" and words.size(3 * 2**30) == "3 GiB"


def test_a_readable_table_drops_constant_columns_fills_blanks_and_names_columns_in_words():
    frame = pd.DataFrame({"probe": ["positional"] * 3, "label": ["offset-1"] * 3, "layer": [0, 0, 1],
                          "head": [0, 1, 0], "score": [0.1, 0.2, np.nan], "offset": [None, 1, None],
                          "mean_attention": [np.nan] * 3, "attention_bytes": [100, 5000, 2**21]})
    shown, constant = words.readable(frame)
    assert constant == {"probe": "positional", "label": "offset-1"}  # said once above the table
    assert list(shown.columns) == ["layer", "head", "score", "most attended offset", "attention held"]
    assert list(shown["score"]) == ["0.1", "0.2", "—"] and list(shown["most attended offset"]) == ["—", "1", "—"]
    assert list(shown["attention held"]) == ["100 bytes", "4.88 KiB", "2 MiB"]
    assert "None" not in shown.astype(str).to_numpy() and "nan" not in shown.astype(str).to_numpy()
    assert list(frame.columns)[:2] == ["probe", "label"]  # the frame itself (its CSV) keeps every raw column
    one, kept = words.readable(frame.iloc[:1])
    assert kept == {} and "probe" in one.columns  # a single row: nothing is "the same in every row"
