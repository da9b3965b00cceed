import pytest
import torch
from numeric import F64

from probes import runner
from probes.heads.induction import detection_patterns, induction_scores, mul_score, repeated_tokens


def _traces(model, n_sequences, length):
    return [runner.forward(model, repeated_tokens(model, n_sequences, length), source="auto", logits=False)]


def test_patterns_on_a_repeated_sequence():
    ids = torch.tensor([7, 1, 2, 3, 1, 2, 3])  # BOS, then "1 2 3" twice
    p = detection_patterns(ids, bidirectional=False)
    assert p["previous_token"][4, 3] == 1 and p["previous_token"].sum() == 6
    assert p["duplicate_token"][4, 1] == 1 and p["duplicate_token"][1, 4] == 0 and p["duplicate_token"].sum() == 3
    # the second "1" (position 4) should look at what followed the first "1": the "2" at position 2
    assert p["induction"][4, 2] == 1 and p["induction"][5, 3] == 1 and p["induction"][6, 4] == 1
    assert p["induction"].sum() == 3
    assert set(detection_patterns(ids, bidirectional=True)) >= {"next_token", "induction_bidirectional"}


@pytest.mark.numeric
def test_mul_score_follows_transformerlens():
    attn = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.6, 0.2]], dtype=torch.float64)
    prev = torch.diag(torch.ones(2, dtype=torch.float64), -1)
    assert mul_score(attn, prev, False, False) == pytest.approx((0.5 + 0.6) / 3, abs=F64, rel=0)
    # exclude BOS: the first column is zeroed before measuring (the 0.5 on it counts no more)
    assert mul_score(attn, prev, True, False) == pytest.approx(0.6 / (0.5 + 0.6 + 0.2), abs=F64, rel=0)
    # exclude current token: the diagonal is zeroed
    assert mul_score(attn, prev, False, True) == pytest.approx((0.5 + 0.6) / (0.5 + 0.2 + 0.6), abs=F64, rel=0)


def test_real_offline_default(minilm):
    frame = induction_scores(_traces(minilm, 6, 20))
    prev = frame[frame.label == "previous_token"].sort_values("score", ascending=False).iloc[0]
    # measured: head 0.2 of minilm attends to the previous token on random repeated tokens too
    assert (prev["layer"], prev["head"]) == (0, 2) and prev["score"] > 0.8 > 10 * prev["baseline"]
    assert set(frame.label) >= {"duplicate_token", "induction", "next_token", "duplicate_token_bidirectional"}
    assert set(frame.direction) == {"causal", "bidirectional"}


def test_decoder_runs_with_bos(gpt2_model):
    frame = induction_scores(_traces(gpt2_model, 3, 8), exclude_bos=True)
    assert set(frame.label) == {"previous_token", "duplicate_token", "induction"}
    assert len(frame) == 3 * gpt2_model.n_layers * gpt2_model.n_heads
    assert frame.score.between(0, 1).all()


def test_real_decoder_smollm2_has_induction_heads(smollm2):
    assert smollm2.family_name == "llama" and smollm2.is_causal and smollm2.scratch_supported  # read from scratch
    frame = induction_scores(_traces(smollm2, 6, 25))
    assert set(frame.label) == {"previous_token", "duplicate_token", "induction"}  # causal: no mirrored labels
    best = frame.sort_values("score", ascending=False).groupby("label").head(1).set_index("label")
    # measured (10 sequences): induction head 18.6 scores 0.42 against 0.01 for uniform attention;
    # previous-token head 16.0 scores 0.87
    assert best.loc["induction", "score"] > 0.2 > 10 * best.loc["induction", "baseline"]
    assert best.loc["previous_token", "score"] > 0.6


def test_missing_gguf_file_is_a_clear_error(tmp_path):
    import probes
    from probes.errors import ModelUnavailable

    with pytest.raises(ModelUnavailable, match="no GGUF file"):
        probes.load(str(tmp_path / "model.gguf"))
