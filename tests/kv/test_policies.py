"""Policies by name: each spelling read back, and every mistake refused in one line that says what to write."""

import pytest

from probes.errors import BadOption
from probes.kv.policies import Policy, parse, parse_list


@pytest.mark.parametrize("name, kind, budget, sinks, recent", [
    ("full", "full", None, 0, 0),
    ("window:256", "window", 256, 0, 256),
    ("sinks:4+window:252", "sinks", 256, 4, 252),
    ("h2o:256", "h2o", 256, 0, 128),
    ("h2o:256+recent:64", "h2o", 256, 0, 64),
    ("tova:256", "tova", 256, 0, 0),
    ("snapkv:256", "snapkv", 256, 0, 32),
    ("snapkv:40+observe:8", "snapkv", 40, 0, 8),
    ("strided:64+window:32", "strided", None, 0, 32),
])
def test_each_name_reads_back(name, kind, budget, sinks, recent):
    policy = parse(name)
    assert (policy.kind, policy.budget, policy.sinks, policy.recent) == (kind, budget, sinks, recent)
    assert parse(policy.name) == policy
    assert policy.name == name


def test_streaming_is_sinks_and_window():
    assert parse("streaming:256") == parse("sinks:4+window:252")
    assert parse("streaming:16+sinks:2") == parse("sinks:2+window:14")
    assert parse(" Window:8 ") == parse("window:8")  # spaces and case forgiven


@pytest.mark.parametrize("name, says", [
    ("window:0", "the window must be at least 1"),
    ("streaming:4+sinks:4", "4 sinks leave no room for a window in a budget of 4"),
    ("streaming:4+sinks:9", "9 sinks leave no room"),
    ("lru:256", "unknown policy 'lru'"),
    ("window", "window needs a number"),
    ("window:abc", "must be a whole number"),
    ("window:-3", "must be a whole number"),
    ("h2o:64+recent:64", "recent:64 must be below the budget 64"),
    ("snapkv:16+observe:20", "observe:20 must be below the budget 16"),
    ("sinks:4", "sinks need a window"),
    ("strided:8", "strided needs its local window"),
    ("tova:64+recent:8", "tova does not take recent"),
    ("window:8+window:9", "names window twice"),
])
def test_mistakes_are_one_line(name, says):
    with pytest.raises(BadOption) as err:
        parse(name)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_a_list():
    assert [p.name for p in parse_list("full, window:8,h2o:16")] == ["full", "window:8", "h2o:16"]
    with pytest.raises(BadOption, match="listed twice"):
        parse_list("window:8,window:8")
    with pytest.raises(BadOption, match="no policy given"):
        parse_list(" , ")


def test_what_a_policy_says_of_itself():
    assert parse("window:8").evicts and not parse("window:8").scored
    assert parse("h2o:8").scored and parse("snapkv:8").scored and parse("tova:8").scored
    assert not parse("strided:4+window:4").evicts and not Policy("full").evicts
    assert parse("window:8").covers(8) and not parse("window:8").covers(9)
    assert parse("strided:1+window:2").covers(100) and not parse("strided:4+window:2").covers(100)
