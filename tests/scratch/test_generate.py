"""Cached decoding (the KV cache) against one full forward pass, and against Hugging Face's own generate."""

from __future__ import annotations

import pytest
import torch
from checkpoints import make_bert, make_gemma, make_llama, make_neox
from numeric import F64, fp32

import probes
from probes import generation
from probes.errors import BadOption, EmptyInput, InputTooLong, UnsupportedModel
from probes.parity import TOLERANCES
from probes.scratch import generate as g

pytestmark = pytest.mark.numeric  # cached rows against full passes: CI runs these again under another CPU's kernels

PROMPT = "Xiaoming gave the apple to Xiaohong because she was"


@pytest.fixture(scope="module")
def mistral(ckpt_dir):
    """A Mistral whose sliding window (4) is shorter than the prompt: the ring buffer wraps."""
    return probes.load(str(make_llama(ckpt_dir / "mistral-w4", family="mistral", sliding_window=4)))


@pytest.fixture(scope="module")
def qwen2(ckpt_dir):
    """A Qwen2 with the window on its second layer only, and q/k/v biases."""
    return probes.load(str(make_llama(ckpt_dir / "qwen2-w5", family="qwen2", use_sliding_window=True,
                                      sliding_window=5, max_window_layers=1)))


@pytest.fixture(scope="module")
def qwen3(ckpt_dir):
    """A Qwen3 (QK-norm, head width 12) with q/k/v biases and the window (4) on its second layer only."""
    return probes.load(str(make_llama(ckpt_dir / "qwen3-w4", family="qwen3", attention_bias=True,
                                      use_sliding_window=True, sliding_window=4, max_window_layers=1)))


@pytest.fixture(scope="module")
def phi3(ckpt_dir):
    """A Phi-3 (fused projections) with a window of 4 on every layer and half of each head turned."""
    return probes.load(str(make_llama(ckpt_dir / "phi3-w4", family="phi3", sliding_window=4,
                                      partial_rotary_factor=0.5)))


@pytest.fixture(scope="module")
def gemma2(ckpt_dir):
    """A Gemma 2: local (window 3) and global layers, soft-capped scores (5) and logits (3), sandwich norms."""
    return probes.load(str(make_gemma(ckpt_dir / "gemma2-w3")))


@pytest.fixture(scope="module")
def gemma3(ckpt_dir):
    """A Gemma 3: QK-norm, local (window 3, θ 10,000) and global layers (θ 1,000,000, linear factor 8): each new token
    is turned by its layer type's own table."""
    return probes.load(str(make_gemma(ckpt_dir / "gemma3-w3", family="gemma3")))


@pytest.fixture(scope="module")
def olmo2(olmo2_dir):
    """An OLMo 2 (norms after the sublayers, QK-norm over the whole projection, biases)."""
    return probes.load(str(olmo2_dir))


@pytest.fixture(scope="module")
def neox(neox_dir):
    """A GPT-NeoX (the parallel residual, a quarter of each head turned)."""
    return probes.load(str(neox_dir))


@pytest.fixture(scope="module")
def neox_sequential(ckpt_dir):
    """A GPT-NeoX with the sequential residual, half of each head turned, no attention biases."""
    return probes.load(str(make_neox(ckpt_dir / "neox-seq", use_parallel_residual=False, partial_rotary_factor=0.5,
                                     attention_bias=False)))


@pytest.fixture(scope="module")
def llama(llama_dir):
    return probes.load(str(llama_dir))


@pytest.mark.parametrize("name", ["gpt2_model", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3",
                                  "neox", "neox_sequential", "olmo2"])
def test_cached_rows_and_logits_equal_the_full_pass(name, request):
    model = request.getfixturevalue(name)
    gen = g.generate(model, PROMPT, max_new_tokens=10, stop_at_eos=False)
    assert gen.n_steps == 10 and len(gen.input_ids) == gen.prompt_length + 10
    for reference in ("scratch", "hf"):
        proof = generation.prove(model, gen, reference)
        assert proof.passed, proof.to_text()
        # a tiny model: its float64 copy was made
        assert proof.exact_attention_max_abs_diff is not None and proof.exact_logits_max_rel_diff is not None
        assert proof.exact_attention_max_abs_diff <= F64 and proof.exact_logits_max_rel_diff <= F64  # float64
        # fp32 on a 2-layer model, rows of ≤ 64 keys: eps × 128, parity's own floor (not generate's 30-layer bound)
        assert proof.attention_max_abs_diff <= fp32(128) and proof.logits_max_rel_diff <= fp32(128)
    # each row is a distribution over the context the step could see
    for s in range(gen.n_steps):
        row = gen.row(s, 0)
        assert row.shape == (model.n_heads, gen.query_position(s) + 1)
        torch.testing.assert_close(row.sum(-1), torch.ones(model.n_heads), atol=fp32(row.shape[-1]), rtol=0)


