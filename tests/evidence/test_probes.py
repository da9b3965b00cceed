"""Every probe label's best head, chosen on one half of the items and judged on the other (profile, the app)."""

from __future__ import annotations

import pandas as pd
import pytest
from numeric import F64

from probes.cli import main
from probes.evidence import probes as judged
from probes.evidence.stats import split_half
from probes.heads import profile as prof
from probes.heads.registry import get

KEYS = ["probe", "label", "layer", "head"]


def _by_key(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(label=frame["label"].astype(str)).set_index(KEYS).sort_index()


@pytest.mark.numeric
@pytest.mark.parametrize("probe", ["syntactic", "positional"])
def test_the_halves_combine_into_the_whole_table_and_each_half_is_its_own_items(minilm64, probe):
    """float64: the table over all the items (the two halves' chunks combined) is the unsplit run's; each head's
    selection_score is its score on the chosen half's items alone, heldout_score on the judged half's."""
    table = judged.run_probe(minilm64, probe, 40)
    plain = prof.run_probe(minilm64, probe, 40)
    a, b = _by_key(table), _by_key(plain)
    assert a.index.equals(b.index)
    for col in ("score", "baseline", "n"):
        assert ((a[col] - b[col]).abs().fillna(0) <= F64 * max(1.0, b[col].abs().max())).all(), col
    record = get(probe)
    items = record.items(None, 40)
    split = split_half(len(items), 0)
    for column, half in (("selection_score", split.chosen_on), ("heldout_score", split.judged_on)):
        subset = [items[i] for i in half]
        alone = _by_key(record.combine([prof.run_chunk(record, minilm64, subset)], subset))
        got = a.loc[alone.index, column]
        assert ((got - alone["score"]).abs() <= F64 * max(1.0, alone["score"].abs().max())).all(), column
    assert (table["split_seed"] == 0).all()
    chosen = judged.verdicts(table)
    seen = {str(x) for x in table.loc[table["selection_score"].notna(), "label"]}  # labels the chosen half has
    assert set(chosen["label"]) == {x for x in seen if record.judged(x) is not None}
    assert len(chosen) == len(set(chosen["label"]))  # one head a label


def test_the_chosen_head_is_the_best_of_the_chosen_half_not_of_all_items(minilm):
    table = judged.run_probe(minilm, "syntactic", 60)
    for row in judged.verdicts(table).itertuples():
        rows = table[table["label"].astype(str) == row.label]
        best = rows.loc[(rows["selection_score"] - rows["baseline"]).idxmax()]
        assert (best["layer"], best["head"]) == (row.layer, row.head)


def test_a_mean_label_is_judged_by_a_bootstrap_over_items(minilm):
    """positional's "previous": a mean over tokens, its interval resampled over the 40 judged sentences."""
    table = judged.run_probe(minilm, "positional", 80)
    prev = judged.verdicts(table).set_index("label").loc["previous"]
    assert prev["verdict"] == "supported" and int(prev["heldout_n"]) == 40
    assert prev["heldout_low"] < prev["heldout_score"] < prev["heldout_high"] <= 1.0
    assert prev["heldout_low"] > prev["baseline_heldout"]
    entropy = table[table["label"].astype(str) == "entropy"]
    assert not entropy["chosen"].any()  # a description, not a claim: never judged


@pytest.mark.parametrize("model, relation", [("minilm", "det (dep→head)"), ("smollm2", "det (head→dep)")])
def test_det_is_supported_on_held_out_ewt_sentences(request, model, relation):
    """The project's data (UD English-EWT test): the determiner relation, in the direction each model can attend
    (a decoder's noun looks back at its determiner), has a head that beats the best fixed offset held out. On 100
    sentences (98 det pairs held out): interval's low end 0.68 (minilm) and 0.71 (smollm2) against the offset's 0.50;
    on 200, 0.72 and 0.71 against 0.48: the same verdicts, for more time."""
    m = request.getfixturevalue(model)
    chosen = judged.verdicts(judged.run_probe(m, "syntactic", 100, data="ewt-test")).set_index("label")
    assert chosen.loc[relation, "verdict"] == "supported"
    assert chosen.loc[relation, "heldout_low"] > chosen.loc[relation, "baseline_heldout"]


def test_a_relation_at_its_offset_baseline_is_not_supported(minilm):
    """amod on minilm: the best head of the chosen half sits at the fixed offset's score on the other half."""
    chosen = judged.verdicts(judged.run_probe(minilm, "syntactic", 500)).set_index("label")
    for relation in ("amod (dep→head)", "amod (head→dep)"):
        assert chosen.loc[relation, "verdict"] == "baseline"
        assert chosen.loc[relation, "said"].startswith("no better than the best fixed offset of the other half")


@pytest.mark.numeric
def test_profile_writes_the_verdicts_resumes_each_half_and_prints_them(minilm, tmp_path, capsys, monkeypatch):
    out = tmp_path / "syn.csv"
    assert main(["profile", "--model", "minilm", "--probe", "syntactic", "--limit", "40", "--out", str(out),
                 "--checkpoint-every", "8", "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "held out (split seed 3): each label's head chosen on one half of the items, judged on the other" in printed
    table = pd.read_csv(out)
    for col in judged.COLUMNS:
        assert col in table.columns, col
    assert (table["split_seed"] == 3).all()
    chosen = judged.verdicts(table)
    assert len(chosen) == table.loc[table["selection_score"].notna(), "label"].nunique()
    assert set(chosen["verdict"]) <= {"supported", "baseline", "too few"}
    line = next(x for x in printed.splitlines() if x.strip().startswith("det (dep→head)"))
    row = chosen.set_index("label").loc["det (dep→head)"]
    assert f"{int(row['layer'])}.{int(row['head'])}" in line and line.rstrip().endswith(row["verdict"])
    # a rerun after an interrupt in the judged half recomputes only what was not written
    calls: list[int] = []  # each chunk's items
    real = prof.run_chunk

    def counting(*args, **kwargs):
        calls.append(len(args[2]))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(prof, "run_chunk", counting)
    again = tmp_path / "again.csv"
    with pytest.raises(KeyboardInterrupt):
        judged.profile(minilm, ["syntactic"], None, 40, again, seed=3, checkpoint_every=8)
    calls.clear()

    def counted(*args, **kwargs):
        calls.append(len(args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(prof, "run_chunk", counted)
    judged.profile(minilm, ["syntactic"], None, 40, again, seed=3, checkpoint_every=8)
    assert calls == [8, 8, 4]  # the chosen half's three chunks (20 items) were written before: only the judged half
    pd.testing.assert_frame_equal(pd.read_csv(again), pd.read_csv(out), check_exact=True)  # the same table
