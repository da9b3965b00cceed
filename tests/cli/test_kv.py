"""``python -m probes kv``: the library's numbers (:mod:`probes.kv.stream`) as a table and as JSON, and every bad
input as one line and exit 2, before a model loads where the mistake is in the arguments."""

from __future__ import annotations

import json
import math

import pytest

from probes.cli import main

# 40 tokens on the tiny Llama (GPT-2's tokenizer), under its context of 64
TEXT = "The cat sat on the mat and the dog sat on the log, and then they both went home to sleep."
POLICIES = "full,window:8,h2o:8"


@pytest.fixture(scope="module")
def llama(llama_dir):
    import probes

    return probes.load(str(llama_dir))


def run_json(capsys, *argv: str) -> dict:
    assert main(["kv", *argv, "--json"]) == 0
    got = capsys.readouterr()
    return json.loads(got.out)  # stdout is the one JSON object (a progress bar goes to stderr)


def refused(capsys, argv: list[str]) -> str:
    """Run the CLI in-process; assert exit 2 with one line on stderr and no traceback; return that line."""
    code: str | int | None
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    got = capsys.readouterr()
    assert code == 2, (argv, code, got.err, got.out)
    assert "Traceback" not in got.err and got.out == "", got
    lines = got.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (argv, got.err)
    return lines[0]


def without_seconds(data: dict) -> dict:
    return {**data, "policies": [{k: v for k, v in p.items() if k != "seconds"} for p in data["policies"]]}


@pytest.mark.numeric  # floats compared exactly: the same code path on the same weights, and JSON writes a float back
@pytest.mark.parametrize("method, library", [(None, "masked"), ("layers", "masked"), ("stream", "streamed")])
def test_the_json_is_the_library_stream(llama, llama_dir, capsys, method, library):
    from probes.kv import parse_list
    from probes.kv.stream import stream

    how = [] if method is None else ["--method", method]  # the default: a layer at a time
    data = run_json(capsys, "--model", str(llama_dir), "--text", TEXT, "--policies", POLICIES, *how)
    assert set(data) == {"model", "tokens", "text_source", "method", "policies"}  # no full_loss without --per-head
    assert data["model"] == str(llama_dir) and data["text_source"] == "text" and data["tokens"] == 40
    assert data["method"] == (method or "layers")
    assert [p["policy"] for p in data["policies"]] == ["full", "window:8", "h2o:8"]
    for got, policy in zip(data["policies"], parse_list(POLICIES), strict=True):
        expected = stream(llama, TEXT, policy, method=library)
        assert set(got) == {"policy", "tokens", "perplexity", "kv_bytes", "full_kv_bytes", "kept_fraction",
                            "seen_fraction", "seconds"}
        assert got["perplexity"] == expected.perplexity
        assert (got["tokens"], got["kv_bytes"], got["full_kv_bytes"]) == (40, expected.kv_bytes, expected.full_kv_bytes)
        assert got["kept_fraction"] == expected.kept_fraction and got["seen_fraction"] == expected.seen_fraction
        assert isinstance(got["kv_bytes"], int) and isinstance(got["perplexity"], float) and got["seconds"] > 0
    full, window = data["policies"][:2]
    # 2 layers × 2 key/value heads × 8 dims × (k and v) × 4 bytes = 256 bytes a token: 40 tokens, and a window of 8
    assert full["full_kv_bytes"] == full["kv_bytes"] == 40 * 256 and window["kv_bytes"] == 8 * 256
    assert full["kept_fraction"] == 1.0 and window["kept_fraction"] == 8 / 40 and window["seen_fraction"] < 1


