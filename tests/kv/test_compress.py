"""A prompt compressed once, as kvpress's presses do: the same kept tokens from a lazy Trace (recovered from the
logsumexp) as from an eager one, the rules as written, and kvpress's own kept tokens on smollm2 (the committed
result of ``benchmarks/kvpress_oracle.py``, run in kvpress's own environment)."""

import json
from pathlib import Path

import pytest
import torch
from numeric import fp32

from probes import hf, scratch
from probes.encoding import Encoding
from probes.errors import BadOption
from probes.kv.compress import PRESSES, compress, n_kept, scores

ORACLE = Path(__file__).parents[2] / "benchmarks" / "results" / "kvpress_kept.json"
TEXT = "The keeper lit the great lamp each evening and watched the ships pass the rocks"


def encoding(ids):
    return Encoding(ids, torch.ones_like(ids), None, [[]], ["ids"], [None], [None])


@pytest.mark.numeric
@pytest.mark.parametrize("press", PRESSES)
def test_the_lazy_trace_keeps_what_the_eager_one_keeps(decoder, press):
    enc = decoder.encode(TEXT)
    eager, lazy = scratch.forward(decoder, enc, "eager"), scratch.forward(decoder, enc, "sdpa")
    assert eager.attn is not None and lazy.attn is None and lazy.lse is not None
    window = 8
    assert compress(eager, press, 0.5, window=window) == compress(lazy, press, 0.5, window=window)


def test_the_rules_as_written(decoder):
    trace = scratch.forward(decoder, decoder.encode(TEXT), "eager")
    n = len(trace.valid(0))
    keep = n_kept(n, 0.4)
    kept = compress(trace, "streaming_llm", 0.4, n_sink=3)
    assert all(row == [0, 1, 2, *range(n - keep + 3, n)] for layer in kept for row in layer)
    tova = compress(trace, "tova", 0.4)
    assert all(row == layer[0] and n - 1 in row for layer in tova for row in layer)  # one set per layer, last kept
    snap = compress(trace, "snapkv", 0.4, window=6)
    assert all(set(range(n - 6, n)) <= set(row) for layer in snap for row in layer)  # the window is kept
    # observed attention: the attention each key received over the queries that see it, averaged over the group
    a = trace.attention(1).double()
    group = trace.n_heads // (trace.n_kv_heads or trace.n_heads)
    received = (a.sum(1) / torch.arange(n, 0, -1)).view(-1, group, n).mean(1)
    assert torch.equal(scores(trace, 1, "observed_attention"), received)
    assert compress(trace, "observed_attention", 0.4)[1] == [sorted(r.tolist()) for r in received.topk(keep).indices]


def test_bad_requests(decoder, bert_dir):
    import probes

    trace = scratch.forward(decoder, decoder.encode("one two three"), "eager")
    with pytest.raises(BadOption, match="from 0 up to"):
        compress(trace, "tova", 1.0)
    with pytest.raises(BadOption, match="observation window is 64"):
        compress(trace, "snapkv", 0.5)
    with pytest.raises(BadOption, match="unknown press"):
        compress(trace, "lru", 0.5)
    bert = probes.load(str(bert_dir))
    with pytest.raises(BadOption, match="encoder"):
        compress(scratch.forward(bert, bert.encode("one two three"), "eager"), "tova", 0.5)


@pytest.mark.numeric
def test_kvpress_keeps_the_same_tokens_on_smollm2(smollm2):
    """kvpress 0.5.5's kept tokens (eager and sdpa) against ours, from Hugging Face's eager trace and our lazy
    one. A set may differ only where kvpress's own scores tie within fp32 rounding at the cut: its score gap
    between the last kept and the first dropped token within fp32(320, 1) (a score is a mean of attention weights
    ≤ 1 over 64 queries and 5 neighbours: 320 terms)."""
    oracle = json.loads(ORACLE.read_text())
    ids = torch.tensor([oracle["input_ids"]])
    enc = encoding(ids)
    traces = {"hf eager": hf.forward(smollm2, enc), "scratch sdpa (lazy)": scratch.forward(smollm2, enc, "sdpa")}
    ties = 0
    for name, got in oracle["presses"].items():
        press = name.removesuffix("_sdpa")
        params = got["params"]
        for trace in traces.values():
            ours = compress(trace, press, oracle["ratio"], n_sink=params.get("n_sink", 4),
                            window=params.get("window_size", 64))
            for layer, (a, b) in enumerate(zip(ours, got["kept"], strict=True)):
                for head, (x, y) in enumerate(zip(a, b, strict=True)):
                    if x != sorted(y):
                        assert got["cut_gap"][layer][head] <= fp32(320, 1.0), (name, layer, head)
                        ties += 1
    assert ties <= 4  # near-ties only, and few of them
