"""The Hugging Face producer: the reference Trace, with q, k, v caught where the family record says."""

import pytest
import torch
from checkpoints import make_llama
from numeric import EPS64, F64, fp32

import probes
from probes import hf, parity
from probes.trace import Trace


def test_reference_is_eager_only(gpt2_model):
    with pytest.raises(ValueError, match="eager attention only"):
        hf.forward(gpt2_model, gpt2_model.encode("hi"), backend="sdpa")


@pytest.mark.numeric
@pytest.mark.parametrize("fixture", ["gpt2_model", "minilm"])
def test_each_family_catches_q_k_v_of_every_layer(request, fixture):
    model = request.getfixturevalue(fixture)
    enc = model.encode("the cat sat on the mat")
    trace = hf.forward(model, enc)
    n = enc.input_ids.shape[1]
    assert trace.q is not None and trace.k is not None  # caught on every pass
    assert len(trace.q) == model.n_layers and trace.rotary is None
    assert trace.q[0].shape == trace.k[0].shape == (1, model.n_heads, n, model.d_head)
    # d^-½ computed in one order of operations or another: a few float64 roundings
    assert trace.scales == pytest.approx([model.d_head ** -0.5] * model.n_layers, rel=4 * EPS64, abs=0)


@pytest.mark.numeric
def test_grouped_rotary_model_keeps_its_fewer_key_value_heads(tmp_path):
    model = probes.load(str(make_llama(tmp_path / "m")))
    enc = model.encode("the cat sat on the mat")
    trace = hf.forward(model, enc, logits=False)
    n = enc.input_ids.shape[1]
    assert trace.q is not None and trace.k is not None and trace.v is not None  # caught on every pass
    assert trace.q[1].shape == (1, 6, n, 8) and trace.k[1].shape == trace.v[1].shape == (1, 2, n, 8)
    assert isinstance(trace.rotary, tuple)  # one (cos, sin) for every layer
    cos, sin = trace.rotary
    # fp32 cos² + sin²: three roundings of numbers ≤ 1
    assert cos.shape[-2:] == (n, 8) and torch.allclose(cos ** 2 + sin ** 2, torch.ones_like(cos), atol=fp32(3), rtol=0)
    assert trace.logits is None and trace.group == 3


@pytest.mark.numeric
def test_an_encoder_decoder_is_seen_through_its_encoder_and_the_probes_run(ckpt_dir, tmp_path):
    from checkpoints import make_t5

    import probes
    from probes.heads import profile as prof

    model = probes.load(str(make_t5(ckpt_dir / "t5")))
    assert model.family is None and not model.scratch_supported and not model.is_causal
    trace = probes.run(model, "the cat sat on the mat")
    n = len(trace.token_strings())
    assert trace.n_layers == 2 and trace.attention(1, 3).shape == (n, n)
    assert torch.allclose(trace.attention(0, None).sum(-1), torch.ones(4, n), atol=fp32(n), rtol=0)  # n keys summed
    for probe in ("positional", "patterns", "induction"):  # the label-free probes, on the Hugging Face view
        frame = prof.profile(model, [probe], None, 4, tmp_path / f"{probe}.csv")
        assert len(frame) and set(frame.layer) == {0, 1} and set(frame["head"]) == {0, 1, 2, 3}


# -- bounded memory: a budget for the probabilities kept ------------------------------------------------------

def _budget_models(request, ckpt_dir):
    from checkpoints import make_llama

    return {
        "gpt2": request.getfixturevalue("gpt2_model"),
        "bert (minilm)": request.getfixturevalue("minilm"),
        "llama (grouped-query, rotary)": probes.load(str(make_llama(ckpt_dir / "llama-budget"))),
        "mistral (window 4)": probes.load(str(make_llama(ckpt_dir / "mistral-budget", family="mistral",
                                                          sliding_window=4))),
    }


@pytest.mark.numeric
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_over_its_budget_the_reference_keeps_a_logsumexp_per_row_and_gives_the_same_heads(request, ckpt_dir, dtype):
    """exp(s − lse) is the softmax: in float64 to 1e-10; in fp32 within the rounding of a row of n keys (parity's
    error model for attention)."""
    texts = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "A shorter one."]  # padded batch
    for name, model in _budget_models(request, ckpt_dir).items():
        model = model.cast(dtype)
        enc = model.encode(texts)
        full = hf.forward(model, enc)
        lazy = hf.forward(model, enc, attention_budget=hf.attention_bytes(model, enc) - 1)
        assert not full.lazy and full.note == "", name
        assert lazy.lazy and lazy.attn is None and "recomputed from Hugging Face's own q and k" in lazy.note, name
        bound = F64 if dtype == torch.float64 else parity.attention_tolerance(enc.input_ids.shape[1])
        for item in range(2):
            for layer in range(model.n_layers):
                worst = (lazy.attention(layer, item=item) - full.attention(layer, item=item)).abs().max().item()
                assert worst <= bound, (name, item, layer, worst)
        assert torch.equal(lazy.hidden_states[-1], full.hidden_states[-1])  # the same pass, only less kept
        within = hf.forward(model, enc, attention_budget=hf.attention_bytes(model, enc))
        assert not within.lazy  # at the budget exactly: kept


