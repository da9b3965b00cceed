"""The streamed runs, proven: the cache that forgets against full passes with the mask the policy implies, in float64;
the layer-at-a-time run against the token-at-a-time one; one head cut alone against the masked pass that measures it;
and the bad inputs a person can give."""

import pytest
import torch
import torch.nn.functional as F
from checkpoints import make_gemma
from numeric import F64

from probes.attention_math import allowed_keys
from probes.errors import BadOption, InputTooLong, UnsupportedModel
from probes.kv import parse
from probes.kv.stream import (
    everywhere,
    head_effects,
    masked_pass,
    next_token_losses,
    one_head,
    run_masked,
    run_stream,
    seen_by,
    static_evictions,
    stream,
)
from probes.scratch.attention import attention
from probes.scratch.generate import network64, replay
from probes.scratch.hooks import Pass

EVERY = ["window:8", "sinks:2+window:6", "h2o:8", "h2o:10+recent:3", "tova:8", "snapkv:12", "snapkv:12+observe:3",
         "strided:4+window:4"]


def plan(model, name):
    return everywhere(parse(name), model.n_layers, model.n_kv_heads)


@pytest.fixture(scope="module")
def net64(decoder):
    return network64(decoder)


def full_cached_losses(net, model, ids):
    """The full cached decoding of the existing generation code (one token a step), scored as run_stream scores."""
    with torch.inference_mode():
        _, logits = replay(net, model, ids, 1)
    steps = range(ids.shape[1] - 1)
    return torch.stack([F.cross_entropy(logits[t].double()[None], ids[0, t + 1:t + 2]) for t in steps])


@pytest.mark.numeric
@pytest.mark.parametrize("name", ["full", "window:40", "window:1000", "sinks:4+window:36", "h2o:40", "tova:40",
                                  "snapkv:40", "snapkv:64+observe:8", "strided:1+window:3", "strided:8+window:40"])
def test_a_budget_that_covers_the_text_is_the_full_cached_pass_bit_for_bit(decoder, ids, name):
    assert parse(name).covers(ids.shape[1])
    net = decoder.network()
    with torch.inference_mode():
        got = run_stream(net, ids, plan(decoder, name))
    assert torch.equal(got.losses, full_cached_losses(net, decoder, ids))
    assert got.kv_bytes == got.full_kv_bytes and got.seen_fraction == 1.0
    assert bool((got.evicted_at == ids.shape[1]).all())  # nothing left


def banded_losses(net, ids, keep):
    """An independent full pass whose every head reads the keys ``keep(query, key)`` allows (float64)."""
    n = ids.shape[1]
    q_pos, k_pos = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (k_pos <= q_pos) & keep(q_pos, k_pos)
    final = []

    def attend(i, q, k, v, spec, via):
        return attention(q, k, v, allowed[None, None], spec.scale)[0]

    Pass(net, attend, then={"final": lambda x, name: final.append(x)})(ids, torch.ones_like(ids), None, logits=False)
    return next_token_losses(net, ids, final[-1])


@pytest.mark.numeric
@pytest.mark.parametrize("name, keep", [
    ("window:8", lambda q, k: k > q - 8),
    ("sinks:2+window:6", lambda q, k: (k < 2) | (k > q - 6)),
    ("strided:4+window:3", lambda q, k: (q - k < 3) | ((q - k) % 4 == 0)),
])
def test_static_policies_equal_their_mask_in_float64(decoder, net64, ids, name, keep):
    with torch.inference_mode():
        got = run_stream(net64, ids, plan(decoder, name))
        want = banded_losses(net64, ids, keep)
    assert float((got.losses - want).abs().max()) <= F64


@pytest.mark.numeric
def test_the_window_is_the_sliding_window_of_the_attention_rules(decoder, net64, ids):
    """window:W reads what allowed_keys(window=W) allows: the rule Mistral's layers use."""
    rule = allowed_keys(torch.ones_like(ids), True, window=8)[0, 0]
    with torch.inference_mode():
        got = run_stream(net64, ids, plan(decoder, "window:8"))
        want = banded_losses(net64, ids, lambda q, k: rule[q, k])
    assert float((got.losses - want).abs().max()) <= F64


@pytest.mark.numeric
@pytest.mark.parametrize("name", EVERY)
def test_layer_at_a_time_equals_token_at_a_time(decoder, net64, ids, name):
    with torch.inference_mode():
        a = run_stream(net64, ids, plan(decoder, name))
        b = run_masked(net64, ids, plan(decoder, name))
    assert torch.equal(a.evicted_at, b.evicted_at)
    assert float((a.losses - b.losses).abs().max()) <= F64
    assert (a.kv_bytes, a.seen_fraction) == (b.kv_bytes, pytest.approx(b.seen_fraction, abs=F64, rel=0))


