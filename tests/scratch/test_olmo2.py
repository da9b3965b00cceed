"""OLMo 2 from scratch (Llama's body with its norms after the sublayers and QK-norm over the whole projection) against
Hugging Face, option by option, on tiny random checkpoints: bit-identical in eager, the lazy backends within their
tolerance, the float64 proof; the norms' places matter (a mistake is caught); what is not implemented is refused by
name; a head's write goes through the post-attention norm frozen at the pass."""

import pytest
import torch
from numeric import F64
from checkpoints import make_llama

import probes
from probes import hf, parity, scratch
from probes.effects.attribution import logit_attribution
from probes.effects.lens import logit_lens
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES
from probes.scratch import llama, olmo2

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["the cat sat on the mat because it was warm and the dog was not", "小明把苹果给了小红"]  # a padded batch
ENGLISH = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE = "小明把苹果给了小红，因为她很饿"

OPTIONS = {
    "group-3": dict(),  # 6 query heads reading 2 key/value heads
    "group-1": dict(num_key_value_heads=6),  # OLMo-2-1B: as many key/value heads as query heads
    "group-6": dict(num_key_value_heads=1),
    "biases": dict(attention_bias=True),
    "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),  # OLMo 2's θ
    "tied": dict(tie_word_embeddings=True),
    "eps": dict(rms_norm_eps=1e-3),
}


def _load(tmp_path, **options):
    return probes.load(str(make_llama(tmp_path / "m", family="olmo2", **options)))


def _compare(model, backend="eager", texts=TEXTS):
    enc = model.encode(texts)
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_bit_identical_to_hugging_face(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option])
    assert model.family_name == "olmo2" and model.scratch_supported
    for texts in (TEXTS, [ENGLISH], [CHINESE]):
        report = _compare(model, texts=texts)
        assert report.passed, report.to_text()
        assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
        assert report.logits_max_abs_diff == 0 and report.qkv_max_abs_diff == 0


@pytest.mark.parametrize("option", ["group-3", "biases"])
@pytest.mark.parametrize("backend", ["sdpa", "flash"])
def test_the_lazy_backends_recover_the_same_attention(tmp_path, option, backend):
    report = _compare(_load(tmp_path, **OPTIONS[option]), backend)
    assert report.passed, report.to_text()
    assert report.candidate == f"scratch/{backend}" and 0 < report.attention_max_abs_diff <= report.tolerance["attention"]


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_proven_in_float64_on_both_backends(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option]).cast(torch.float64)
    for backend in ("eager", "sdpa"):
        report = _compare(model, backend)
        assert report.proven and report.attention_max_abs_diff <= F64, (backend, report.to_text())
        assert report.hidden_max_rel_diff <= F64 and report.logits_max_rel_diff <= FLOAT64_TOLERANCES["logits"]


def test_qk_norm_spans_every_head(tmp_path):
    """q_norm's gain has H·d numbers (Qwen3's: d), and a head's q depends on the other heads' projections: scaling one
    head's rows of W_q changes every head's q."""
    model = _load(tmp_path).cast(torch.float64)
    lay = scratch.build(model).layers[0]
    assert lay.q_norm.shape == (48,) and lay.k_norm.shape == (16,)
    x = torch.randn(1, 5, 48, dtype=torch.float64)
    q, _, _ = lay.project(x)
    lay.q_proj = (lay.q_proj[0].clone(), None)
    lay.q_proj[0][:8] *= 3  # head 0's rows
    q2, _, _ = lay.project(x)
    assert (q2[:, 1:] - q[:, 1:]).abs().max() > 1e-3