@pytest.mark.parametrize("name", ["gpt2_model", "llama", "mistral", "qwen3", "phi3", "gemma2", "gemma3", "neox",
                                  "neox_sequential", "olmo2"])
def test_greedy_tokens_equal_hugging_face_generate(name, request):
    model = request.getfixturevalue(name)
    gen = g.generate(model, PROMPT, max_new_tokens=12, stop_at_eos=False)
    assert gen.new_ids == generation.hf_generate(model, PROMPT, 12)


def test_smollm2_greedy_equals_hf_generate_and_the_full_pass(smollm2):
    gen = g.generate(smollm2, PROMPT, max_new_tokens=8)
    assert gen.new_ids == generation.hf_generate(smollm2, PROMPT, 8)
    proof = generation.prove(smollm2, gen, "hf")
    assert proof.passed, proof.to_text()
    assert "".join(t.text for t in gen.tokens[: gen.prompt_length]) == PROMPT


def test_a_window_keeps_only_its_positions(mistral):
    gen = g.generate(mistral, PROMPT, max_new_tokens=6, stop_at_eos=False)
    # every layer holds the last 4 positions: the cache does not grow
    per_layer = g.cache_bytes(1, mistral.n_kv_heads, mistral.d_head, 4)
    assert gen.cache_bytes == [per_layer * mistral.n_layers] * 6
    row = gen.row(5, 1)
    q = gen.query_position(5)
    assert (row[:, : q - 3] == 0).all() and (row[:, q - 3:] > 0).all()  # only the last 4 keys


def test_cache_bytes_follow_the_formula_and_grouped_heads_save(llama):
    gen = g.generate(llama, PROMPT, max_new_tokens=5, stop_at_eos=False)
    for s, held in enumerate(gen.cache_bytes):
        tokens = gen.prompt_length + s  # the fed tokens so far
        assert held == 2 * llama.n_layers * llama.n_kv_heads * llama.d_head * tokens * 4
        assert gen.cache_bytes_mha[s] == held * llama.n_heads // llama.n_kv_heads  # 6 query heads, 2 kv heads
    assert llama.n_kv_heads < llama.n_heads


@pytest.mark.parametrize("wrong", ["keys shifted", "values shifted"])
@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_a_wrong_cache_is_caught(wrong, name, request, monkeypatch):
    """A cache that hands back keys (or values) shifted by one position (in a plain cache, and in a ring
    buffer): both the float64 check and the fp32 one fail, far beyond rounding."""
    honest = g.KVCache.append

    def broken(self, layer, k, v):
        keys, values, positions = honest(self, layer, k, v)
        if wrong == "keys shifted":
            keys = keys.roll(1, dims=2)
        else:
            values = values.roll(1, dims=2)
        return keys, values, positions

    model = request.getfixturevalue(name)
    monkeypatch.setattr(g.KVCache, "append", broken)
    gen = g.generate(model, PROMPT, max_new_tokens=6, stop_at_eos=False)
    proof = generation.prove(model, gen)
    assert not proof.passed, proof.to_text()
    assert proof.exact_attention_max_abs_diff is not None  # a tiny model: its float64 copy was made
    assert proof.exact_attention_max_abs_diff > 1e-3 and proof.attention_max_abs_diff > 1e-3
    assert proof.to_text().startswith("FAIL")