@pytest.mark.numeric
@pytest.mark.parametrize("name", ["window:8", "h2o:8"])
def test_the_layer_at_a_time_run_attends_in_pieces_of_rows_with_the_same_numbers(decoder, net64, ids, name,
                                                                                  monkeypatch):
    import probes.kv.stream as kv_stream

    with torch.inference_mode():
        whole = run_masked(net64, ids, plan(decoder, name))  # 40 tokens: one piece
        monkeypatch.setattr(kv_stream, "ROWS", 7)  # pieces of 7 query rows, the last of 5
        pieces = run_masked(net64, ids, plan(decoder, name))
        streamed = run_stream(net64, ids, plan(decoder, name))
    assert torch.equal(whole.evicted_at, pieces.evicted_at)
    assert float((whole.losses - pieces.losses).abs().max()) <= F64
    assert float((streamed.losses - pieces.losses).abs().max()) <= F64


@pytest.mark.numeric
@pytest.mark.parametrize("name", EVERY)
def test_one_head_cut_alone_is_the_masked_pass_the_shadow_implies(decoder, net64, ids, name):
    """What head_effects measures: the shadow's evictions of head (l, h), as a mask on a full pass, are the
    streamed run where only that head's cache is cut."""
    policy = parse(name)
    group = decoder.n_heads // decoder.n_kv_heads
    with torch.inference_mode():
        watched = run_stream(net64, ids, plan(decoder, "full"), shadow=[policy]).watched[name]
        for layer, head in [(0, 0), (decoder.n_layers - 1, decoder.n_kv_heads - 1)]:
            alone = run_stream(net64, ids, one_head(policy, layer, head, decoder.n_layers, decoder.n_kv_heads))
            assert torch.equal(alone.evicted_at[layer, head], watched.evicted_at[layer, head])
            heads = torch.arange(head * group, (head + 1) * group)
            final = masked_pass(net64, ids, {layer: (heads, seen_by(policy, watched.evicted_at[layer, head])[None])})
            assert float((next_token_losses(net64, ids, final) - alone.losses).abs().max()) <= F64


def test_evictions_follow_each_rule(decoder, ids):
    n = ids.shape[1]
    net = decoder.network()
    with torch.inference_mode():
        for name in ("window:8", "sinks:3+window:5"):
            got = run_stream(net, ids, plan(decoder, name))
            want = static_evictions(parse(name), n)
            assert bool((got.evicted_at == want).all()), name
        h2o = run_stream(net, ids, plan(decoder, "h2o:10+recent:4"))
    # a window's key leaves W steps after it came; sinks never leave
    assert static_evictions(parse("sinks:3+window:5"), n)[:3].tolist() == [n] * 3
    assert static_evictions(parse("window:8"), n)[10] == 18
    # H2O: every step sees exactly its budget once full, and the 4 newest keys are never evicted
    steps = torch.arange(n)
    for layer_heads in h2o.evicted_at:
        for left in layer_heads:
            seen = seen_by(parse("h2o:10"), left)
            assert seen.sum(-1).tolist() == [min(t + 1, 10) for t in range(n)]
            assert bool(((left.long() - steps >= 4) | (left == n)).all())


def test_the_cache_holds_the_budget_and_no_more(decoder, ids):
    with torch.inference_mode():
        got = run_stream(decoder.network(), ids, plan(decoder, "h2o:8"))
    per_key = got.full_kv_bytes // (decoder.n_layers * decoder.n_kv_heads * ids.shape[1])
    assert got.kv_bytes == decoder.n_layers * decoder.n_kv_heads * 8 * per_key
    assert got.kv_bytes * ids.shape[1] == 8 * got.full_kv_bytes  # kept_fraction: 8 keys of every head, of n


