"""Each key/value head cut alone, one layer at a time (probes.kv.layered): the same rows as head_effects (the
token-by-token shadow, each cut a whole masked pass) in float64, on both tiny decoders and every kind of policy, with
a bar that counts every layer-step once and ends at its total."""

import pytest
import torch
from numeric import F64

from probes.kv import parse
from probes.kv.layered import head_effects_layered
from probes.kv.stream import head_effects

TEXT = "The keeper lit the lamp at dusk, and the ships saw it from far away across the cold grey water."


@pytest.mark.numeric
def test_the_layered_cut_equals_head_effects(decoder):
    model = decoder.cast(torch.float64)
    policies = [parse(p) for p in ("full", "window:6", "sinks:2+window:6", "h2o:8", "tova:8", "snapkv:10",
                                   "strided:4+window:4")]
    calls: list[tuple[int, int]] = []
    got = head_effects_layered(model, TEXT, policies, progress=lambda *a: calls.append(a))
    want = head_effects(model, TEXT, policies)
    assert len(got.rows) == len(want.rows) == 6 * model.n_layers * model.n_kv_heads  # full: nothing to cut
    assert abs(got.full_loss - want.full_loss) <= F64 and got.tokens == want.tokens
    for mine, theirs in zip(got.rows, want.rows, strict=True):
        assert {k: mine[k] for k in ("policy", "layer", "kv_head", "query_heads")} == \
               {k: theirs[k] for k in ("policy", "layer", "kv_head", "query_heads")}
        assert abs(mine["loss_change"] - theirs["loss_change"]) <= F64, mine
        assert abs(mine["mass"] - theirs["mass"]) <= F64
        assert abs(mine["seen_fraction"] - theirs["seen_fraction"]) <= F64
    assert any(abs(r["loss_change"]) > 1e-4 for r in got.rows)  # cuts that change the loss
    for name, w in want.watched.items():
        assert torch.equal(got.watched[name].evicted_at.long(), w.evicted_at.long()), name
    done = [d for d, _ in calls]
    assert done == sorted(done) and calls[-1][0] == calls[-1][1]  # one bar, to its end
