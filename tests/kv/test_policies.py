"""Policies by name: each spelling read back, and every mistake refused in one line that says what to write; a new
policy is one class, found by the parser, the help, the runs, the sweep and the CLI; nothing else names a policy."""

import ast
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from probes.errors import BadOption
from probes.kv.policies import (
    FAR,
    MENU,
    POLICIES,
    Full,
    Policy,
    Sinks,
    Window,
    at_least,
    kinds,
    parse,
    parse_list,
    register,
)


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
    assert not parse("strided:4+window:4").evicts and not Full().evicts
    assert parse("window:8").covers(8) and not parse("window:8").covers(9)
    assert parse("strided:1+window:2").covers(100) and not parse("strided:4+window:2").covers(100)


@pytest.mark.parametrize("name", ["window:٣", "window:３", "h2o:８", "sinks:٤+window:8"])
def test_a_number_is_ascii_digits(name):
    """'٣' (Arabic-Indic three) and '３' (fullwidth three) are digits to ``\\d`` and to int(), not to a policy."""
    with pytest.raises(BadOption, match="must be a whole number"):
        parse(name)


def test_a_kind_without_a_number_refuses_one():
    with pytest.raises(BadOption) as err:
        parse("full:3")
    assert str(err.value) == "policy 'full:3': full takes no number: write full"
    assert parse("full") == Full() and parse(" FULL ") == Full()


def test_the_old_way_of_building_a_policy_still_builds_it_with_a_warning():
    with pytest.warns(DeprecationWarning, match="parse"):
        # the old spelling, which the metaclass's __call__ builds; mypy reads only Policy's own fields
        old = Policy("sinks", budget=256, sinks=4, recent=252)  # type: ignore[misc, arg-type]
    assert old == parse("sinks:4+window:252") and type(old) is Sinks
    with pytest.raises(BadOption, match="unknown policy kind 'lru'"):
        Policy("lru")  # type: ignore[arg-type]  # the old spelling: the metaclass refuses the kind


def test_a_policy_is_read_only_and_a_key():
    policy = parse("h2o:16")
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.kind = "tova"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.budget = 8  # type: ignore[misc]
    assert {parse("window:8"), parse("window:8"), parse("sinks:1+window:7")} == {Window(budget=8, recent=8),
                                                                                  parse("sinks:1+window:7")}
    assert parse("window:8") != Sinks(budget=8, recent=8)  # the same numbers, another policy


# -- a policy is one class ----------------------------------------------------------------------------------------

TEXT = "The cat sat on the mat, and the dog watched it from the door. She said that he would come back."


@pytest.fixture
def oldest():
    """A toy policy, registered here and nowhere else: ``oldest:B`` evicts the oldest key, position 0 included (a
    window by another rule; the streamed runs must agree with window:B bit for bit)."""

    @register
    class Oldest(Policy):
        kind = "oldest"
        forms = {"oldest": ()}
        syntax = ("oldest:B",)
        words = "oldest out"

        @classmethod
        def read(cls, word, parts, whole):
            return cls(budget=at_least(parts["oldest"], 1, "the budget", whole))

        def victim(self, state, step):
            return torch.where(step.positions >= 0, step.positions, FAR).argmin(-1)

    try:
        yield Oldest
    finally:
        POLICIES.pop("oldest")


def test_a_new_policy_is_one_class(oldest, llama_dir, capsys):
    import probes
    from probes.cli import main
    from probes.kv import policies
    from probes.kv.stream import stream
    from probes.kv.sweep import KINDS, policy_at, sweep_plan

    policy = parse("oldest:6")
    assert type(policy) is oldest and policy.kind == "oldest" and policy.name == "oldest:6" and policy.budget == 6
    assert parse(policy.name) == policy and parse_list("full,oldest:6") == [Full(), policy]
    with pytest.raises(BadOption, match="the budget must be at least 1"):
        parse("oldest:0")
    assert policies.SYNTAX.endswith(", oldest:B") and policies.KINDS[-1] == "oldest"
    assert KINDS["oldest"] == "oldest out" and list(KINDS)[-1] == "oldest"  # the sweep's menu
    assert policy_at("oldest", 6) == policy
    model = probes.load(str(llama_dir))
    tokens = int(stream(model, TEXT, Full(), method="masked").tokens)
    plan = sweep_plan(["window", "oldest"], [6, 500], tokens)
    assert [(r.kind, r.policy) for r in plan.runs] == [("window", parse("window:6")), ("oldest", policy)]
    window = parse("window:6")
    for method in ("streamed", "masked"):  # the same keys leave as under window:6, so the same losses
        got, want = stream(model, TEXT, policy, method=method), stream(model, TEXT, window, method=method)
        assert torch.equal(got.evicted_at, want.evicted_at) and torch.equal(got.losses, want.losses)
        assert got.policy == "oldest:6" and got.kv_bytes == want.kv_bytes
    with pytest.raises(SystemExit):
        main(["kv", "--help"])
    assert "oldest:B" in " ".join(capsys.readouterr().out.split())
    assert main(["kv", "--model", str(llama_dir), "--text", TEXT, "--policies", "window:6,oldest:6", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["policies"]
    assert [r["policy"] for r in rows] == ["window:6", "oldest:6"] and rows[0]["perplexity"] == rows[1]["perplexity"]


def test_the_toy_policy_left_the_registry():
    assert "oldest" not in POLICIES and "oldest" not in MENU
    with pytest.raises(BadOption, match="unknown policy 'oldest'"):
        parse("oldest:6")


def test_a_registered_word_is_not_taken_twice():
    class Again(Policy):
        kind = "again"
        forms = {"window": ()}
        syntax = ("window:W",)

    with pytest.raises(ValueError, match="starts with window"):
        register(Again)
    assert "again" not in POLICIES


# -- nothing outside the policies names one -----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def kind_tests(source: str, words: set[str]) -> list[int]:
    """The lines of ``source`` that compare an attribute ``.kind`` with a policy's word (``p.kind == "h2o"``,
    ``p.kind in ("window", "sinks")``, ``"tova" != p.kind``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides):
            continue
        named = set()
        for side in sides:
            items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            named |= {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
        if named & words:
            lines.append(node.lineno)
    return sorted(lines)


def test_no_module_outside_the_policies_tests_a_policy_by_its_kind():
    words = set(POLICIES) | set(kinds())
    policies = ROOT / "probes" / "kv" / "policies"
    files = [p for p in (ROOT / "probes").rglob("*.py") if policies not in p.parents]
    assert len(files) > 50
    found = [f"{p.relative_to(ROOT)}:{line}" for p in files
             for line in kind_tests(p.read_text(encoding="utf-8"), words)]
    assert found == [], "ask the policy (a property or a method of its class), not its kind"


def test_the_kind_check_sees_one():
    words = set(POLICIES) | set(kinds())
    sample = ('if p.kind == "h2o":\n    pass\nok = [x for x in xs if x.kind in ("window", "sinks")]\n'
              'fine = frame[frame.kind == "k"]\nalso = p.kind == other\nback = "tova" != q.policy.kind\n')
    assert kind_tests(sample, words) == [1, 3, 6]
