"""Every registered family's from-scratch network keeps the contract the library calls it through: the
Protocols of ``probes/scratch/family.py`` (:class:`Network`, and :class:`DecoderNetwork` / :class:`RotaryNetwork`
where they apply), member by member and parameter by parameter, on a tiny random checkpoint of each family (its
conformance spec's ``sample``, with the Protocols it names: ``conformance.SPECS``)."""

import inspect
import types
import typing
from typing import Protocol

import pytest
import torch
from scratch.conformance import SPECS

from probes import families, hf
from probes.attention_math import additive_mask, allowed_keys
from probes.scratch.attention import attention
from probes.scratch.family import DecoderNetwork, Network, RotaryNetwork
from probes.scratch.hooks import LAYER_POINTS, Pass, point

TEXTS = ["the cat sat on the mat", "a dog"]  # a padded batch


def members(protocol: type) -> dict[str, object]:
    """The members a Protocol declares, inherited ones included (a subclass's own declaration wins)."""
    found: dict[str, object] = {}
    for cls in protocol.__mro__:
        if cls in (Protocol, typing.Generic, object):
            continue
        for name, value in vars(cls).items():
            if name == "__call__" or not name.startswith("_"):
                found.setdefault(name, value)
    return found


def _conforms(value, hint) -> bool:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_conforms(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    return isinstance(value, typing.get_origin(hint) or hint)


def _parameters(function) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # without self


def signature_problems(name: str, declared, got) -> list[str]:
    """What keeps ``got`` from standing where the Protocol's ``declared`` is called: a parameter missing or
    renamed, one passed by position that is not there, a keyword one that only takes positions, a default the
    Protocol promises and the network lacks (or gives another value), a new parameter without a default."""
    problems = []
    want, have = _parameters(declared), {p.name: p for p in _parameters(got)}
    positional = [p.name for p in _parameters(got) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, p in enumerate(want):
        q = have.get(p.name)
        if q is None:
            problems.append(f"{name}: no parameter {p.name!r}")
            continue
        if p.kind == p.POSITIONAL_OR_KEYWORD and positional[i:i + 1] != [p.name]:
            problems.append(f"{name}: {p.name!r} is not parameter {i + 1}")
        if p.kind == p.KEYWORD_ONLY and q.kind not in (q.KEYWORD_ONLY, q.POSITIONAL_OR_KEYWORD):
            problems.append(f"{name}: {p.name!r} cannot be passed by keyword")
        if p.default is not p.empty and q.default != p.default:
            problems.append(f"{name}: {p.name!r} defaults to {q.default!r}, not {p.default!r}")
    for q in have.values():
        if q.name not in {p.name for p in want} and q.default is q.empty and q.kind not in (q.VAR_POSITIONAL,
                                                                                             q.VAR_KEYWORD):
            problems.append(f"{name}: {q.name!r} is not in the Protocol and has no default")
    return problems


def contract_problems(net, protocol: type) -> list[str]:
    """Every member of ``protocol`` that ``net`` lacks, or has with an incompatible signature or type."""
    problems = []
    for name, declared in members(protocol).items():
        if isinstance(declared, property):
            if not hasattr(net, name):
                problems.append(f"no {name}")
                continue
            hint = typing.get_type_hints(declared.fget)["return"]
            if not _conforms(getattr(net, name), hint):
                problems.append(f"{name} is a {type(getattr(net, name)).__name__}, not {hint}")
            continue
        got = getattr(type(net), name, None)
        if not callable(got):
            problems.append(f"no method {name}")
            continue
        problems += signature_problems(name, declared, got)
    return problems


@pytest.fixture(params=[f.name for f in families.families()])
def built(request, family_model):
    """(family, its loaded tiny checkpoint, its network built by the record's ``network``)."""
    family = next(f for f in families.families() if f.name == request.param)
    assert family.name in SPECS, f"add a tiny {family.title} checkpoint to conformance.SPECS"
    model = family_model(family.name, SPECS[family.name].sample)
    assert model.family is family
    return family, model, family.network(model.hf.state_dict(), model.config, model.name)


def test_the_network_keeps_its_protocols(built):
    family, _model, net = built
    expected = SPECS[family.name].protocols
    assert (RotaryNetwork in expected) == (family.positions == "rotary")
    assert (DecoderNetwork in expected) == (family in families.decoders())  # the record's class says it too
    for protocol in (Network, *expected):
        assert contract_problems(net, protocol) == [], protocol.__name__
    for protocol in (Network, DecoderNetwork, RotaryNetwork):  # the runtime check agrees, both ways
        assert isinstance(net, protocol) == (protocol in (Network, *expected)), protocol.__name__


def test_the_members_return_what_the_protocol_says(built):
    family, model, net = built
    enc = model.encode(TEXTS)
    batch, length = enc.input_ids.shape
    n = len(net.layers)

    def attend(layer, q, k, v, spec, via):  # eager attention, as scratch.run_with_hooks runs it
        allowed = additive_mask(allowed_keys(enc.attention_mask, spec.causal, window=spec.window), q.dtype)
        return attention(q, k, v, allowed, spec.scale, via.edit_of("attn.scores", layer),
                         via.edit_of("attn.pattern", layer))[0]

    def reached(into):  # a read hook on every point: the names in the order the network reaches them
        return {name: lambda x, full: into.append((full, x)) for name in ("embed", *LAYER_POINTS, "final", "logits")}

    with torch.inference_mode():
        seen: list[tuple[str, torch.Tensor]] = []  # (point, tensor), in the order reached
        resumed: list[tuple[str, torch.Tensor]] = []
        logits, _ = Pass(net, attend, reached(seen))(enc.input_ids, enc.attention_mask, enc.token_type_ids)
        recorded = [x for name, x in seen if name.endswith("resid_pre") or name == "final"]
        Pass(net, attend, reached(resumed))(enc.input_ids, enc.attention_mask, enc.token_type_ids, logits=False,
                                            resume=(1, recorded[1]))
    every = [point(i, name) for i in range(n) for name in LAYER_POINTS]
    assert [name for name, _ in seen] == ["embed", *every, "final", *(["logits"] if logits is not None else [])]
    assert [name for name, _ in resumed] == [*every[len(LAYER_POINTS):], "final"]
    assert n == model.n_layers and len(recorded) == n + 1
    assert all(x.shape == (batch, length, model.config.hidden_size) for x in recorded)
    assert logits is None or logits.shape[:2] == (batch, length)
    residual = [x for name, x in seen if name == point(n - 1, "resid_post")]
    q, k, v = net.qkv(n - 1, recorded[n - 1])
    d = family.head_dim(model.config)
    assert q.shape == (batch, model.n_heads, length, d) and k.shape == v.shape == (batch, model.n_kv_heads, length, d)
    weight, bias = net.head_out(n - 1)
    assert weight.shape == (model.n_heads, d, model.config.hidden_size)
    assert bias is None or bias.shape == (model.config.hidden_size,)
    if isinstance(net, RotaryNetwork):  # d wide, or r < d (a partial rotary): as wide as Hugging Face's own tables
        reference = hf.forward(model, enc)
        for layer in range(n):  # each layer's tables (ModernBERT's differ between its global and local layers)
            tables = reference.rotary_of(layer)
            assert tables is not None  # a rotary family's trace has every layer's
            r = tables[0].shape[-1]
            assert r <= d and r % 2 == 0
            assert all(t.shape == (1, length, r) for t in net.rotary(length, enc.input_ids.device, layer))
    if isinstance(net, DecoderNetwork):
        assert net.unembedding is net.lm_head
        linear, bias = net.final_norm(residual[0][0, 0])
        assert linear(residual[0][0, 0]).shape == (model.config.hidden_size,)
        assert bias is None or bias.shape == (model.config.hidden_size,)

