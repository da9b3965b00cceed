"""The corpus run: statistics read from the same Traces as the positional probe, split-invariant, resumable,
several models in one table, bad rows reported."""

import json

import pandas as pd
import pytest
from numeric import F64

import probes
from probes import runner
from probes.corpus import run as corpus_run
from probes.corpus.reader import Corpus
from probes.errors import BadData
from probes.heads.positional import positional_scores

SENTENCES = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "The cat sat on the mat, and it slept.",
             "Colourless green ideas sleep furiously.", "A long text that runs on and on, " * 12,
             "Why? Because!", "She said: the weights were bit-identical."]


def _corpus(tmp_path, lines=SENTENCES, name="c.txt") -> Corpus:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return Corpus(str(path))


def _close(a: pd.DataFrame, b: pd.DataFrame):
    """Two tables of a float64 model agree to float64 rounding, at each column's scale (distances count
    tokens and entropies nats, not fractions)."""
    keys = ["model", "label", "layer", "head"]
    a, b = a.set_index(keys).sort_index(), b.set_index(keys).sort_index()
    assert a.index.equals(b.index)
    assert (a["n"] == b["n"]).all()
    for col in ("score", "baseline"):
        assert ((a[col] - b[col]).abs().fillna(0) <= F64 * max(1.0, a[col].abs().max())).all(), col


@pytest.mark.numeric
def test_one_text_scores_exactly_as_the_positional_probe_reads_its_trace(tmp_path, minilm64):
    text = SENTENCES[0]
    table, _ = corpus_run.profile_corpus([minilm64], _corpus(tmp_path, [text]), tmp_path / "t.csv", window=64)
    direct = positional_scores([runner.trace(minilm64, text, source="auto")], probe="corpus")
    got = table.set_index(["label", "layer", "head"]).sort_index()
    want = direct.set_index(["label", "layer", "head"]).sort_index()
    assert (got["score"] - want["score"]).abs().max() <= F64 * max(1.0, want["score"].abs().max())  # float64
    assert set(table["model"]) == {"minilm"} and set(table["n_heads"]) == {12} and set(table["n_layers"]) == {6}
    stats = {"entropy", "distance", "sink", "previous", "self", "special", "punctuation", "fixed offset"}
    assert stats <= set(table.label)


@pytest.mark.numeric
def test_the_result_does_not_depend_on_the_chunking(tmp_path, minilm64):
    corpus = _corpus(tmp_path)  # in float64: other chunks, other batches and padding, other sums
    one, ex_one = corpus_run.profile_corpus([minilm64], corpus, tmp_path / "a.csv", window=24, chunk_size=1, k=5)
    all_, ex_all = corpus_run.profile_corpus([minilm64], corpus, tmp_path / "b.csv", window=24, chunk_size=100, k=5)
    _close(one, all_)
    assert ex_one.drop(columns="weight").equals(ex_all.drop(columns="weight"))
    assert (ex_one["weight"] - ex_all["weight"]).abs().max() <= F64  # probabilities
    # what was written is what was returned, and the checkpoint folder is gone
    _close(pd.read_csv(tmp_path / "a.csv"), one)
    assert pd.read_parquet(tmp_path / "a.examples.parquet").equals(ex_one)
    assert not (tmp_path / "a.csv.partial").exists()


@pytest.mark.numeric
def test_top_examples_point_at_their_text_and_are_the_heads_strongest(tmp_path, minilm64):
    corpus = _corpus(tmp_path)
    _, found = corpus_run.profile_corpus([minilm64], corpus, tmp_path / "t.csv", window=24, chunk_size=2, k=3)
    assert (found.groupby(["layer", "head"])["rank"].max() <= 3).all()
    lines = dict(enumerate(SENTENCES, start=1))
    for row in found.sample(20, random_state=0).itertuples():
        assert row.context in lines[row.text_id]  # the window's text, from the right line
        assert row.context[row.query_start:row.query_end].lower().startswith(row.query_token.lstrip("#")[:1].lower())
    # a head's first example is its strongest non-special attention anywhere in the corpus (in float64: the
    # text alone here, batched with another there)
    trace = runner.trace(minilm64, SENTENCES[0], source="auto")
    best = found[(found.layer == 0) & (found["head"] == 2)].iloc[0]
    attn = trace.attention(0, 2)[:, 1:-1]  # without [CLS]/[SEP] as keys
    if best.text_id == 1:
        assert best.weight == pytest.approx(float(attn.max()), abs=F64, rel=0)
    assert best.weight >= float(attn.max()) - F64


@pytest.mark.numeric
def test_an_interrupted_run_resumes_without_recomputing_done_chunks(tmp_path, minilm64):
    corpus = _corpus(tmp_path)
    out = tmp_path / "t.csv"

    class Stop:
        def __init__(self, total, name):
            self.done = 0

        def update(self, n):
            self.done += n
            if self.done >= 2:
                raise KeyboardInterrupt

        def close(self):
            pass

    with pytest.raises(KeyboardInterrupt):
        corpus_run.profile_corpus([minilm64], corpus, out, window=24, chunk_size=2, progress_factory=Stop)
    assert len(list((tmp_path / "t.csv.partial").glob("*/chunk-*.csv"))) == 2
    ran: list[int] = []

    def counting(model, jobs):
        ran.extend(job.index for job in jobs)
        yield from corpus_run.in_process(model, jobs)

    resumed, _ = corpus_run.profile_corpus([minilm64], corpus, out, window=24, chunk_size=2, executor=counting)
    assert ran == [2]  # chunks 0 and 1 were done
    fresh, _ = corpus_run.profile_corpus([minilm64], corpus, tmp_path / "fresh.csv", window=24, chunk_size=2)
    _close(resumed, fresh)