@pytest.mark.numeric
def test_head_effects_are_the_streamed_runs_with_one_head_cut(llama_dir):
    import probes

    model = probes.models.load(str(llama_dir))
    text = "The keeper lit the lamp at dusk, and the ships saw it from far away."
    effects = head_effects(model, text, [parse("full"), parse("window:4"), parse("h2o:6")])
    assert len(effects.rows) == 2 * model.n_layers * model.n_kv_heads  # full is left out: nothing to cut
    net = model.network()
    ids = model.encode(text).input_ids
    with torch.inference_mode():
        full = float(run_stream(net, ids, plan(model, "full")).losses.mean())
        row = next(r for r in effects.rows if (r["policy"], r["layer"], r["kv_head"]) == ("h2o:6", 1, 1))
        alone = run_stream(net, ids, one_head(parse("h2o:6"), 1, 1, model.n_layers, model.n_kv_heads))
    # the masked pass against the streamed one, fp32: losses of ~8 nats, a mean of n − 1 of them, each from
    # logits summed over 48 dimensions of weights scaled to std 0.3; a few ulp of 8 nats
    from numeric import fp32

    assert row["loss_change"] == pytest.approx(float(alone.losses.mean()) - full, abs=fp32(64, 8.0), rel=0)
    assert effects.full_loss == pytest.approx(full, abs=fp32(64, 8.0), rel=0)
    assert 0 < row["mass"] <= 1 and row["query_heads"] == [3, 4, 5]


def test_what_a_person_can_get_wrong(decoder, bert_dir):
    import probes

    with pytest.raises(InputTooLong, match="give a shorter text"):
        stream(decoder, "word " * 200, parse("window:8"))
    with pytest.raises(BadOption, match="at least 2 tokens"):
        stream(decoder, "a", parse("window:8"))
    with pytest.raises(BadOption, match="unknown method"):
        stream(decoder, "a b c", parse("window:8"), method="fast")
    with pytest.raises(UnsupportedModel, match="encoder"):
        stream(probes.load(str(bert_dir)), "a b c d", parse("window:2"))


@pytest.mark.numeric
def test_the_methods_agree_through_the_reader(decoder):
    text = "The keeper lit the lamp at dusk, and the ships saw it from far away across the bay."
    a = stream(decoder, text, parse("snapkv:8+observe:2"))
    b = stream(decoder, text, parse("snapkv:8+observe:2"), method="masked")
    # fp32: each loss is a logsumexp over the vocabulary of logits ~10 in size, the two runs summing attention in
    # another order (one row, or the whole layer): a few hundred roundings of ~10
    from numeric import fp32

    assert torch.equal(a.evicted_at, b.evicted_at)
    assert float((a.losses - b.losses).abs().max()) <= fp32(256, 10.0)


def test_a_policy_on_some_heads_only(decoder):
    text = "The keeper lit the lamp at dusk, and the ships saw it from far away across the bay."
    some = stream(decoder, text, parse("window:4"), heads=[(0, 0), (1, 1)])
    assert some.policy == "window:4 on 0.0, 1.1"
    n = some.tokens
    assert bool((some.evicted_at[0, 0] < n).any()) and bool((some.evicted_at[1, 1] < n).any())
    assert bool((some.evicted_at[0, 1] == n).all()) and bool((some.evicted_at[1, 0] == n).all())
    full, every = stream(decoder, text, parse("full")), stream(decoder, text, parse("window:4"))
    assert full.kv_bytes > some.kv_bytes > every.kv_bytes
    with pytest.raises(BadOption, match="key/value head 0.9 is outside the model's key/value heads"):
        stream(decoder, text, parse("window:4"), heads=[(0, 9)])


@pytest.mark.numeric
def test_gemma3_streams_each_layer_by_its_own_rotary_table_and_a_text_past_its_window_is_refused(tmp_path):
    """Gemma 3 token by token through the KV lab's cache: each layer's new key is turned by its layer type's table
    (local θ 10,000; global θ 1,000,000, linear factor 8), so the full cache is the full pass (float64); turning every
    layer by one table is not. A text longer than its local layers' window is refused by name: the lab's cache slots
    do not implement the window."""
    import probes

    model = probes.load(str(make_gemma(tmp_path / "g3", family="gemma3", sliding_window=16)))
    ids = torch.randint(0, model.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    net = network64(model)
    with torch.inference_mode():
        got = run_stream(net, ids, plan(model, "full"))
        full = next_token_losses(net, ids, masked_pass(net, ids, {}))
        assert (got.losses - full).abs().max() <= F64
        net.rope = {kind: net.rope["sliding_attention"] for kind in net.rope}  # one table for every layer
        assert (run_stream(net, ids, plan(model, "full")).losses - full).abs().max() > 1e-6
    n = len(model.encode("the cat sat on the mat").input_ids[0])
    assert stream(model, "the cat sat on the mat", parse("window:4")).losses.shape[0] == n - 1  # within the window
    refused = "sliding-window layers .a window of 16 tokens.*text is [0-9]+ tokens: give a text of 16"
    with pytest.raises(UnsupportedModel, match=refused):
        stream(model, "the cat sat on the mat because it was warm and the dog was not, said the old man", parse("full"))
