"""Gemma 2 from scratch against Hugging Face, option by option, on tiny random checkpoints: bit-identical in eager,
the lazy backends (whose fused kernels cannot soft-cap: the capped layers run the formula) within their tolerance;
the float64 proof refused by name (Hugging Face's RMSNorm computes in fp32) and made instead against Hugging Face's
own code with that one norm computing in the input's dtype; soft-capping and the sandwich norms left out are
caught; what is not implemented is refused by name."""

import random

import pytest
import torch
from checkpoints import gemma_norm_in_input_dtype, make_gemma
from numeric import F64

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES
from probes.scratch import build, gemma

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["the cat sat on the mat because it was warm and the dog was not", "小明把苹果给了小红"]  # a padded batch
ENGLISH = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE = "小明把苹果给了小红，因为她很饿"

OPTIONS = {  # every tiny Gemma 2: 3 layers (local, global, local), head width 16 ≠ hidden / heads = 8
    "default": dict(),  # 4 query heads reading 2 key/value heads, window 3, score cap 5, logit cap 3
    "group-1": dict(num_key_value_heads=4),
    "multi-query": dict(num_key_value_heads=1),
    "no-softcap": dict(attn_logit_softcapping=None, final_logit_softcapping=None),
    "wide-window": dict(sliding_window=6, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),  # the releases'
    "head-8": dict(head_dim=8, query_pre_attn_scalar=8),
    "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}),
    "untied": dict(tie_word_embeddings=False),
    "all-global": dict(layer_types=["full_attention"] * 3),
}


def _random_options(seed: int) -> dict:
    """Window sizes, soft-cap values, head widths and grouped-query ratios drawn at random (seeded)."""
    r = random.Random(seed)
    heads = r.choice([2, 4, 8])
    return dict(num_attention_heads=heads, num_key_value_heads=r.choice([k for k in (1, 2, 4, 8) if heads % k == 0]),
                head_dim=r.choice([4, 8, 12, 16]), sliding_window=r.randint(1, 8),
                attn_logit_softcapping=r.choice([None, 1.0, 3.0, 20.0]),
                final_logit_softcapping=r.choice([None, 0.5, 5.0]), query_pre_attn_scalar=r.choice([4, 16, 64]),
                layer_types=[r.choice(["sliding_attention", "full_attention"]) for _ in range(3)])


OPTIONS.update({f"random-{seed}": _random_options(seed) for seed in range(4)})


def _load(tmp_path, **options):
    return probes.load(str(make_gemma(tmp_path / "m", **options)))


def _compare(model, backend="eager", texts=TEXTS):
    enc = model.encode(texts)
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_bit_identical_to_hugging_face(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option])
    assert model.family_name == "gemma2" and model.scratch_supported
    for texts in (TEXTS, [ENGLISH], [CHINESE]):
        report = _compare(model, texts=texts)
        assert report.passed, report.to_text()
        assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
        assert report.logits_max_abs_diff == 0 and report.qkv_max_abs_diff == 0


@pytest.mark.parametrize("option", ["default", "no-softcap", "random-1"])
@pytest.mark.parametrize("backend", ["sdpa", "flash"])
def test_the_lazy_backends_recover_the_same_attention(tmp_path, option, backend):
    model = _load(tmp_path, **OPTIONS[option])
    enc = model.encode(TEXTS)
    trace = scratch.forward(model, enc, backend=backend)
    report = parity.compare(hf.forward(model, enc), trace)
    assert report.passed, report.to_text()
    assert report.candidate == f"scratch/{trace.backend.split(':')[0]}"
    assert report.attention_max_abs_diff <= report.tolerance["attention"]
    capped = model.config.attn_logit_softcapping is not None
    assert capped == ("softcap_math" in trace.backend or "soft-caps" in trace.note), (trace.backend, trace.note)


def test_the_float64_proof_is_refused_by_name(tmp_path):
    model = _load(tmp_path)
    with pytest.raises(UnsupportedModel, match=r"Gemma RMSNorm computes in fp32"):
        parity.check(model, ENGLISH, dtype="float64")


@pytest.fixture
def float64_norm():
    """Hugging Face's Gemma 2 with its RMSNorm computing in the input's dtype (its one fixed-fp32 step): the same
    code otherwise, the reference a float64 proof needs."""
    with gemma_norm_in_input_dtype():
        yield


