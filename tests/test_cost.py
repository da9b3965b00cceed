import json
from pathlib import Path

import pytest
from numeric import EPS64

import probes
from probes.cost import HF, LAZY, load_benchmark, measure, quadratic_fit
from probes.errors import BadData, InputTooLong
from probes.models import load

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "long_inputs.json"


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_measure_reads_the_bytes_off_both_traces(family, gpt2_model, bert_dir):
    model = gpt2_model if family == "gpt2" else load(str(bert_dir))  # measure times a model loaded here
    table = measure(model, [8, 16], repeats=2)
    assert list(table.columns) == ["tokens", "path", "seconds", "attention_bytes"]
    assert sorted(zip(table.tokens, table.path, strict=True)) == [(8, HF), (8, LAZY), (16, HF), (16, LAZY)]
    assert (table.seconds > 0).all()
    heads = model.n_layers * model.n_heads  # 2 × 4
    for row in table.itertuples():
        per_head = row.tokens ** 2 if row.path == HF else row.tokens  # L×L probabilities or L logsumexps
        assert row.attention_bytes == heads * per_head * 4  # fp32


def test_measure_refuses_lengths_beyond_the_context_window(gpt2_model):
    with pytest.raises(InputTooLong, match="65 tokens .* at most 64"):
        measure(gpt2_model, [8, 65])


@pytest.mark.numeric
def test_quadratic_fit_recovers_c():
    tokens = [512, 1024, 2048, 4096]
    assert quadratic_fit(tokens, [576.0 * n * n for n in tokens]) == 576.0
    # least squares through the origin on two points: a few float64 operations on small integers
    assert quadratic_fit([2, 4], [4, 16 * 3]) == pytest.approx((4 * 4 + 16 * 48) / (16 + 256), rel=8 * EPS64, abs=0)
    with pytest.raises(ValueError, match="at least one"):
        quadratic_fit([], [])


@pytest.mark.numeric
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
    # exact data
    assert quadratic_fit(hf.tokens, hf.attention_bytes) == pytest.approx(12 * 12 * 4, rel=8 * EPS64, abs=0)


@pytest.mark.parametrize("content", ["[{\"tokens\": 512", "[{\"tokens\": 512}]", "{\"tokens\": 512}"])
def test_load_benchmark_names_a_malformed_file(tmp_path, content):
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(BadData, match="broken.json"):
        load_benchmark(path)


# -- generation: the KV cache --------------------------------------------------------------------------

def test_kv_cache_formula_matches_the_cache_and_counts_windows(gpt2_model, ckpt_dir):
    from checkpoints import make_llama

    from probes.cost import CACHED, RECOMPUTE, kv_cache_bytes, measure_decoding

    frame = measure_decoding(gpt2_model, [8, 16], steps=3, repeats=1)
    assert list(frame.path) == [CACHED, RECOMPUTE] * 2
    cached = frame[frame.path == CACHED]
    assert list(cached.cache_bytes) == list(cached.formula_bytes) == [2 * 2 * 4 * 8 * n * 4 for n in (8, 16)]
    assert (frame.seconds_per_token > 0).all() and frame[frame.path == RECOMPUTE].cache_bytes.isna().all()
    mistral = probes.load(str(make_llama(ckpt_dir / "mistral-cost", family="mistral", sliding_window=4)))
    assert kv_cache_bytes(mistral, 3) == 2 * 2 * 2 * 8 * 3 * 4  # 2 layers, 2 key/value heads of 8
    assert kv_cache_bytes(mistral, 30) == kv_cache_bytes(mistral, 4)  # a window: the cache stops growing
    assert kv_cache_bytes(mistral, 30, grouped=False) == 3 * kv_cache_bytes(mistral, 30)  # 6 query heads
    with pytest.raises(InputTooLong):
        measure_decoding(gpt2_model, [62], steps=3)


def test_measure_decoding_refuses_an_encoder(minilm):
    from probes.cost import measure_decoding

    with pytest.raises(probes.UnsupportedModel, match="encoder"):
        measure_decoding(minilm, [8])


def test_load_decoding_reads_the_committed_benchmark(tmp_path):
    from probes.cost import CACHED, load_decoding

    saved = load_decoding(RESULTS.with_name("generate.json"))
    cached = saved[saved.path == CACHED]
    assert list(cached.tokens) == [128, 512, 1024, 2048]
    assert (cached.cache_bytes == cached.formula_bytes).all()
    assert (cached.cache_bytes == 2 * 30 * 3 * 64 * cached.tokens * 4).all()  # SmolLM2: 30 layers, 3 kv heads of 64
    (tmp_path / "bad.json").write_text('{"rows": [{"tokens": 1}]}')
    with pytest.raises(BadData, match="bad.json"):
        load_decoding(tmp_path / "bad.json")
