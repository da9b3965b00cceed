import json
from pathlib import Path

import pytest

import probes
from probes.cost import HF, LAZY, load_benchmark, measure, quadratic_fit
from probes.errors import BadData, InputTooLong

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "long_inputs.json"


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_measure_reads_the_bytes_off_both_traces(family, gpt2_model, bert_dir):
    model = gpt2_model if family == "gpt2" else probes.load(str(bert_dir))
    table = measure(model, [8, 16], repeats=2)
    assert list(table.columns) == ["tokens", "path", "seconds", "attention_bytes"]
    assert sorted(zip(table.tokens, table.path)) == [(8, HF), (8, LAZY), (16, HF), (16, LAZY)]
    assert (table.seconds > 0).all()
    heads = model.n_layers * model.n_heads  # 2 × 4
    for row in table.itertuples():
        per_head = row.tokens ** 2 if row.path == HF else row.tokens  # L×L probabilities or L logsumexps
        assert row.attention_bytes == heads * per_head * 4  # fp32


def test_measure_refuses_lengths_beyond_the_context_window(gpt2_model):
    with pytest.raises(InputTooLong, match="65 tokens .* at most 64"):
        measure(gpt2_model, [8, 65])


def test_quadratic_fit_recovers_c():
    tokens = [512, 1024, 2048, 4096]
    assert quadratic_fit(tokens, [576.0 * n * n for n in tokens]) == 576.0
    assert quadratic_fit([2, 4], [4, 16 * 3]) == pytest.approx((4 * 4 + 16 * 48) / (16 + 256))
    with pytest.raises(ValueError, match="at least one"):
        quadratic_fit([], [])


def test_load_benchmark_reads_the_committed_runs():
    runs = json.loads(RESULTS.read_text())
    table = load_benchmark(RESULTS)
    assert list(table.columns) == ["tokens", "path", "seconds", "attention_bytes", "peak_bytes"]
    lazy, hf = table[table.path == LAZY], table[table.path == HF]
    assert list(lazy.tokens) == [r["tokens"] for r in runs]
    assert list(hf.tokens) == [r["tokens"] for r in runs if r["hf_seconds"] is not None]  # 8,192 was not run
    assert len(hf) < len(lazy)
    first = runs[0]
    row = hf.iloc[0]
    assert (row.seconds, row.attention_bytes, row.peak_bytes) == (first["hf_seconds"], first["attention_bytes"],
                                                                  first["hf_peak"])
    assert lazy.iloc[0].attention_bytes == 12 * 12 * first["tokens"] * 4  # one fp32 logsumexp per row and head
    assert quadratic_fit(hf.tokens, hf.attention_bytes) == pytest.approx(12 * 12 * 4)


@pytest.mark.parametrize("content", ["[{\"tokens\": 512", "[{\"tokens\": 512}]", "{\"tokens\": 512}"])
def test_load_benchmark_names_a_malformed_file(tmp_path, content):
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(BadData, match="broken.json"):
        load_benchmark(path)
