"""GPT-NeoX (Pythia) from scratch (LayerNorm with biases, a fused q/k/v interleaved by head, a partial rotary, the
parallel residual) against Hugging Face, option by option, on tiny random checkpoints: bit-identical in eager, the
lazy backends within their tolerance, the float64 proof; the fused matrix's per-head layout and the residual's
order matter (a mistake is caught); what is not implemented is refused by name."""

import pytest
import torch
from numeric import F64
from checkpoints import make_neox

import probes
from probes import hf, parity, scratch
from probes.errors import UnsupportedModel
from probes.parity import FLOAT64_TOLERANCES
from probes.scratch import neox

pytestmark = pytest.mark.numeric  # parity figures: CI runs these again under another CPU's kernels

TEXTS = ["the cat sat on the mat because it was warm and the dog was not", "小明把苹果给了小红"]  # a padded batch
ENGLISH = "Xiaoming gave the apple to Xiaohong because she was hungry."
CHINESE = "小明把苹果给了小红，因为她很饿"

OPTIONS = {
    "parallel": dict(),  # Pythia: the parallel residual, rotary_pct 0.25 (2 of a head's 8 numbers), biases
    "sequential": dict(use_parallel_residual=False),  # x + attention, then x + MLP (as GPT-2)
    "rotary-half": dict(partial_rotary_factor=0.5),
    "rotary-full": dict(partial_rotary_factor=1.0, rope_theta=500.0),
    "no-attention-bias": dict(attention_bias=False, use_parallel_residual=False),
    "tied": dict(tie_word_embeddings=True),
    "gelu-tanh": dict(hidden_act="gelu_new", layer_norm_eps=1e-3),
    "rotary-pct": dict(rope_parameters=None, rotary_pct=0.5, rotary_emb_base=1000),  # the older config's names
}


def _load(tmp_path, **options):
    return probes.load(str(make_neox(tmp_path / "m", **options)))


def _compare(model, backend="eager", texts=TEXTS):
    enc = model.encode(texts)
    return parity.compare(hf.forward(model, enc), scratch.forward(model, enc, backend=backend))


@pytest.mark.parametrize("option", list(OPTIONS))
def test_every_option_is_bit_identical_to_hugging_face(tmp_path, option):
    model = _load(tmp_path, **OPTIONS[option])
    assert model.family_name == "gpt_neox" and model.scratch_supported
    for texts in (TEXTS, [ENGLISH], [CHINESE]):
        report = _compare(model, texts=texts)
        assert report.passed, report.to_text()
        assert report.attention_max_abs_diff == 0 and report.hidden_max_abs_diff == 0, report.to_text()
        assert report.logits_max_abs_diff == 0 and report.qkv_max_abs_diff == 0


def test_the_older_config_names_are_read():
    """``rotary_pct`` and ``rotary_emb_base`` (Pythia's config.json) become ``partial_rotary_factor`` and
    ``rope_theta``, which both views read."""
    from transformers import GPTNeoXConfig

    config = GPTNeoXConfig(hidden_size=32, num_attention_heads=4, rotary_pct=0.5, rotary_emb_base=1000)
    assert neox.llama.rotary_dim(config) == 4 and neox.llama.rope_parameters(config)["rope_theta"] == 1000


@pytest.mark.parametrize("option", ["parallel", "sequential", "rotary-full"])
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


def test_a_quarter_of_each_head_turns(tmp_path):
    """rotary_pct 0.25 of a head width 8: both views' tables are 2 wide, and the last 6 numbers of each head's q are
    its projection as it is (unturned)."""
    model = _load(tmp_path).cast(torch.float64)
    enc = model.encode(ENGLISH)
    ours, theirs = scratch.forward(model, enc), hf.forward(model, enc)
    assert ours.rotary[0].shape[-1] == theirs.rotary[0].shape[-1] == 2 and model.d_head == 8
    net = scratch.build(model)
    with torch.inference_mode():
        lay = net.layers[1]
        raw, _, _ = lay.project(neox.layer_norm(ours.hidden_states[1], lay.ln_attn, lay.eps))
    q, _, _ = ours.layer_qkv(1)
    assert torch.equal(q[..., 2:], raw[..., 2:])  # never turned
    assert (q[0, :, 1:, :2] - raw[0, :, 1:, :2]).abs().max() > 1e-3  # turned from position 1 on


def test_the_fused_rows_are_gathered_per_head(tmp_path):
    """query_key_value's rows are head 0's q, k, v, then head 1's, …: q_proj (what QK attribution and composition
    read) is rows 0..d of each group of 3·d."""
    model = _load(tmp_path)
    lay = scratch.build(model).layers[0]
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

    model = _load(tmp_path, use_parallel_residual=mistake == "blocks, not heads")
    if mistake == "blocks, not heads":
        def project(self, h):
            return tuple(split_heads(t, self.n_heads) for t in torch.nn.functional.linear(h, *self.qkv_proj).chunk(3, -1))

        monkeypatch.setattr(neox.Layer, "project", project)
    else:
        model.config.use_parallel_residual = True  # the network reads it; Hugging Face's modules were built without
    model._scratch = neox.GPTNeoX(model.hf.state_dict(), model.config, model.name)
    model.config.use_parallel_residual = mistake == "blocks, not heads"
    report = _compare(model)
    assert not report.passed and report.hidden_max_rel_diff > 0.01


@pytest.mark.parametrize("options, says", [
    (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                           "partial_rotary_factor": 0.25}), "rope_type='linear'"),
    (dict(partial_rotary_factor=0.375), "the rotary width 3"),  # 8 × 0.375: an odd width cannot turn pairs
    (dict(hidden_act="relu6"), "hidden_act='relu6'"),
])
def test_unimplemented_options_are_refused_by_name_and_the_hf_view_works(tmp_path, options, says):
    model = _load(tmp_path, **options)
    assert not model.scratch_supported and says in model.scratch_problem and "GPT-NeoX" in model.scratch_problem
    with pytest.raises(UnsupportedModel, match=says.replace("(", r"\(")):
        parity.check(model, ENGLISH)
    trace = hf.forward(model, model.encode(ENGLISH))
    assert trace.q is not None and trace.n_heads == 4