@pytest.mark.numeric
def test_both_methods_give_the_same_numbers_in_float64(llama_dir, capsys):
    """A layer at a time (the default) and token by token through the evicting cache: the same losses to 1e-10 in
    float64 (exp of the mean loss, so the logs of the perplexities), the same cache and the same keys read."""
    from numeric import F64

    every = "full,window:8,sinks:2+window:6,h2o:8,h2o:10+recent:3,tova:8,snapkv:12+observe:3,strided:4+window:4"
    runs = {method: run_json(capsys, "--model", str(llama_dir), "--text", TEXT, "--policies", every, "--dtype",
                             "float64", "--method", method) for method in ("layers", "stream")}
    for layers, stream in zip(runs["layers"]["policies"], runs["stream"]["policies"], strict=True):
        assert layers["policy"] == stream["policy"]
        assert abs(math.log(layers["perplexity"]) - math.log(stream["perplexity"])) <= F64, layers["policy"]
        assert (layers["kv_bytes"], layers["full_kv_bytes"]) == (stream["kv_bytes"], stream["full_kv_bytes"])
        assert layers["seen_fraction"] == pytest.approx(stream["seen_fraction"], abs=F64, rel=0)
    # float64's cache is twice float32's: 2 layers × 2 key/value heads × 8 dims × (k and v) × 8 bytes, 40 tokens
    assert runs["layers"]["policies"][0]["full_kv_bytes"] == 40 * 512
    window = {p["policy"]: p["perplexity"] for p in runs["layers"]["policies"]}["window:8"]
    assert abs(math.log(window) - math.log(runs["layers"]["policies"][0]["perplexity"])) > 1e-3  # a cut that shows


@pytest.mark.numeric  # perplexities compared exactly: a budget that covers the text is full attention, bit for bit
@pytest.mark.parametrize("method", ["layers", "stream"])
def test_a_budget_that_covers_the_text_is_full(llama_dir, capsys, method):
    data = run_json(capsys, "--model", str(llama_dir), "--text", TEXT, "--method", method, "--policies",
                    "full,window:40,h2o:64,sinks:4+window:60,snapkv:40,window:39,window:38")
    ppl = {p["policy"]: p["perplexity"] for p in data["policies"]}
    for name in ("window:40", "h2o:64", "sinks:4+window:60", "snapkv:40"):
        assert ppl[name] == ppl["full"], name
    # window:39 loses the first key only at the last step, which predicts nothing: the same perplexity, a smaller
    # cache; window:38 loses it one step earlier
    kv_bytes = {p["policy"]: p["kv_bytes"] for p in data["policies"]}
    assert ppl["window:39"] == ppl["full"] and kv_bytes["window:39"] < kv_bytes["full"]
    assert ppl["window:38"] != ppl["full"]


@pytest.mark.numeric  # the rows' floats compared exactly with the library's
def test_per_head_lists_every_head_most_hurt_first(llama, llama_dir, capsys):
    from probes.kv import parse_list
    from probes.kv.stream import head_effects

    data = run_json(capsys, "--model", str(llama_dir), "--text", TEXT, "--policies", POLICIES, "--per-head",
                    "--top", "1")  # --top is the table's: the JSON lists every head
    expected = head_effects(llama, TEXT, parse_list(POLICIES))
    assert data["full_loss"] == expected.full_loss
    assert sum(len(p["per_head"]) for p in data["policies"]) == 2 * llama.n_layers * llama.n_kv_heads == 8
    assert data["policies"][0]["per_head"] == []  # full cuts nothing
    for entry in data["policies"][1:]:
        rows = entry["per_head"]
        assert len(rows) == llama.n_layers * llama.n_kv_heads == 4
        assert {r["policy"] for r in rows} == {entry["policy"]}
        changes = [r["loss_change"] for r in rows]
        assert changes == sorted(changes, reverse=True)
        library = [r for r in expected.rows if r["policy"] == entry["policy"]]
        key = lambda r: (r["layer"], r["kv_head"])  # noqa: E731
        assert sorted(rows, key=key) == sorted(library, key=key)
        assert {(r["layer"], r["kv_head"]) for r in rows} == {(0, 0), (0, 1), (1, 0), (1, 1)}
        assert all(r["query_heads"] == [3 * r["kv_head"] + i for i in range(3)] for r in rows)


