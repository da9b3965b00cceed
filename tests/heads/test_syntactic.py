from probes import runner
from probes.datasets.catalog import texts
from probes.datasets.dependencies import DepSentence, ewt
from probes.heads.engine import top_heads
from probes.heads.syntactic import dependency_sentence, syntactic_scores


def test_pairs_in_both_directions():
    s = dependency_sentence(DepSentence("x", ["The", "cat", "sat"], [2, 3, 0], ["det", "nsubj:pass", "root"]))
    assert [(p.query, p.target, p.label) for p in s.pairs] == [
        (0, 1, "det (dep→head)"), (1, 0, "det (head→dep)"),
        (1, 2, "nsubj (dep→head)"), (2, 1, "nsubj (head→dep)")]


def test_offline_default_on_ewt_dev_beats_the_offset_baseline(minilm):
    sentences = ewt("dev")[:40]
    frame = syntactic_scores(sentences, runner.batches(minilm, texts(sentences)))
    best = top_heads(frame, 1).set_index("label")
    # measured on these 40 dev sentences: "case" dependents find their head with head 1.7 at 0.65
    # against 0.33 for the best fixed offset; "det" with head 2.8 at 0.78 against 0.53
    for label in ("case (dep→head)", "det (dep→head)"):
        row = best.loc[label]
        assert row["n"] >= 90 and row["score"] >= row["baseline"] + 0.15, (label, row)
