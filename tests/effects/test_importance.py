"""Head importance: the planted head ranks first; the gradient equals a finite difference; chunks add up exactly;
each layer's gradient scores have unit length."""

import numpy as np
import pytest
import torch

from probes import scratch
from probes.effects import importance
from probes.effects.measures import token_losses
from tests.effects.conftest import ALTERNATING, COPY_HEAD

TEXTS = [ALTERNATING, "he the he the he the he the", "the head the head"]


def test_planted_head_ranks_first_by_gradient_and_by_ablation(copy_model):
    frame = importance.importance(copy_model, TEXTS)
    assert set(frame.label) == {"gradient: loss", "ablation: loss"}
    for label, part in frame.groupby("label"):
        best = part.sort_values("score").iloc[-1]
        assert (best["layer"], best["head"]) == COPY_HEAD, label
        assert best["score"] > 10 * part.iloc[1:]["score"].abs().max()
        assert (part["n"] == 3).all() and part["baseline"].iloc[0] == pytest.approx(part["score"].mean())


def _loss(model, text, gates):
    enc = model.encode(text)
    got = scratch.outputs(model, enc, edit=lambda layer, z: z * gates[layer][None, :, None, None])
    return float(token_losses(got.logits, enc.input_ids[0], enc.input_ids.shape[1]).mean())


def test_gradient_equals_a_finite_difference(gpt2_model):
    text = "Researchers probe every layer and every head"
    grads = importance.gate_gradients(gpt2_model, [text])[0]  # |∂L/∂ξ| [layers, H]
    eps = 1e-3
    for layer, head in [(0, 1), (1, 3)]:
        up, down = torch.ones(2, 4, dtype=torch.float32), torch.ones(2, 4, dtype=torch.float32)
        up[layer, head] += eps
        down[layer, head] -= eps
        numeric = (_loss(gpt2_model, text, up) - _loss(gpt2_model, text, down)) / (2 * eps)
        assert float(grads[layer, head]) == pytest.approx(abs(numeric), rel=2e-2, abs=1e-4)


def test_chunks_add_up_to_the_whole_and_layers_have_unit_length(minilm):
    texts = ["The cat sat on the mat.", "She said that he would come back.", "Researchers probe every head.",
             "Numbers like 1024 appear too."]
    whole = importance.importance(minilm, texts, batch_size=3, ablation=False)
    parts = importance.finish([importance.importance_sums(minilm, texts[:1], ablation=False),
                               importance.importance_sums(minilm, texts[1:], batch_size=2, ablation=False)])
    assert np.allclose(whole["score"], parts["score"], atol=1e-12)
    lengths = whole.groupby("layer")["score"].apply(lambda s: float(np.sqrt((s ** 2).sum())))
    assert np.allclose(lengths, 1.0)
    assert whole["label"].unique().tolist() == ["gradient: hidden"]