@pytest.mark.parametrize("mistake", ["a pre-norm", "qk-norm per head"])
def test_the_norms_places_are_caught(tmp_path, monkeypatch, mistake):
    """Parity fails far beyond rounding when the attention's post norm is moved before it (as Llama's) or QK-norm is
    taken per head (as Qwen3's): the bit-identical parity is not vacuous."""
    model = _load(tmp_path)
    if mistake == "a pre-norm":
        honest = olmo2.Layer.qkv
        monkeypatch.setattr(olmo2.Layer, "qkv",
                            lambda self, x, cos, sin: honest(self, olmo2.rms_norm(x, self.post_attn, self.eps), cos, sin))
    else:
        def project(self, h):
            q, k, v = llama.Layer.project(self, h)
            d = q.shape[-1]
            return (olmo2.rms_norm(q, self.q_norm[:d], self.eps), olmo2.rms_norm(k, self.k_norm[:d], self.eps), v)

        monkeypatch.setattr(olmo2.Layer, "project", project)
    model._scratch = olmo2.Olmo2(model.hf.state_dict(), model.config, model.name)
    report = _compare(model)
    assert not report.passed and report.hidden_max_rel_diff > 0.01


@pytest.mark.parametrize("options, says", [
    (dict(rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0,
                           "original_max_position_embeddings": 32}), "rope_type='yarn'"),
    (dict(hidden_act="relu6"), "hidden_act='relu6'"),
])
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, options, says):
    model = _load(tmp_path, **options)
    assert not model.scratch_supported and says in model.scratch_problem and "OLMo 2" in model.scratch_problem
    with pytest.raises(UnsupportedModel, match=says.replace("(", r"\(")):
        parity.check(model, ENGLISH)
    trace = hf.forward(model, model.encode(ENGLISH))
    assert trace.q is not None and trace.n_heads == 6


def test_a_heads_write_goes_through_the_post_norm_frozen_at_the_pass(tmp_path):
    """A head's write z_h·W_O[h] reaches the residual through the post-attention norm, frozen at the pass by every
    reader. By hand from Hugging Face's weights: head h writes w ⊙ z_h·W_O[h] ÷ rms(Σ_h z_h·W_O[h] + b) (the
    ``attn.result`` point), the writes and the bias's sum to what the attention added (``attn_out``), and a head's
    direct logit attribution (and its row in the lens) is that write through the final norm frozen at the pass."""
    model = _load(tmp_path, num_hidden_layers=3, attention_bias=True).cast(torch.float64)
    enc = model.encode(ENGLISH)
    got = scratch.run(model, enc, keep=["attn.z", "blocks.1.attn.result", "blocks.1.attn_out", "blocks.2.resid_post"])
    hf_layer, n_heads, width = model.hf.model.layers[1], model.n_heads, model.config.hidden_size
    w_o = hf_layer.self_attn.o_proj.weight.detach().T.reshape(n_heads, -1, width)
    bias = hf_layer.self_attn.o_proj.bias.detach()
    z = got.each("attn.z")[1][0]  # [H, L, d]
    whole = torch.einsum("hld,hdD->lD", z, w_o) + bias
    frozen = hf_layer.post_attention_layernorm.weight.detach() * torch.rsqrt(
        whole.pow(2).mean(-1, keepdim=True) + model.config.rms_norm_eps)  # [L, D]
    writes = torch.einsum("hld,hdD->lhD", z, w_o) * frozen[:, None]
    assert (got["blocks.1.attn.result"][0] - writes).abs().max() <= F64
    assert (writes.sum(1) + bias * frozen - got["blocks.1.attn_out"][0]).abs().max() <= F64
    assert (writes.sum(1) - torch.einsum("hld,hdD->lD", z, w_o)).abs().max() > 1e-2  # the norm matters here

    target, last = 5, len(enc.tokens[0]) - 1
    x = got["blocks.2.resid_post"][0, last]
    final = model.hf.model.norm.weight.detach() * torch.rsqrt(x.pow(2).mean() + model.config.rms_norm_eps)
    by_hand = (writes[last] * final) @ model.hf.lm_head.weight.detach()[target]  # [H]
    attribution = logit_attribution(model, ENGLISH, target)
    assert (torch.as_tensor(attribution.heads[1]) - by_hand).abs().max() <= F64
    assert attribution.total == pytest.approx(attribution.logit, abs=F64, rel=0)
    lens = logit_lens(model, ENGLISH, k=3)
    rows = lens.heads[(lens.heads.position == last) & (lens.heads.layer == 1)]
    for row in rows.itertuples():
        share = logit_attribution(model, ENGLISH, int(row.token_id)).heads[1, row.head]
        assert row.logit == pytest.approx(float(share), abs=F64, rel=0)
