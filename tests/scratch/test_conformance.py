"""Every registered family's from-scratch network against Hugging Face, option by option, on tiny random checkpoints
(each family's options, inputs and refusals: ``conformance.SPECS``): bit-identical in eager fp32 (attention, q, k, v,
hidden states, logits), the lazy backends within their tolerance, proven in float64 on eager and sdpa (≤ 1e-10),
every unimplemented option refused by name while the Hugging Face view still works, every weight the network would
not use refused. A family added to the registry is checked here once its spec is written; what is peculiar to a
family stays in its own file."""

import contextlib
import json
import re
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
import torch
from numeric import F64
from scratch.conformance import ENGLISH, SPECS, cases, compare, load, record

import probes
from probes import families, hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


@pytest.mark.parametrize("family", [f.name for f in families.families()])
def test_every_registered_family_has_a_spec(family):
    assert family in SPECS, (f"the family {family!r} has no checkpoint maker in the conformance suite: add its Spec "
                             "to SPECS in tests/scratch/conformance.py")


def test_every_spec_is_a_registered_family():
    assert set(SPECS) <= {f.name for f in families.families()}


def _has_head(model) -> bool:
    return model.hf.get_output_embeddings() is not None


@pytest.mark.parametrize("family, option", cases(lambda spec: tuple(spec.options)))
def test_every_option_is_bit_identical_to_hugging_face(family_model, family, option):
    spec, model = SPECS[family], family_model(family, option)
    assert model.family is record(family) and model.scratch_supported, model.scratch_problem
    causal = model.family.causal(model.config)
    assert model.is_causal == scratch.build(model).causal == causal
    for given in spec.inputs:
        enc = given.encode(model)
        ours = scratch.forward(model, enc)
        report = parity.compare(hf.forward(model, enc), ours)
        assert report.passed, report.to_text()
        assert ours.is_causal == causal
        if causal:  # no real query sees the future (a padding row's numbers mean nothing)
            real = enc.attention_mask.bool()
            future = torch.ones(real.shape[1], real.shape[1], dtype=torch.bool).triu(diagonal=1)
            seen = (real[:, :, None] & real[:, None, :] & future)[:, None]  # [B, 1, L, L]
            assert all((ours.layer_attention(layer).masked_select(seen) == 0).all() for layer in range(model.n_layers))
        assert len(report.per_layer) == model.config.num_hidden_layers
        assert all(len(lp.per_head) == model.config.num_attention_heads for lp in report.per_layer)
        assert (report.logits_max_abs_diff is None) == (not _has_head(model)), report.to_text()
        if option in spec.rounded:
            continue  # within fp32 rounding (passed) only
        assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
        assert report.qkv_max_abs_diff == 0 and report.logits_max_abs_diff in (None, 0.0), report.to_text()


def _lazy_cases() -> list:
    """sdpa on every option, flash (the Triton kernel: compiled on CUDA, else under TRITON_INTERPRET) on the spec's."""
    return [pytest.param(*case.values, backend, id=f"{case.id}-{backend}")
            for backend, which in (("sdpa", lambda spec: tuple(spec.options)), ("flash", lambda spec: spec.lazy))
            for case in cases(which)]


@pytest.mark.parametrize("family, option, backend", _lazy_cases())
def test_the_lazy_backends_recover_the_same_attention(family_model, family, option, backend):
    spec = SPECS[family]
    model = family_model(family, option)
    for given in spec.inputs[:spec.lazy_inputs]:
        enc = given.encode(model)
        trace = scratch.forward(model, enc, backend=backend)
        report = parity.compare(hf.forward(model, enc), trace)
        assert report.passed, report.to_text()
        assert report.candidate == f"scratch/{backend}"
        assert 0 < report.attention_max_abs_diff <= report.tolerance["attention"]  # recomputed: not bit-identical
        # the fused kernels cannot soft-cap scores: the capped layers run the formula, and the Trace says so
        capped = any(model.family.softcap(model.config, layer) is not None for layer in range(model.n_layers))
        assert capped == ("softcap_math" in trace.backend or "soft-caps" in trace.note), (trace.backend, trace.note)
        _keys_outside_each_window_get_nothing(model, trace)


def _keys_outside_each_window_get_nothing(model, trace):
    """Each layer with a sliding window of w (the record's) gives exactly 0 to every key w or more positions away
    (either side: under a causal mask the past one is all there is), in the rows the lazy Trace recovers; where other
    layers have no window, they reach past it."""
    windows = [model.family.window(model.config, layer) for layer in range(model.n_layers)]
    if all(w is None for w in windows):
        return
    positions = torch.arange(trace.input_ids.shape[1])
    gap = (positions[:, None] - positions[None, :]).abs()  # padding keeps its rows' and columns' distances
    for layer, w in enumerate(windows):
        a = trace.layer_attention(layer)  # [B, H, L, L], padding rows and columns 0
        if w is not None:
            assert (a[:, :, gap >= w] == 0).all(), (layer, w)
        else:
            assert (a[:, :, gap >= min(w for w in windows if w is not None)] > 0).any(), layer