def test_smollm2_rounding_stays_inside_the_fp32_bound_and_float64_is_exact(smollm2):
    """A prompt where fp32 rounding (one-row against whole-matrix products) reaches ~2e-5 in a probability:
    the float64 check still shows the cache is exact."""
    gen = g.generate(smollm2, "<b>Xiaoming</b> gave", max_new_tokens=4)
    proof = generation.prove(smollm2, gen)
    assert proof.passed, proof.to_text()
    assert proof.exact_attention_max_abs_diff is not None  # SmolLM2 is small enough for a float64 copy
    assert proof.exact_attention_max_abs_diff <= F64
    assert 1e-7 < proof.attention_max_abs_diff <= generation.FP32_TOLERANCES["attention"]


def test_a_model_too_big_for_float64_gets_the_fp32_check_only(llama, monkeypatch):
    gen = g.generate(llama, PROMPT, 3, stop_at_eos=False)
    proof = generation.prove(llama, gen, float64_limit=1000)
    assert proof.passed and proof.exact_attention_max_abs_diff is None
    assert "float64 check skipped" in proof.to_text() and "the limit here is 0.0" in proof.to_text()
    monkeypatch.setattr(generation, "FLOAT64_MAX_BYTES", 1000)
    assert generation.prove(llama, gen).exact_attention_max_abs_diff is None


def test_a_reference_within_a_memory_budget_proves_the_same(llama):
    # the public app's proof: Hugging Face's pass keeps one logsumexp per row, each row recomputed from its q and k
    gen = g.generate(llama, PROMPT, 4, stop_at_eos=False)
    whole, bounded = generation.prove(llama, gen), generation.prove(llama, gen, attention_budget=1)
    assert bounded.passed and whole.passed
    assert abs(bounded.attention_max_abs_diff - whole.attention_max_abs_diff) <= generation.FP32_TOLERANCES["attention"]
    assert bounded.logits_max_rel_diff == whole.logits_max_rel_diff
    assert bounded.exact_attention_max_abs_diff == whole.exact_attention_max_abs_diff  # the float64 check: its own


@pytest.mark.numeric
@pytest.mark.parametrize("reference", ["hf", "scratch"])
def test_the_proofs_reference_logits_are_its_whole_pass_logits_at_the_steps_rows(llama, reference):
    # the proof makes the reference's logits at the compared rows only, from its last hidden state and its own head:
    # the same numbers as the whole pass's logits there (float64), without a vocabulary for every prompt position
    from probes import runner

    gen = g.generate(llama, PROMPT, 4, stop_at_eos=False)
    model = llama.cast(torch.float64)
    fed = gen.input_ids[: gen.prompt_length + gen.n_steps - 1][None]
    enc = model.encode(PROMPT)
    enc = type(enc)(fed, torch.ones_like(fed), None, [gen.tokens[: fed.shape[1]]], [""], [None], [None])
    whole = runner.forward(model, enc, reference, "eager", logits=True)
    first = gen.prompt_length - 1
    rows = generation._reference_logits(model, whole, reference, first, gen.n_steps)
    assert whole.logits is not None  # asked for
    assert rows.shape == (gen.n_steps, model.config.vocab_size)
    assert (rows - whole.logits[0, first:first + gen.n_steps]).abs().max() <= F64


def test_sampling_is_seeded_and_filtered(llama):
    draw = lambda **kw: g.generate(llama, PROMPT, 8, g.Sampling(sample=True, **kw), stop_at_eos=False).new_ids  # noqa: E731
    assert draw(seed=1, temperature=2.0) == draw(seed=1, temperature=2.0)
    assert len({tuple(draw(seed=s, temperature=3.0)) for s in range(4)}) > 1
    greedy = g.generate(llama, PROMPT, 8, stop_at_eos=False).new_ids
    assert draw(seed=5, top_k=1) == greedy  # one candidate left: the most likely
    assert draw(seed=5, top_p=1e-6) == greedy


def test_filtered_logits_keep_the_top_k_and_the_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    top2 = g.filtered_logits(logits, g.Sampling(sample=True, top_k=2))
    assert torch.isinf(top2[2:]).all() and torch.isfinite(top2[:2]).all()
    nucleus = g.filtered_logits(logits, g.Sampling(sample=True, top_p=0.8))  # 0.5 + 0.3 reaches 0.8
    assert torch.isfinite(nucleus[:2]).all() and torch.isinf(nucleus[2:]).all()
    nucleus = g.filtered_logits(logits, g.Sampling(sample=True, top_p=0.81))  # needs the third
    assert torch.isfinite(nucleus[:3]).all() and torch.isinf(nucleus[3])
    hot = g.filtered_logits(logits, g.Sampling(sample=True, temperature=2.0))
    assert torch.equal(hot, logits / 2)  # a division by 2 is exact


