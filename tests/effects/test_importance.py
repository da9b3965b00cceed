"""Head importance: the planted head ranks first; the gradient equals a finite difference; chunks add up exactly;
each layer's gradient scores have unit length."""

import numpy as np
import pytest
import torch
from effects.planted import ALTERNATING, COPY_HEAD
from numeric import F64

from probes import scratch
from probes.effects import importance
from probes.effects.measures import token_losses

TEXTS = [ALTERNATING, "he the he the he the he the", "the head the head"]


@pytest.mark.numeric
def test_planted_head_ranks_first_by_gradient_and_by_ablation(copy_model):
    frame = importance.importance(copy_model, TEXTS)
    assert set(frame.label) == {"gradient: loss", "ablation: loss"}
    for label, part in frame.groupby("label"):
        best = part.sort_values("score").iloc[-1]
        assert (best["layer"], best["head"]) == COPY_HEAD, label
        assert best["score"] > 10 * part.iloc[1:]["score"].abs().max()
        # the baseline is the mean of these float64 scores, summed in another order
        mean = pytest.approx(part["score"].mean(), abs=F64 * part["score"].abs().max(), rel=0)
        assert (part["n"] == 3).all() and part["baseline"].iloc[0] == mean


def _loss(model, text, gates):
    enc = model.encode(text)
    got = scratch.run_with_hooks(model, enc,
                                 {"attn.z": lambda z, name: z * gates[scratch.layer_of(name)][None, :, None, None]})
    assert got.logits is not None  # the pass ran to its end
    return float(token_losses(got.logits, enc.input_ids[0], enc.input_ids.shape[1]).mean())


@pytest.mark.numeric
def test_gradient_equals_a_finite_difference(gpt2_model64):
    model = gpt2_model64  # float64: what is left is the difference quotient's own error, not rounding
    text = "Researchers probe every layer and every head"
    grads = importance.gate_gradients(model, [text])[0]  # |∂L/∂ξ| [layers, H]
    assert grads.dtype == torch.float64

    def central(layer, head, h):
        up, down = torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64)
        up[layer, head] += h
        down[layer, head] -= h
        return (_loss(model, text, up) - _loss(model, text, down)) / (2 * h)

    h = 1e-3
    for layer, head in [(0, 1), (1, 3)]:
        # a central difference is off by h²·f'''/6 (2e-7 here); Richardson's (4·D(h) − D(2h)) / 3 cancels that,
        # leaving h⁴·f⁽⁵⁾/30 (~1e-13) and the loss's float64 rounding over h (~1e-12): within F64
        numeric = (4 * central(layer, head, h) - central(layer, head, 2 * h)) / 3
        assert float(grads[layer, head]) == pytest.approx(abs(numeric), abs=F64, rel=0)


@pytest.mark.numeric
def test_chunks_add_up_to_the_whole_and_layers_have_unit_length(minilm64):
    minilm = minilm64  # float64: chunks batch the texts otherwise than the whole, which only float64 rounding sees
    texts = ["The cat sat on the mat.", "She said that he would come back.", "Researchers probe every head.",
             "Numbers like 1024 appear too."]
    whole = importance.importance(minilm, texts, batch_size=3, ablation=False)
    parts = importance.finish([importance.importance_sums(minilm, texts[:1], ablation=False),
                               importance.importance_sums(minilm, texts[1:], batch_size=2, ablation=False)])
    assert np.allclose(whole["score"], parts["score"], atol=F64, rtol=0)
    lengths = whole.groupby("layer")["score"].apply(lambda s: float(np.sqrt((s ** 2).sum())))
    assert np.allclose(lengths, 1.0, atol=F64, rtol=0)
    assert whole["label"].unique().tolist() == ["gradient: hidden"]


class Bar:
    """A tqdm-like bar that keeps what it was told."""

    def __init__(self, total: int, name: str):
        self.total, self.name, self.closed = total, name, 0
        self.counts: list[int] = []

    def update(self, n: int) -> None:
        self.counts.append(n)

    def close(self) -> None:
        self.closed += 1


def test_the_command_bar_counts_every_sentence_once(copy_model, tmp_path):
    data = tmp_path / "texts.txt"
    data.write_text("\n".join([*TEXTS, "the he the", "he he he"]) + "\n")
    bars: list[Bar] = []

    def make_bar(total, name):
        bars.append(Bar(total, name))
        return bars[-1]

    importance.profile_importance(copy_model, str(data), None, tmp_path / "imp.csv", batch_size=2, checkpoint_every=3,
                                  ablation=False, progress_factory=make_bar)
    [bar] = bars
    # first the chunks a resumed run found done (none), then each batch as it finishes (chunks of 3: batches of 2 and
    # 1), never a chunk again once its batches are counted
    assert (bar.total, bar.name, bar.counts, bar.closed) == (5, "importance", [0, 2, 1, 2], 1)