@pytest.mark.parametrize("family, option", cases(lambda spec: spec.proven()))
def test_every_option_is_proven_in_float64_on_both_backends(family_model, family, option):
    """The machine-independent verdict: Hugging Face's model cast to float64 and ours agree to ≤ 1e-10. Where Hugging
    Face's own code cannot run in float64 (a step fixed in fp32), the proof is refused by name, and made against its
    code with that step in the input's dtype (the spec's float64_reference)."""
    spec, model = SPECS[family], family_model(family, option)
    reference: Callable[[], AbstractContextManager] = contextlib.nullcontext
    if why := model.family.float64_refused(model.config):
        with pytest.raises(UnsupportedModel, match=re.escape(why)):
            parity.check(model, ENGLISH, dtype="float64")
        assert spec.float64_reference is not None, f"{family} refuses float64 ({why}): its spec needs a reference"
        reference = spec.float64_reference
    model = model.cast(torch.float64)
    with reference():
        for given in spec.inputs[:spec.proof_inputs]:
            enc = given.encode(model)
            for backend in ("eager", "sdpa"):
                report = compare(model, enc, backend)
                assert report.proven and report.attention_max_abs_diff <= F64, (backend, report.to_text())
                assert report.qkv_max_abs_diff is not None, report.to_text()  # both passes keep q, k and v
                assert report.qkv_max_abs_diff <= F64 and report.hidden_max_rel_diff <= F64, report.to_text()
                assert (report.logits_max_rel_diff is None) == (not _has_head(model))
                assert report.logits_max_rel_diff is None or report.logits_max_rel_diff <= FLOAT64_TOLERANCES["logits"]


@pytest.mark.parametrize("family", [f.name for f in families.families() if f.pairs and f.name in SPECS])
def test_a_pair_is_encoded_as_the_record_says(family_model, family):
    """One item of two texts, between the tokenizer's separators; token types where the record takes them (BERT's
    second text reads type 1), none where it does not."""
    model = family_model(family, SPECS[family].sample)
    tok = model.tokenizer
    enc = model.encode("first sentence", "second sentence")
    ids = enc.input_ids[0].tolist()
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert ids.count(tok.sep_token_id) == SPECS[family].separators
    if model.family.token_types:
        assert enc.token_type_ids is not None and enc.token_type_ids.sum() > 0
    else:
        assert enc.token_type_ids is None


@pytest.mark.parametrize("family, refusal", cases(lambda spec: tuple(spec.refused)))
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, family, refusal):
    options, says = SPECS[family].refused[refusal]
    model = load(family, tmp_path, **options)
    assert model.family is record(family)
    assert not model.scratch_supported and says in model.scratch_problem, model.scratch_problem
    # the network that refuses is named (Mistral's and Qwen2's records run Llama's, and its check says "Llama")
    assert any(f.title in model.scratch_problem for f in families.families() if f.check is model.family.check)
    with pytest.raises(UnsupportedModel, match=re.escape(says)):
        scratch.build(model)
    with pytest.raises(UnsupportedModel, match=re.escape(says)):
        parity.check(model, ENGLISH)
    enc = model.encode(ENGLISH)
    trace = hf.forward(model, enc)
    assert trace.attn is not None and trace.n_heads == model.config.num_attention_heads
    assert trace.q is not None and trace.q[0].shape == (1, model.n_heads, enc.input_ids.shape[1], model.d_head)


@pytest.mark.parametrize("family, refusal", cases(lambda spec: tuple(spec.refused_at_load)))
def test_options_hugging_face_itself_gets_wrong_are_refused_at_load(tmp_path, family, refusal):
    edits, says = SPECS[family].refused_at_load[refusal]
    path = SPECS[family].make(tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **edits}))
    with pytest.raises(UnsupportedModel, match=re.escape(says)):
        probes.load(str(path))


@pytest.mark.parametrize("family", [f.name for f in families.families() if f.name in SPECS])
def test_a_weight_the_network_would_not_use_is_refused_by_name(family_model, family):
    model = family_model(family, SPECS[family].sample)
    weights = dict(model.hf.state_dict())
    name = next(k for k in weights if ".0." in k).rsplit(".", 1)[0] + ".extra.weight"  # beside a layer 0 weight
    weights[name] = torch.zeros(2)
    with pytest.raises(UnsupportedModel, match=re.escape(name.split(".", 1)[1])):
        model.family.network(weights, model.config, "extra")
