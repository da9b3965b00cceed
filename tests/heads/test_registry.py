"""The probe registry: one record per probe, collected from the probe files, read by the CLI, the
checkpointed runner and the Heads page."""

import argparse
import sys

import pandas as pd
import pytest

from probes.cli import build_parser
from probes.datasets import catalog
from probes.errors import BadData
from probes.heads import registry
from probes.heads.registry import Probe, for_data, get, probes

ORDER = ["positional", "syntactic", "coreference", "lexical", "induction", "patterns"]


def test_every_record_is_complete_and_in_order():
    found = probes()
    assert list(found) == ORDER
    for name, probe in found.items():
        assert isinstance(probe, Probe) and probe.name == name
        assert probe.about and "\n" not in probe.about
        for part in (probe.read_items, probe.score, probe.combine, probe.reads, probe.texts):
            assert callable(part), (name, part)
        assert probe.default_data is None or probe.default_data in catalog.BUILTIN
        # the file that holds the record holds the probe's code
        assert probe.score.__module__.startswith("probes.heads."), name
    assert [p.default_data for p in found.values()] == ["ewt-dev", "ewt-dev", "winobias", "ewt-dev", None, "ewt-dev"]
    assert found["induction"].encodings is not None  # builds its own inputs; the others read texts
    assert all(p.encodings is None for name, p in found.items() if name != "induction")


def _profile_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["profile"]


def _probe_choices() -> list[str]:
    """The profile command's ``--probe`` choices."""
    probe = next(a for a in _profile_parser()._actions if a.dest == "probe")
    assert probe.choices is not None, "--probe has no choices"
    return list(probe.choices)


def test_cli_probe_choices_are_the_registry_and_all():
    assert _probe_choices() == [*probes(), "all"]


def test_which_probes_read_a_data_set():
    names = lambda data: [p.name for p in for_data(data)]  # noqa: E731
    assert names(None) == names("") == ORDER
    assert names("winobias") == names("mine.jsonl") == ["coreference", "induction"]
    for data in ("ewt-dev", "ewt-test", "x.conllu", "x.txt"):
        assert names(data) == ["positional", "syntactic", "lexical", "induction", "patterns"], data


def test_unknown_probe_names_the_choices():
    with pytest.raises(BadData, match=r"unknown probe 'nope': choose one of positional, syntactic, coreference, "
                                      r"lexical, induction, patterns or all"):
        get("nope")


def test_loaders_read_the_default_data_and_refuse_what_does_not_suit(tmp_path):
    for probe in probes().values():
        items = probe.items(None, 3)
        assert len(items) == 3, probe.name
    assert get("induction").items("winobias", 4) == [0, 1, 2, 3]  # random sequences: the data is not read
    assert len(get("positional").items(None, None)) > 1000  # no limit: all of ewt-dev
    plain = tmp_path / "plain.txt"
    plain.write_text("A plain sentence .\nAnother one\n")
    assert get("positional").items(str(plain), None) == [["A", "plain", "sentence", "."], ["Another", "one"]]
    for name, data, says in [
        ("syntactic", str(plain), "the syntactic probe needs parsed sentences (ewt-* or a .conllu)"),
        ("lexical", "winobias", "the lexical probe needs part-of-speech tags"),
        ("coreference", "ewt-dev", "ewt-dev: the coreference probe needs pronoun/antecedent items"),
        ("patterns", str(tmp_path / "missing.txt"), "no data file"),
        ("positional", str(tmp_path / "x.csv"), "no data file"),
    ]:
        with pytest.raises(BadData, match=says.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
            get(name).items(data, 2)
    other = tmp_path / "x.csv"
    other.write_text("a,b\n")
    with pytest.raises(BadData, match=r"unknown data format '.csv'"):
        get("positional").items(str(other), 2)


def test_a_new_probe_is_one_file_with_its_record(tmp_path, monkeypatch):
    from probes import heads

    (tmp_path / "zz_length.py").write_text('''
import pandas as pd

from probes.heads.engine import token_attention
from probes.heads.registry import Probe, from_data


def lengths(items, traces):
    n = [len(tokens) for tokens, _ in token_attention(traces)]
    return pd.DataFrame([dict(probe="length", label="tokens", layer=0, head=0, score=sum(n) / len(n),
                              baseline=float("nan"), n=len(n), mean_attention=float("nan"))])


PROBES = (Probe(name="length", about="how long the inputs are", order=35, default_data="ewt-dev",
                read_items=from_data(), score=lengths),)
''')
    monkeypatch.setattr(heads, "__path__", [*heads.__path__, str(tmp_path)])
    probes.cache_clear()
    try:
        assert list(probes()) == ["positional", "syntactic", "coreference", "length", "lexical", "induction",
                                  "patterns"]
        assert "length" in _probe_choices()
        assert "length" in [p.name for p in for_data("ewt-dev")]
    finally:
        monkeypatch.undo()
        probes.cache_clear()
        sys.modules.pop("probes.heads.zz_length", None)
    assert "length" not in probes()


def test_a_new_probe_runs_through_profile(minilm, tmp_path, monkeypatch):
    """The checkpointed runner hands any record the Traces of its items (here two chunks)."""
    from probes.heads import profile as prof

    seen = []

    def score(items, traces):
        traces = list(traces)
        seen.append((len(items), sum(t.batch_size for t in traces)))
        return pd.DataFrame([dict(probe="count", label="items", layer=0, head=0, score=1.0, baseline=0.5,
                                  n=len(items), mean_attention=float("nan"))])

    record = Probe(name="count", about="counts", order=99, default_data="ewt-dev", read_items=registry.from_data(),
                   score=score)
    monkeypatch.setattr(prof, "get", lambda name: record)
    frame = prof.profile(minilm, ["count"], None, 9, tmp_path / "c.csv", batch_size=4, checkpoint_every=5)
    assert seen == [(5, 5), (4, 4)]
    assert frame[["n", "score", "baseline"]].values.tolist() == [[9, 1.0, 0.5]]
