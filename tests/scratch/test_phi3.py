"""Phi-3 from scratch (Llama's body with a fused qkv_proj and gate_up_proj, a partial rotary) against Hugging Face,
option by option, on tiny random checkpoints: bit-identical in eager, the lazy backends within their tolerance, the
float64 proof; the fused blocks' order matters (a swap is caught); a partial rotary turns only the first numbers of
each head; what is not implemented is refused by name."""

import pytest
import torch
from numeric import F64
from checkpoints import make_llama

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES
from probes.scratch import llama, phi3

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["the cat sat on the mat because it was warm and the dog was not", "小明把苹果给了小红"]  # a padded batch
ENGLISH = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE = "小明把苹果给了小红，因为她很饿"

OPTIONS = {
    "group-3": dict(),  # 6 query heads reading 2 key/value heads (Phi-3-mini: 32 on 32, Phi-3-medium: 40 on 10)
    "group-1": dict(num_key_value_heads=6),
    "group-6": dict(num_key_value_heads=1),  # multi-query
    "window": dict(sliding_window=3),  # every layer (Phi-3-mini-4k: 2047)
    "partial-rotary-half": dict(partial_rotary_factor=0.5),  # head width 8: the first 4 numbers turn
    "partial-rotary-3/4": dict(partial_rotary_factor=0.75),  # the first 6 (pairs (i, i + 3)), as Phi-4-mini's 0.75
    "rope-theta": dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    "tied": dict(tie_word_embeddings=True),
    "gelu": dict(hidden_act="gelu"),
}


def _load(tmp_path, **options):
    return probes.load(str(make_llama(tmp_path / "m", family="phi3", **options)))


def _compare(model, backend="eager", texts=TEXTS):
    enc = model.encode(texts)
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_bit_identical_to_hugging_face(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option])
    assert model.family_name == "phi3" and model.scratch_supported
    assert "qkv_proj" in dict(model.hf.model.layers[0].self_attn.named_children())  # fused, as Phi-3 is
    for texts in (TEXTS, [ENGLISH], [CHINESE]):
        report = _compare(model, texts=texts)
        assert report.passed, report.to_text()
        assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
        assert report.logits_max_abs_diff == 0 and report.qkv_max_abs_diff == 0


@pytest.mark.parametrize("option", ["group-3", "window", "partial-rotary-3/4"])
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


def test_the_window_is_on_every_layer(tmp_path):
    model = _load(tmp_path, **OPTIONS["window"])
    assert [model.family.window(model.config, layer) for layer in range(2)] == [3, 3]
    trace = scratch.forward(model.cast(torch.float64), model.encode(ENGLISH), backend="sdpa")
    n = len(trace.token_strings())
    far = torch.arange(n)[None, :] <= torch.arange(n)[:, None] - 3
    assert all((trace.attention(layer, 4)[far] == 0).all() for layer in range(2))


def test_a_partial_rotary_turns_only_the_first_numbers_of_each_head(tmp_path):
    """partial_rotary_factor 0.75 of a head width 8: both views' tables are 6 wide, and the last 2 numbers of each
    head's q are its projection as it is (unturned); the first 6 are turned (they differ from it past position 0)."""
    model = _load(tmp_path, **OPTIONS["partial-rotary-3/4"]).cast(torch.float64)
    enc = model.encode(ENGLISH)
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    assert ours.rotary[0].shape[-1] == theirs.rotary[0].shape[-1] == 6 and model.d_head == 8
    net = scratch.build(model)
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
    model = _load(tmp_path, num_key_value_heads=6)  # k and v of the same width: a swap still runs
    if swap == "k and v":
        honest = phi3.Layer.project
        monkeypatch.setattr(phi3.Layer, "project", lambda self, h: (lambda q, k, v: (q, v, k))(*honest(self, h)))
    else:
        def mlp(self, h):
            up, gate = torch.nn.functional.linear(h, *self.gate_up_proj).chunk(2, dim=-1)
            return torch.nn.functional.linear(up * self.act(gate), *self.down_proj)

        monkeypatch.setattr(phi3.Layer, "mlp", mlp)
    model._scratch = phi3.Phi3(model.hf.state_dict(), model.config, model.name)
    report = _compare(model)
    assert not report.passed and report.hidden_max_rel_diff > 0.01


def test_the_fused_blocks_are_q_proj_k_proj_and_v_proj(tmp_path):
    """What QK attribution and composition read, the blocks of qkv_proj, are views of the fused weight: q's rows,
    then k's, then v's."""
    model = _load(tmp_path)
    lay = scratch.build(model).layers[0]
    fused = model.hf.model.layers[0].self_attn.qkv_proj.weight.detach()
    assert [lay.q_proj[0].shape[0], lay.k_proj[0].shape[0], lay.v_proj[0].shape[0]] == [48, 16, 16]
    assert torch.equal(torch.cat([lay.q_proj[0], lay.k_proj[0], lay.v_proj[0]]), fused)
    assert lay.q_proj[1] is None and lay.q_proj[0].data_ptr() == fused.data_ptr()  # a view: no copy


@pytest.mark.parametrize("options, says", [
    (dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                           "rope_theta": 10000.0}, original_max_position_embeddings=32), "rope_type='longrope'"),
    (dict(partial_rotary_factor=0.375), "the rotary width 3"),  # 8 × 0.375: an odd width cannot turn pairs
    (dict(hidden_act="relu6"), "hidden_act='relu6'"),
])
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, options, says):
    model = _load(tmp_path, **options)
    assert not model.scratch_supported and says in model.scratch_problem and "Phi-3" in model.scratch_problem
    with pytest.raises(UnsupportedModel, match=says.replace("(", r"\(")):
        parity.check(model, ENGLISH)
    trace = hf.forward(model, model.encode(ENGLISH))
    assert trace.q is not None and trace.n_heads == 6