@pytest.mark.parametrize("bad", [dict(temperature=0.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5)])
def test_bad_sampling_options_are_refused(llama, bad):
    with pytest.raises(BadOption):
        g.generate(llama, PROMPT, 3, g.Sampling(sample=True, **bad))


def test_bad_inputs_are_refused(llama, minilm):
    with pytest.raises(UnsupportedModel, match="encoder"):
        g.generate(minilm, PROMPT, 3)
    with pytest.raises(EmptyInput):
        g.generate(llama, "   ", 3)
    with pytest.raises(BadOption, match="at most"):
        g.generate(llama, PROMPT, 60)  # the tiny Llama reads 64 positions
    with pytest.raises(InputTooLong, match="shorten the prompt") as err:
        g.generate(llama, PROMPT * 10, 3)
    assert "--truncate" not in str(err.value)  # generation has no truncation to offer
    with pytest.raises(BadOption):
        g.generate(llama, PROMPT, 0)


def test_a_causal_bert_with_a_head_is_refused_in_words_not_a_crash(tmp_path):
    # causal (is_decoder), with a masked-LM head and a from-scratch network: but that network has no KV cache
    model = probes.load(str(make_bert(tmp_path / "m", masked_lm=True, is_decoder=True)))
    assert model.is_causal and model.has_lm_head and model.scratch_supported
    with pytest.raises(UnsupportedModel, match="has no KV cache"):
        g.generate(model, PROMPT, 3)


def test_the_generation_trace_reads_like_a_table(llama):
    gen = g.generate(llama, PROMPT, max_new_tokens=4, stop_at_eos=False)
    band = gen.rows_matrix(1, 2)
    assert band.shape == (4, gen.prompt_length + 3)
    for s in range(4):
        assert torch.equal(band[s, : gen.query_position(s) + 1], gen.row(s, 1, 2))  # the same numbers, copied
        assert (band[s, gen.query_position(s) + 1:] == 0).all()  # the future of that step
    top = gen.top_keys(3, 1, 2, k=2)
    assert top[0][2] >= top[1][2] and top[0][1] == gen.tokens[top[0][0]].text
    frame = gen.frame(1, 2)
    assert len(frame) == sum(gen.query_position(s) + 1 for s in range(4))
    sums = frame.groupby("step")["weight"].sum()  # fp32 weights of ≤ 64 keys, summed: eps × 64
    assert (sums - 1).abs().max() <= fp32(64)
    with pytest.raises(IndexError):
        gen.row(4, 0)


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_the_flash_kernel_runs_each_step(name, request):
    """The decode step (one query against the cache, no causal mask) and the prefill (causal, windowed) in
    our Triton kernel (here under its CPU interpreter): the same tokens, rows recovered from the logsumexp
    equal to the eager ones, and the proof holds."""
    model = request.getfixturevalue(name)
    eager = g.generate(model, PROMPT, max_new_tokens=6, stop_at_eos=False)
    flash = g.generate(model, PROMPT, max_new_tokens=6, stop_at_eos=False, backend="flash")
    assert flash.backend == "flash" and flash.note == ""
    assert flash.new_ids == eager.new_ids
    for s in range(6):  # fp32 rows of ≤ 64 keys through 2 layers, summed in the kernel's order: parity's floor
        torch.testing.assert_close(flash.rows[s], eager.rows[s], atol=fp32(128), rtol=0)
    scale = max(1.0, float(eager.logits.abs().max()))  # logits in units of their scale, as parity holds them
    torch.testing.assert_close(flash.logits, eager.logits, atol=TOLERANCES["logits"] * scale, rtol=0)
    assert generation.prove(model, flash).passed


def test_flash_without_cuda_or_the_interpreter_runs_eager_and_says_so(llama, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    gen = g.generate(llama, PROMPT, 3, backend="flash")
    assert gen.backend == "eager" and "flash needs CUDA" in gen.note
    with pytest.raises(BadOption, match="unknown backend"):
        g.generate(llama, PROMPT, 3, backend="sdpa")
