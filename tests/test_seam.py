"""The seam (probes.seam): a reader runs where its model or trace is, a server runs only registered readers, and
local and remote models and traces are the same Protocols."""

import inspect
from dataclasses import dataclass, field

import pytest

import probes
from probes import parity, remote, scratch
from probes.errors import ProbesError
from probes.seam import READERS, ModelLike, Request, TraceLike, reader, registered


@dataclass
class Elsewhere:
    """A backend that is not this process: it records what it was asked to call, and reports the progress the
    reader would have made there (its values' count)."""

    calls: list = field(default_factory=list)
    local = False

    def run(self, model, request):
        raise AssertionError("not asked")

    def call(self, name, fn, args, kwargs, progress=None):
        self.calls.append((name, args, kwargs))
        if progress is not None:
            progress(len(args[1]))
        return "ran there"


@dataclass
class Held:
    """A model or trace held by ``Elsewhere``."""

    home: Elsewhere


@reader
def summed(model, values, scale=1, progress=None):
    if progress is not None:
        progress(len(values))
    return sum(values) * scale


def test_a_reader_runs_here_on_local_arguments_and_there_on_remote_ones(minilm):
    told: list[int] = []
    assert summed(minilm, [1, 2], 3, told.append) == 9 and told == [2]  # local: the function itself
    away = Elsewhere()
    assert summed(Held(away), [1, 2], scale=3, progress=told.append) == "ran there"
    # sent by its registered name; the progress callback stays here, passed by name or by position, and the backend
    # reports the progress made there to it
    assert away.calls == [("tests.test_seam:summed", (Held(away), [1, 2], 3), {})] and told == [2, 2]
    assert summed(Held(away), [1, 2, 3], 1, told.append) == "ran there" and told == [2, 2, 3]
    assert away.calls[1] == ("tests.test_seam:summed", (Held(away), [1, 2, 3], 1), {})
    assert summed([1], [5], 2, told.append) == 10 and len(away.calls) == 2  # no model or trace: here
    assert minilm.backend.call("x", inspect.unwrap(summed), (minilm, [1, 2, 3]), {}, told.append) == 6  # a plain call
    assert told == [2, 2, 3, 1, 3]
    assert summed("text", [1], 1) == 1 and summed(None, [4]) == 4  # a string, None: no home, here


def test_only_registered_readers_of_the_package_can_be_asked_for_by_name():
    assert registered("probes.parity:check") is READERS["probes.parity:check"]
    assert registered("probes.parity:check") is inspect.unwrap(parity.check)
    assert registered("probes.effects.lens:logit_lens").__name__ == "logit_lens"  # imported by asking for it
    for name in ("os:system", "probes.parity:attention_tolerance", "probes.parity:os.system",
                 "probes.nowhere:f", "probes.parity:", "tests.test_seam:summed", "probes.models:load"):
        with pytest.raises(ProbesError, match="not one of the library's readers"):
            registered(name)
    with pytest.raises(TypeError, match="only module-level functions"):
        reader(lambda model: model)


def test_models_and_traces_local_and_remote_are_the_same_protocols(minilm):
    trace = probes.run(minilm, "the cat sat")
    assert isinstance(minilm, ModelLike) and isinstance(trace, TraceLike)
    assert minilm.backend.local and minilm.home is minilm.backend and trace.home is None
    assert issubclass(remote.RemoteTrace, remote.TokensAndRules)
    # the local run is the backend's run: a Trace of the same numbers as the runner's
    again = minilm.backend.run(minilm, Request("the cat sat"))
    assert again.attention(2, 3).equal(trace.attention(2, 3))
    # a served model has no weights here: no member that would raise for it is inherited
    def members(cls):
        return set(dir(cls)) | set(cls.__dataclass_fields__)

    for member in ("hf", "cast", "network"):
        assert member not in members(remote.RemoteModel) and member in members(probes.LocalModel)


def test_the_from_scratch_network_is_kept_by_the_model_not_written_from_below(minilm):
    assert scratch.build(minilm) is minilm.network() is minilm._scratch
    copy = minilm.cast(__import__("torch").float64)
    assert copy._scratch is None and copy.network() is not minilm.network()
