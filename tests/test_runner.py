"""The one runner: texts in, Traces out, from either producer."""

import pytest
import torch
from numeric import F64

import probes
from probes import runner


def test_auto_reads_the_scratch_pass_where_the_family_has_one(gpt2_model, opt_dir):
    assert runner.resolve_source(gpt2_model, "auto") == "scratch"
    assert runner.resolve_source(probes.load(str(opt_dir)), "auto") == "hf"
    with pytest.raises(ValueError, match="hf, scratch or auto"):
        runner.resolve_source(gpt2_model, "onnx")


@pytest.mark.numeric
def test_both_producers_give_the_same_trace_for_the_same_text(gpt2_model):
    model = gpt2_model.cast(torch.float64)  # float64: the two producers' rows agree to float64 rounding
    a = runner.trace(model, "the cat sat on the mat", source="hf")
    b = runner.trace(model, "the cat sat on the mat", source="scratch", backend="sdpa")
    assert (a.source, b.source) == ("hf", "scratch/sdpa") and b.lazy
    assert torch.allclose(a.attention(1, 2), b.attention(1, 2), atol=F64, rtol=0)
    assert a.scales == b.scales and a.windows == b.windows == [None, None]  # both from the family record
    # Hugging Face's reference is eager whatever backend the caller keeps in its state
    assert runner.forward(gpt2_model, gpt2_model.encode("hi"), "hf", backend="sdpa").source == "hf"


def test_batches_cut_to_the_context_and_report_progress(gpt2_model):
    done: list[int] = []
    texts = ["one two", "three", "cat " * 200, "four five six"]  # the third is longer than the 64-token context
    traces = list(runner.batches(gpt2_model, texts, batch_size=3, progress=done.append))
    assert [t.batch_size for t in traces] == [3, 1] and done == [3, 1]
    assert all(t.source == "scratch/eager" and t.logits is None for t in traces)
    items = list(runner.items(traces))
    assert [(id(t), i) for t, i in items] == [(id(traces[0]), 0), (id(traces[0]), 1), (id(traces[0]), 2),
                                              (id(traces[1]), 0)]
    assert len(traces[0].real_tokens(2)) == 64  # the tiny byte-level tokenizer splits " six" in two
    assert "".join(traces[1].token_strings(0)) == "four five six"