@pytest.mark.numeric
def test_a_lazy_reference_still_proves_parity(gpt2_model):
    from probes import scratch

    enc = gpt2_model.encode("the cat sat on the mat because it was warm")
    report = parity.compare(hf.forward(gpt2_model, enc, attention_budget=0), scratch.forward(gpt2_model, enc))
    assert report.passed and report.attention_max_abs_diff <= report.tolerance["attention"]


def test_a_model_without_a_family_keeps_every_probability_whatever_the_budget(ckpt_dir):
    from checkpoints import make_t5

    model = probes.load(str(make_t5(ckpt_dir / "t5-budget")))
    trace = probes.run(model, "the cat sat on the mat", attention_budget=0)
    assert not trace.lazy and trace.note == ""  # no hooks, no q and k to recover from: nothing else is honest


@pytest.mark.numeric
def test_over_its_budget_the_scratch_eager_pass_computes_the_same_and_keeps_a_logsumexp(gpt2_model, smollm2):
    from probes import scratch

    for model in (gpt2_model, smollm2):
        enc = model.encode("the cat sat on the mat because it was warm")
        eager = scratch.forward(model, enc, backend="eager")
        bounded = scratch.forward(model, enc, backend="eager", attention_budget=1024)
        assert bounded.lazy and bounded.backend == "eager" and "over the 0 MiB kept" in bounded.note
        # the same computation (so parity with Hugging Face stays exact), only less of it kept
        assert all(torch.equal(a, b) for a, b in zip(eager.hidden_states, bounded.hidden_states, strict=True))
        assert eager.logits is not None and bounded.logits is not None  # a decoder's pass: its logits
        assert torch.equal(eager.logits, bounded.logits)
        # recovered exp(s − lse) against the softmax, in fp32: parity's error model for a row of n keys
        assert (bounded.attention(1, 2) - eager.attention(1, 2)).abs().max() <= parity.attention_tolerance(
            enc.input_ids.shape[1])
        both_lazy = parity.compare(hf.forward(model, enc, attention_budget=0), bounded)
        assert both_lazy.passed and both_lazy.hidden_max_abs_diff == 0 and both_lazy.attention_max_abs_diff == 0


def _qkv(trace: Trace) -> list[torch.Tensor]:
    """A trace's q, k and v of every layer, in that order."""
    assert trace.q is not None and trace.k is not None and trace.v is not None  # caught on every pass
    return [*trace.q, *trace.k, *trace.v]


def _first_layer(model) -> torch.nn.Module:
    base = model.hf.base_model
    return base.h[0] if hasattr(base, "h") else base.layers[0] if hasattr(base, "layers") else base.encoder.layer[0]


@pytest.mark.numeric
@pytest.mark.parametrize("fixture", ["gpt2_model", "minilm", "llama_dir"])
def test_two_threads_on_one_model_each_get_their_own_q_k_v(request, fixture):
    """A server runs one loaded model for several visitors at once, each in its own thread. Thread A is held at its
    first layer while thread B runs a whole pass of another text on the same model: each trace still holds its own
    text's q, k and v (exactly those of a pass alone), and B's pass does not end up in A's trace."""
    import threading

    model = request.getfixturevalue(fixture)
    model = probes.load(str(model)) if isinstance(model, type(request.path)) else model
    texts = {"a": "the cat sat on the mat", "b": "a much longer sentence than the first one, by several words"}
    alone = {name: hf.forward(model, model.encode(text)) for name, text in texts.items()}
    b_done, got, failed = threading.Event(), {}, []

    def hold_a(_module, _args):
        if threading.current_thread().name == "a":
            b_done.wait(timeout=600)  # B's whole pass, however slow the machine (a guard against a hang)

    def run(name):
        try:
            got[name] = hf.forward(model, model.encode(texts[name]))
        except Exception as exc:  # noqa: BLE001 - reported below, with the thread's name
            failed.append(f"{name}: {exc!r}")
        finally:
            if name == "b":
                b_done.set()

    hold = _first_layer(model).register_forward_pre_hook(hold_a)
    try:
        a = threading.Thread(target=run, args=("a",), name="a")
        a.start()
        b = threading.Thread(target=run, args=("b",), name="b")
        b.start()
        b.join(60)
        a.join(60)
    finally:
        hold.remove()
    assert not failed
    for name in texts:
        for mine, own in zip(_qkv(got[name]), _qkv(alone[name]), strict=True):
            assert torch.equal(mine, own)