def test_a_checkpoint_from_another_corpus_or_window_is_not_reused(tmp_path, minilm):
    corpus = _corpus(tmp_path)
    out = tmp_path / "t.csv"
    partial = tmp_path / "t.csv.partial"
    with pytest.raises(KeyboardInterrupt):
        corpus_run.profile_corpus([minilm], corpus, out, window=24, chunk_size=2,
                                  executor=lambda model, jobs: _stop_after_one(model, jobs))
    notes: list[str] = []
    corpus_run.profile_corpus([minilm], corpus, out, window=32, chunk_size=2, notify=notes.append)
    assert any("another options" in n for n in notes) and not partial.exists()
    with pytest.raises(KeyboardInterrupt):
        corpus_run.profile_corpus([minilm], corpus, out, window=24, chunk_size=2,
                                  executor=lambda model, jobs: _stop_after_one(model, jobs))
    corpus = _corpus(tmp_path, SENTENCES[::-1])
    notes.clear()
    corpus_run.profile_corpus([minilm], corpus, out, window=24, chunk_size=2, notify=notes.append)
    assert any("another data" in n for n in notes)


def _stop_after_one(model, jobs):
    yield from corpus_run.in_process(model, jobs[:1])
    raise KeyboardInterrupt


@pytest.mark.numeric
def test_a_checkpoint_made_with_another_tokenizer_is_not_reused(tmp_path, gpt2_dir):
    """Issue 40: "she" and "he" swap ids in the model's tokenizer.json between an interrupted run and its rerun
    (config and weights unchanged): the rerun says so, starts afresh, and gives a fresh run's table."""
    import shutil

    import torch
    from checkpoints import swap_tokens

    from probes.models import load  # probes.load's model here, whose .cast the test needs

    folder = tmp_path / "gpt2"
    shutil.copytree(gpt2_dir, folder)
    corpus = _corpus(tmp_path, ["She said that he would come back tomorrow morning.",
                                "He sat on the mat, and she watched him from the door."] * 3)
    out = tmp_path / "t.csv"
    before = load(str(folder)).cast(torch.float64)
    with pytest.raises(KeyboardInterrupt):
        corpus_run.profile_corpus([before], corpus, out, window=24, chunk_size=2,
                                  executor=lambda model, jobs: _stop_after_one(model, jobs))
    swap_tokens(folder, "Ġhe", "Ġshe")
    after = load(str(folder)).cast(torch.float64)
    notes: list[str] = []
    resumed, _ = corpus_run.profile_corpus([after], corpus, out, window=24, chunk_size=2, notify=notes.append)
    assert any("was computed with another tokenizer: starting afresh" in n for n in notes), notes
    fresh, _ = corpus_run.profile_corpus([after], corpus, tmp_path / "fresh.csv", window=24, chunk_size=2)
    _close(resumed, fresh)


def test_several_models_make_one_table_and_one_examples_file(tmp_path, minilm, gpt2_dir):
    gpt2 = probes.load(str(gpt2_dir))
    table, found = corpus_run.profile_corpus([minilm, gpt2], _corpus(tmp_path), tmp_path / "t.parquet", window=32)
    assert set(table["model"]) == {"minilm", str(gpt2_dir)}
    for model in (minilm, gpt2):
        rows = table[(table.model == model.name) & (table.label == "entropy")]
        assert len(rows) == model.n_layers * model.n_heads
        assert set(found[found.model == model.name]["layer"]) == set(range(model.n_layers))
    gpt2_first = table[(table.model == gpt2.name) & (table.label == "sink")]
    minilm_first = table[(table.model == "minilm") & (table.label == "sink")]
    assert (gpt2_first["baseline"] > minilm_first["baseline"].iloc[0]).all()  # a causal query sees fewer keys
    assert pd.read_parquet(tmp_path / "t.parquet").shape == table.shape


def test_bad_rows_are_reported_with_their_line_and_strict_stops(tmp_path, minilm):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join([json.dumps({"text": SENTENCES[0]}), "{oops", json.dumps({"text": SENTENCES[1]})]) + "\n")
    notes: list[str] = []
    table, _ = corpus_run.profile_corpus([minilm], Corpus(str(path)), tmp_path / "t.csv", notify=notes.append)
    assert "c.jsonl line 2: not JSON" in notes[0]
    assert "c.jsonl line 2: not JSON" in (tmp_path / "t.csv.bad.txt").read_text()
    assert table[table.label == "entropy"]["n"].iloc[0] > 0
    with pytest.raises(BadData, match=r"(?s)1 bad item.*line 2"):
        corpus_run.profile_corpus([minilm], Corpus(str(path)), tmp_path / "s.csv", strict=True)
    empty = tmp_path / "e.txt"
    empty.write_text("\n\n")
    with pytest.raises(BadData, match="no usable items"):
        corpus_run.profile_corpus([minilm], Corpus(str(empty)), tmp_path / "e.csv")


@pytest.mark.numeric
def test_a_long_window_runs_lazily_and_scores_as_an_eager_one(tmp_path, minilm64):
    corpus = _corpus(tmp_path, [" ".join(SENTENCES * 3)])
    eager, ex_e = corpus_run.profile_corpus([minilm64], corpus, tmp_path / "a.csv", window=256)
    budget = corpus_run.ATTENTION_BUDGET
    try:
        corpus_run.ATTENTION_BUDGET = 1  # every batch over budget: lazy Traces
        lazy, ex_l = corpus_run.profile_corpus([minilm64], corpus, tmp_path / "b.csv", window=256)
    finally:
        corpus_run.ATTENTION_BUDGET = budget
    _close(eager, lazy)
    assert (ex_e["weight"] - ex_l["weight"]).abs().max() <= F64  # probabilities, recovered from the logsumexp
