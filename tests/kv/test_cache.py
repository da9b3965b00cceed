"""Each policy's rule for what to evict, on attention weights made up for the test, against the rule written out."""

import pytest
import torch
import torch.nn.functional as F

from probes.kv.cache import Keeper, Slots
from probes.kv.policies import parse


def keeper(name, heads=1, group=2, capacity=8):
    return Keeper(parse(name), range(heads), group, capacity, scale=0.5, dtype=torch.float64, device="cpu")


def test_h2o_evicts_the_least_attended_of_the_older_keys():
    k = keeper("h2o:4+recent:2", capacity=4)
    positions = torch.tensor([[0, 1, 2, 3]])
    got = None
    for count, probs in ((3, [0.1, 0.5, 0.2, 0.0]), (4, [0.3, 0.1, 0.3, 0.3])):  # two steps of 2 query heads
        k.count = count  # keys held: full at the second step
        row = torch.tensor([probs, probs], dtype=torch.float64)
        got = k.choose(3, positions, row, torch.zeros(2, 4), torch.zeros(1, 4, 4))
    # received: key 0 got 2 × (0.1 + 0.3) = 0.8, key 1 2 × (0.5 + 0.1) = 1.2; keys 2 and 3 are the recent two
    assert got is not None  # the cache was full: a key left
    assert got.tolist() == [0]


def test_h2o_forgets_what_a_reused_slot_received():
    k = keeper("h2o:4+recent:1", capacity=4)
    k.state[0] = torch.tensor([5.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    k.placed(torch.tensor([0]))
    assert k.state[0, 0] == 0


def test_tova_evicts_the_key_the_newest_query_looks_at_least():
    k = keeper("tova:4", capacity=4)
    k.count = 4
    positions = torch.tensor([[0, 1, 2, 3]])
    row = torch.tensor([[0.4, 0.05, 0.05, 0.5], [0.4, 0.15, 0.0, 0.45]], dtype=torch.float64)
    # averaged over the 2 query heads: key 1 0.10, key 2 0.025: key 2 leaves; key 3 (the newest) never
    assert k.choose(3, positions, row, torch.zeros(2, 4), torch.zeros(1, 4, 4)).tolist() == [2]


def test_nothing_leaves_before_the_cache_is_full():
    k = keeper("tova:8")
    k.count = 3
    positions = torch.tensor([[0, 1, 2, -1, -1, -1, -1, -1]])
    assert k.choose(2, positions, torch.full((2, 8), 0.1, dtype=torch.float64), torch.zeros(2, 4),
                    torch.zeros(1, 8, 4)) is None


def test_snapkv_votes_as_the_rule_says():
    """The last w queries' softmax over the held keys (each up to its own position), averaged over the queries and
    the group, a mean over 5 neighbours along the older keys (zero padding counted), the lowest older key out."""
    torch.manual_seed(0)
    d, n, w, budget = 4, 10, 3, 10
    k = keeper(f"snapkv:{budget}+observe:{w}", capacity=n)
    keys = torch.randn(1, n, d, dtype=torch.float64)
    order = torch.randperm(n)  # slots hold the positions in any order
    positions = order[None].clone()
    queries = torch.randn(n, 2, d, dtype=torch.float64)
    probs = torch.zeros(2, n, dtype=torch.float64)
    got = None
    for t in range(n - w, n):
        k.count = t + 1  # full at the last step
        got = k.choose(t, positions, probs, queries[t], keys)
    # the rule, written out over positions (not slots)
    by_position = keys[0][order.argsort()]  # key of position p
    q = queries[n - w:]  # [w, 2, d]
    scores = torch.einsum("wgd,pd->gwp", q, by_position) * 0.5
    future = torch.arange(n)[None, None, :] > torch.arange(n - w, n)[None, :, None]
    vote = torch.softmax(scores.masked_fill(future, float("-inf")), -1).mean(1).mean(0)  # [n]
    older = n - w
    pooled = F.avg_pool1d(vote[None, None, :older], 5, 1, 2)[0, 0]
    want_position = int(pooled.argmin())
    assert got is not None  # the cache was full: a key left
    assert int(positions[0, got[0]]) == want_position


def test_slots_fill_free_slots_and_record_when_keys_leave():
    slots = Slots([parse("window:3")], capacity=3, group=1, scale=1.0, tokens=6, dtype=torch.float64, device="cpu")
    for t in range(6):
        slots.place(t)
        row = slots.allowed(t).double() / slots.allowed(t).sum()
        slots.after(t, row, torch.zeros(1, 2), torch.zeros(1, 3, 2))
        assert slots.held() == min(t + 1, 3) - (1 if t >= 2 else 0)
    assert slots.evicted_at[0].tolist() == [3, 4, 5, 6, 6, 6]
    assert sorted(slots.positions[0].tolist()) == [-1, 4, 5]


@pytest.mark.parametrize("name", ["strided:3+window:2"])
def test_strided_reads_its_pattern_from_a_full_cache(name):
    k = keeper(name, capacity=8)
    positions = torch.arange(8)[None]
    # query 7 reads the last 2 keys (6, 7) and every 3rd before: 4, 1
    assert k.visible(7, positions)[0].nonzero()[:, 0].tolist() == [1, 4, 6, 7]
