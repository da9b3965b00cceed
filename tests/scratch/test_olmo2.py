"""What is OLMo 2's own (Llama's body with its norms after the sublayers and QK-norm over the whole projection; its
parity against Hugging Face, option by option, the lazy backends, the float64 proof and the refusals are the
conformance suite's: ``test_conformance.py``): QK-norm spans every head, the norms' places matter (a mistake is
caught), a head's write goes through the post-attention norm frozen at the pass."""

import pytest
import torch
from numeric import F64
from scratch.conformance import ENGLISH, built, load, parity_of

import probes
from probes import scratch
from probes.effects.attribution import logit_attribution
from probes.effects.lens import logit_lens
from probes.scratch import llama, olmo2

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_qk_norm_spans_every_head(family_model):
    """q_norm's gain has H·d numbers (Qwen3's: d), and a head's q depends on the other heads' projections: scaling one
    head's rows of W_q changes every head's q."""
    model = family_model("olmo2", "group-3").cast(torch.float64)  # a copy: its network is its own to change
    lay = built(model, olmo2.Olmo2).layers[0]
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
    model = load("olmo2", tmp_path)
    if mistake == "a pre-norm":
        honest = olmo2.Layer.qkv
        monkeypatch.setattr(olmo2.Layer, "qkv", lambda self, x, cos, sin: honest(
            self, olmo2.rms_norm(x, self.post_attn, self.eps), cos, sin))
    else:
        def project(self, h):
            q, k, v = llama.Layer.project(self, h)
            d = q.shape[-1]
            return (olmo2.rms_norm(q, self.q_norm[:d], self.eps), olmo2.rms_norm(k, self.k_norm[:d], self.eps), v)

        monkeypatch.setattr(olmo2.Layer, "project", project)
    model._scratch = olmo2.Olmo2(model.hf.state_dict(), model.config, model.name)
    report = parity_of(model)
    assert not report.passed and report.hidden_max_rel_diff > 0.01


def test_a_heads_write_goes_through_the_post_norm_frozen_at_the_pass(olmo2_dir):
    """A head's write z_h·W_O[h] reaches the residual through the post-attention norm, frozen at the pass by every
    reader. By hand from Hugging Face's weights: head h writes w ⊙ z_h·W_O[h] ÷ rms(Σ_h z_h·W_O[h] + b) (the
    ``attn.result`` point), the writes and the bias's sum to what the attention added (``attn_out``), and a head's
    direct logit attribution (and its row in the lens) is that write through the final norm frozen at the pass."""
    model = probes.models.load(str(olmo2_dir)).cast(torch.float64)  # 3 layers, q/k/v/o biases
    enc = model.encode(ENGLISH)
    got = scratch.run_with_hooks(model, enc,
                                 keep=["attn.z", "blocks.1.attn.result", "blocks.1.attn_out", "blocks.2.resid_post"])
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
    assert lens.heads is not None  # heads=True, the default
    rows = lens.heads[(lens.heads.position == last) & (lens.heads.layer == 1)]
    for row in rows.itertuples():
        share = logit_attribution(model, ENGLISH, int(row.token_id)).heads[1, row.head]
        assert row.logit == pytest.approx(float(share), abs=F64, rel=0)