@pytest.mark.parametrize("option", ["default", "multi-query", "no-softcap", "wide-window", "random-0", "random-2"])
def test_every_option_is_proven_in_float64_against_hf_with_its_norm_in_float64(tmp_path, option, float64_norm):
    model = _load(tmp_path, **OPTIONS[option]).cast(torch.float64)
    for backend in ("eager", "sdpa"):
        report = _compare(model, backend)
        assert report.attention_max_abs_diff <= F64, (backend, report.to_text())
        assert report.hidden_max_rel_diff <= F64 and report.logits_max_rel_diff <= FLOAT64_TOLERANCES["logits"]


def test_the_layers_alternate_local_and_global(tmp_path):
    model = _load(tmp_path)
    assert [model.family.window(model.config, layer) for layer in range(3)] == [3, None, 3]
    assert [model.family.softcap(model.config, layer) for layer in range(3)] == [5.0] * 3
    assert model.family.scale(model.config, 0) == 10 ** -0.5
    trace = scratch.forward(model, model.encode(ENGLISH), backend="sdpa")
    a = trace.attention(0, 1)
    n = a.shape[-1]
    far = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3
    assert (a[far] == 0).all() and (trace.attention(1, 1)[far] > 0).any()


@pytest.mark.parametrize("leave_out", ["attention softcap", "final softcap", "post-attention norm", "embed scale"])
def test_each_new_part_left_out_is_caught(tmp_path, leave_out):
    """Parity fails far beyond rounding when the scratch pass forgets one of Gemma 2's parts: not vacuous."""
    model = _load(tmp_path)
    net = gemma.Gemma2(model.hf.state_dict(), model.config, model.name)
    if leave_out == "attention softcap":
        for layer in net.layers:
            layer.spec = type(layer.spec)(layer.spec.scale, True, layer.spec.window, None)
    elif leave_out == "final softcap":
        net.logit_softcap = None
    elif leave_out == "post-attention norm":
        for layer in net.layers:
            layer.post_attn = torch.zeros_like(layer.post_attn)  # the attention's write gone
    else:
        net.embed_scale = torch.tensor(1.0)
    model._scratch = net
    report = _compare(model)
    assert not report.passed


def test_soft_capping_bounds_the_scores(tmp_path):
    """With a cap of 1 every eager score before the mask lies in [−1, 1] (tanh reaches 1 in fp32): the attn.scores
    point sees them capped, although the uncapped ones reach far past 1."""
    model = _load(tmp_path, attn_logit_softcapping=1.0)
    seen = []
    scratch.run(model, model.encode(ENGLISH), {"blocks.0.attn.scores": lambda s, name: seen.append(s.clone())})
    s = seen[0]
    allowed = s > torch.finfo(s.dtype).min / 2
    assert s[allowed].abs().max() <= 1.0
    q, k, _ = build(model).qkv(0, model.hf.model.embed_tokens(model.encode(ENGLISH).input_ids))
    assert (q @ k.repeat_interleave(2, dim=1).transpose(-2, -1) * 10 ** -0.5).abs().max() > 2.0


@pytest.mark.parametrize("options, says", [
    (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}), "rope_type='linear'"),
    (dict(hidden_activation="relu6"), "hidden_activation='relu6'"),
    (dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
])
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, options, says):
    model = _load(tmp_path, **options)
    assert not model.scratch_supported and says in model.scratch_problem and "Gemma 2" in model.scratch_problem
    with pytest.raises(UnsupportedModel, match=says.replace("(", r"\(")):
        parity.check(model, ENGLISH)
    trace = hf.forward(model, model.encode(ENGLISH))
    assert trace.q is not None and trace.n_heads == 4 and trace.q[0].shape[-1] == 16


def test_qk_attribution_splits_the_pre_cap_score_and_weighs_the_capped_row(tmp_path):
    """The parts sum to scale·q·k before the cap; the weight shown is the model's own (the softmax of the capped row),
    and the record says the cap."""
    from probes.effects.why import qk_attribution

    model = _load(tmp_path).cast(torch.float64)
    why = qk_attribution(model, ENGLISH, 1, 2, 6, 2)  # layer 1 is global: any earlier key
    assert why.softcap == 5.0 and why.delta <= 1e-9 * why.bound
    trace = scratch.forward(model, model.encode(ENGLISH))
    assert why.weight == pytest.approx(float(trace.attention(1, 2)[6, 2]), abs=F64, rel=0)
    assert abs(why.score) > 5.0 or abs(5.0 * torch.tanh(torch.tensor(why.score / 5.0)) - why.score) > 1e-3


def test_the_kv_lab_refuses_soft_capped_scores_by_name(tmp_path):
    from probes.kv.stream import decoder_network

    with pytest.raises(UnsupportedModel, match="attn_logit_softcapping"):
        decoder_network(_load(tmp_path))
    assert decoder_network(_load(tmp_path / "plain", attn_logit_softcapping=None)) is not None
