"""What is Phi-3's own (Llama's body with a fused qkv_proj and gate_up_proj, a partial rotary; its parity against
Hugging Face, option by option, the lazy backends, the float64 proof and the refusals are the conformance suite's:
``test_conformance.py``): the window on every layer, a partial rotary turns only the first numbers of each head, the
fused blocks' order matters (a swap is caught) and the blocks are views of the fused weights."""

import pytest
import torch
from numeric import F64
from scratch.conformance import ENGLISH, built, load, parity_of

from probes import hf, scratch
from probes.scratch import llama, phi3

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels


def test_the_window_is_on_every_layer(family_model):
    model = family_model("phi3", "window")
    assert [model.family.window(model.config, layer) for layer in range(2)] == [3, 3]
    trace = scratch.forward(model.cast(torch.float64), model.encode(ENGLISH), backend="sdpa")
    n = len(trace.token_strings())
    far = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3
    assert all((trace.attention(layer, 4)[far] == 0).all() for layer in range(2))


def test_a_partial_rotary_turns_only_the_first_numbers_of_each_head(family_model):
    """partial_rotary_factor 0.75 of a head width 8: both views' tables are 6 wide, and the last 2 numbers of each
    head's q are its projection as it is (unturned); the first 6 are turned (they differ from it past position 0)."""
    model = family_model("phi3", "partial-rotary-3/4").cast(torch.float64)
    enc = model.encode(ENGLISH)
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    assert isinstance(ours.rotary, tuple) and isinstance(theirs.rotary, tuple)  # one table for every layer
    assert ours.rotary[0].shape[-1] == theirs.rotary[0].shape[-1] == 6 and model.d_head == 8
    net = built(model, phi3.Phi3)
    with torch.inference_mode():
        x = net.layers[1]
        raw, _, _ = x.project(llama.rms_norm(ours.hidden_states[1], x.norm_attn, x.eps))  # q before the turn
    q, _, _ = ours.layer_qkv(1)
    assert torch.equal(q[..., 6:], raw[..., 6:])  # never turned
    assert (q[0, :, 1:, :6] - raw[0, :, 1:, :6]).abs().max() > 1e-3  # turned from position 1 on
    assert torch.equal(llama.unrotate(q, *ours.rotary), raw) or \
        (llama.unrotate(q, *ours.rotary) - raw).abs().max() <= F64 * float(raw.abs().max())


@pytest.mark.parametrize("swap", ["k and v", "gate and up"])
def test_the_fused_blocks_order_is_caught(tmp_path, monkeypatch, swap):
    """Parity fails far beyond rounding when the fused outputs are cut in the wrong order: the bit-identical
    parity above is not vacuous about which block is which."""
    model = load("phi3", tmp_path, num_key_value_heads=6)  # k and v of the same width: a swap still runs
    if swap == "k and v":
        honest = phi3.Layer.project

        def swapped(self, h):
            q, k, v = honest(self, h)
            return q, v, k

        monkeypatch.setattr(phi3.Layer, "project", swapped)
    else:
        def mlp(self, h):
            up, gate = torch.nn.functional.linear(h, *self.gate_up_proj).chunk(2, dim=-1)
            return torch.nn.functional.linear(up * self.act(gate), *self.down_proj)

        monkeypatch.setattr(phi3.Layer, "mlp", mlp)
    model._scratch = phi3.Phi3(model.hf.state_dict(), model.config, model.name)
    report = parity_of(model)
    assert not report.passed and report.hidden_max_rel_diff > 0.01


def test_the_fused_blocks_are_q_proj_k_proj_and_v_proj(family_model):
    """What QK attribution and composition read, the blocks of qkv_proj, are views of the fused weight: q's rows,
    then k's, then v's."""
    model = family_model("phi3", "group-3")
    children = dict(model.hf.model.layers[0].self_attn.named_children())
    assert "qkv_proj" in children and "q_proj" not in children  # fused, as Phi-3 is
    lay = built(model, phi3.Phi3).layers[0]
    fused = model.hf.model.layers[0].self_attn.qkv_proj.weight.detach()
    assert [lay.q_proj[0].shape[0], lay.k_proj[0].shape[0], lay.v_proj[0].shape[0]] == [48, 16, 16]
    assert torch.equal(torch.cat([lay.q_proj[0], lay.k_proj[0], lay.v_proj[0]]), fused)
    assert lay.q_proj[1] is None and lay.q_proj[0].data_ptr() == fused.data_ptr()  # a view: no copy