def test_the_table(llama_dir, capsys):
    assert main(["kv", "--model", str(llama_dir), "--text", TEXT, "--policies", POLICIES, "--per-head",
                 "--top", "2"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == (f"{llama_dir}: 40 tokens (text) read a layer at a time (the same numbers as token by token), "
                        "the KV cache kept by each policy")
    assert lines[1].split() == ["policy", "tokens", "perplexity", "Δ", "vs", "full", "KV", "cache", "of", "full",
                                "seen", "seconds"]
    assert lines[2].startswith("full ") and " — " in lines[2] and "10.0 KiB" in lines[2] and "100.0 %" in lines[2]
    assert lines[3].startswith("window:8 ") and "2.0 KiB" in lines[3] and "20.0 %" in lines[3]
    assert "the 2 most hurt of 4 per policy" in out
    for policy in ("window:8", "h2o:8"):
        at = lines.index(f"{policy}:")
        assert lines[at + 1].split()[:2] == ["head", "query"] and len(lines[at + 2].split()) == 7
        assert lines[at + 4] == "" or lines[at + 4].endswith(":")  # two heads printed, no more


@pytest.mark.numeric  # the same text, read from a file: the same floats
def test_a_text_file_and_the_shipped_text(llama_dir, tmp_path, capsys):
    path = tmp_path / "story.txt"
    path.write_text(TEXT, encoding="utf-8")
    typed = run_json(capsys, "--model", str(llama_dir), "--text", TEXT, "--policies", "full,window:8")
    read = run_json(capsys, "--model", str(llama_dir), "--text-file", str(path), "--policies", "full,window:8")
    assert read["text_source"] == f"file:{path}"
    assert without_seconds({**read, "text_source": "text"}) == without_seconds(typed)
    shipped = run_json(capsys, "--model", str(llama_dir), "--ewt", "30", "--policies", "full")
    assert shipped["text_source"] == "ewt-dev:30" and 2 <= shipped["tokens"] <= 30
    # no text given: the shipped text, 512 tokens or as much as the model's context holds (64 here)
    default = run_json(capsys, "--model", str(llama_dir), "--policies", "full")
    assert default["text_source"] == "ewt-dev:64" and 2 <= default["tokens"] <= 64


@pytest.mark.parametrize("args, says", [
    (["--policies", "nope"], "unknown policy 'nope'"),
    (["--policies", "window:0"], "policy 'window:0': the window must be at least 1 (got 0)"),
    (["--policies", "streaming:4+sinks:4"], "4 sinks leave no room for a window in a budget of 4"),
    (["--policies", "full,window:8,full"], "policy 'full' is listed twice"),
    (["--policies", " , "], "no policy given"),
    (["--policies", "full", "--per-head"], "--per-head cuts each head with a policy: give one besides full"),
    (["--text", "   "], "the text is empty"),
    (["--text-file", "{tmp}/missing.txt"], "{tmp}/missing.txt: cannot be read (No such file or directory)"),
    (["--text-file", "{tmp}/latin1.txt"], "{tmp}/latin1.txt line 1: not UTF-8 text (byte 4 of the line is 0xE9)"),
    (["--text-file", "{tmp}/empty.txt"], "{tmp}/empty.txt is empty"),
    (["--text", "a cat", "--ewt", "30"], "argument --ewt: not allowed with argument --text"),
    (["--ewt", "1"], "argument --ewt: expected a whole number from 2"),
    (["--top", "0"], "argument --top: expected a whole number from 1"),
    (["--method", "tokens"], "argument --method: invalid choice: 'tokens' (choose from 'layers', 'stream')"),
])
def test_bad_arguments_are_refused_before_a_model_loads(args, says, tmp_path, capsys):
    (tmp_path / "latin1.txt").write_bytes("café au lait".encode("latin-1"))
    (tmp_path / "empty.txt").write_text(" \n")
    args = [a.format(tmp=tmp_path) for a in args]
    line = refused(capsys, ["kv", "--model", str(tmp_path / "never-loaded"), *args])  # no model there: not loaded
    assert says.format(tmp=tmp_path) in line, line


@pytest.mark.parametrize("model, args, says", [
    ("bert", ["--text", TEXT], "is an encoder: it reads the whole text at once and keeps no KV cache"),
    ("llama", ["--text", "cat " * 100], "but {llama} reads at most 64: give a shorter text: the policies keep each "
     "token's own position"),
    ("llama", ["--text", "a"], "the text is 1 token long: give at least 2 tokens"),
    ("llama", ["--ewt", "100"], "--ewt 100 is more than {llama}'s context holds (64 tokens of text): give --ewt 64"),
])
def test_bad_input_for_the_model_is_one_line(model, args, says, llama_dir, bert_dir, capsys):
    where = {"llama": str(llama_dir), "bert": str(bert_dir)}
    line = refused(capsys, ["kv", "--model", where[model], "--policies", POLICIES, *args])
    assert says.format(**where) in line, line
