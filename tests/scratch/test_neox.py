"""What is GPT-NeoX's own (Pythia: LayerNorm with biases, a fused q/k/v interleaved by head, a partial rotary, the
parallel residual; its parity against Hugging Face, option by option, the lazy backends, the float64 proof and the
refusals are the conformance suite's: ``test_conformance.py``): the older config names are read, a quarter of each
head turns, the fused rows are gathered per head, the fused matrix's per-head layout and the residual's order matter
(a mistake is caught)."""

import pytest
import torch
from scratch.conformance import ENGLISH, built, load, parity_of

from probes import hf, scratch
from probes.scratch import neox

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_the_older_config_names_are_read():
    """``rotary_pct`` and ``rotary_emb_base`` (Pythia's config.json) become ``partial_rotary_factor`` and
    ``rope_theta``, which both views read."""
    from transformers import GPTNeoXConfig

    config = GPTNeoXConfig(hidden_size=32, num_attention_heads=4, rotary_pct=0.5, rotary_emb_base=1000)
    assert neox.llama.rotary_dim(config) == 4 and neox.llama.rope_parameters(config)["rope_theta"] == 1000


def test_a_quarter_of_each_head_turns(family_model):
    """rotary_pct 0.25 of a head width 8: both views' tables are 2 wide, and the last 6 numbers of each head's q are
    its projection as it is (unturned)."""
    model = family_model("gpt_neox", "parallel").cast(torch.float64)
    enc = model.encode(ENGLISH)
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    assert isinstance(ours.rotary, tuple) and isinstance(theirs.rotary, tuple)  # one table for every layer
    assert ours.rotary[0].shape[-1] == theirs.rotary[0].shape[-1] == 2 and model.d_head == 8
    net = built(model, neox.GPTNeoX)
    with torch.inference_mode():
        lay = net.layers[1]
        raw, _, _ = lay.project(neox.layer_norm(ours.hidden_states[1], lay.ln_attn, lay.eps))
    q, _, _ = ours.layer_qkv(1)
    assert torch.equal(q[..., 2:], raw[..., 2:])  # never turned
    assert (q[0, :, 1:, :2] - raw[0, :, 1:, :2]).abs().max() > 1e-3  # turned from position 1 on


def test_the_fused_rows_are_gathered_per_head(family_model):
    """query_key_value's rows are head 0's q, k, v, then head 1's, …: q_proj (what QK attribution and composition
    read) is rows 0..d of each group of 3·d."""
    model = family_model("gpt_neox", "parallel")
    lay = built(model, neox.GPTNeoX).layers[0]
    fused = model.hf.gpt_neox.layers[0].attention.query_key_value
    w, b = fused.weight.detach(), fused.bias.detach()
    d = 8
    for kind, (weight, bias) in enumerate((lay.q_proj, lay.k_proj, lay.v_proj)):
        rows = torch.cat([torch.arange(h * 3 * d + kind * d, h * 3 * d + (kind + 1) * d) for h in range(4)])
        assert torch.equal(weight, w[rows]) and torch.equal(bias, b[rows])


@pytest.mark.parametrize("mistake", ["blocks, not heads", "sequential read as parallel"])
def test_a_wrong_layout_or_residual_is_caught(tmp_path, monkeypatch, mistake):
    """Parity fails far beyond rounding when the fused output is cut q | k | v over the whole width (Phi-3's layout)
    or when the sequential residual is run as the parallel one: the bit-identical parity is not vacuous."""
    from probes.scratch.attention import split_heads

    model = load("gpt_neox", tmp_path, use_parallel_residual=mistake == "blocks, not heads")
    if mistake == "blocks, not heads":
        def project(self, h):
            fused = torch.nn.functional.linear(h, *self.qkv_proj)
            return tuple(split_heads(t, self.n_heads) for t in fused.chunk(3, -1))

        monkeypatch.setattr(neox.Layer, "project", project)
    else:
        model.config.use_parallel_residual = True  # the network reads it; Hugging Face's modules were built without
    model._scratch = neox.GPTNeoX(model.hf.state_dict(), model.config, model.name)
    model.config.use_parallel_residual = mistake == "blocks, not heads"
    report = parity_of(model)
    assert not report.passed and report.hidden_max_rel_diff > 0.01
