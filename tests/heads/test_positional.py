import pandas as pd
import pytest
import torch
from numeric import F64

from probes import runner
from probes.heads.positional import is_punctuation, positional_scores
from probes.tokens import Token


def _tokens(texts, special=()):
    return [Token(t, 0, 0, i in special) for i, t in enumerate(texts)]


@pytest.mark.numeric
def test_planted_previous_token_head_is_positional():
    n = 7
    tokens = _tokens(["<s>", "a", ",", "b", "c", ".", "d"], special=(0,))
    g = torch.Generator().manual_seed(0)
    attn = torch.softmax(torch.randn(2, 3, n, n, generator=g).double(), dim=-1)
    prev = torch.zeros(n, n, dtype=torch.float64)
    prev[0, 0] = 1.0
    prev[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    attn[1, 2] = prev
    frame = positional_scores([(tokens, attn)] * 2, causal=False)
    by = frame.set_index(["label", "layer", "head"])
    assert by.loc[("previous", 1, 2), "score"] == 1.0
    assert by.loc[("fixed offset", 1, 2), "offset"] == -1
    # the first token has no previous one
    assert by.loc[("fixed offset", 1, 2), "score"] == pytest.approx(6 / 7, abs=F64, rel=0)
    assert not by.loc[("fixed offset", 1, 2), "positional"]  # 0.86 < 0.9
    assert by.loc[("previous", 0, 0), "baseline"] == pytest.approx(1 / 7, abs=F64, rel=0)  # uniform over 7 keys
    assert frame[frame.label == "punctuation"]["baseline"].iloc[0] == pytest.approx(2 / 7, abs=F64, rel=0)
    assert set(frame.columns) >= {"probe", "label", "layer", "head", "score", "baseline", "n"}


def test_punctuation():
    assert is_punctuation(" ,") and is_punctuation("?!") and is_punctuation("##.")
    assert not is_punctuation(" cat") and not is_punctuation("$") and not is_punctuation(" ")


def test_real_offline_default_has_a_previous_token_head(minilm):
    texts = ["Xiaoming gave the apple to Xiaohong because she was hungry.",
             "The cat sat on the mat, and the dog watched it from the door.",
             "Researchers probe every layer and every head of the model."] * 3
    frame = positional_scores(runner.batches(minilm, texts), causal=False)
    prev = frame[frame.label == "previous"].sort_values("score", ascending=False)
    best = prev.iloc[0]
    # measured on these sentences: head 0.2 of minilm puts 0.9997 of its mass on the previous token,
    # against a uniform baseline of 0.065; it is positional (argmax at offset -1 for 93% of tokens)
    assert best["score"] > 0.9 and best["score"] > 10 * best["baseline"], best
    positional = frame[(frame.label == "fixed offset") & frame.positional.astype(bool)]
    assert (best["layer"], best["head"]) in set(zip(positional["layer"], positional["head"], strict=True))
    assert isinstance(frame, pd.DataFrame) and len(prev) == 6 * 12


@pytest.mark.numeric
def test_scores_read_from_a_lazy_sdpa_trace_equal_the_eager_ones(minilm64):
    texts = ["Xiaoming gave the apple to Xiaohong because she was hungry.",
             "The cat sat on the mat, and the dog watched it from the door.",
             "Researchers probe every layer and every head."]
    eager = list(runner.batches(minilm64, texts, backend="eager"))
    sdpa = list(runner.batches(minilm64, texts, backend="sdpa"))
    assert not eager[0].lazy and sdpa[0].lazy  # sdpa keeps only the logsumexp: attention is recovered from it
    a, b = positional_scores(eager), positional_scores(sdpa)  # causal or not: the Traces say
    assert a[["label", "layer", "head"]].equals(b[["label", "layer", "head"]])
    for col in ("score", "baseline", "mean_attention"):  # in float64; distances count tokens, not fractions
        assert ((a[col] - b[col]).abs().fillna(0) <= F64 * max(1.0, a[col].abs().max())).all(), col
    assert (a["n"] == b["n"]).all()
    pos = a.label == "fixed offset"
    assert (a.loc[pos, "offset"] == b.loc[pos, "offset"]).all()
    assert (a.loc[pos, "positional"] == b.loc[pos, "positional"]).all()
    assert a.equals(positional_scores(eager, causal=False))  # minilm is an encoder
    assert a.equals(positional_scores(runner.items(eager)))  # (trace, item) pairs read the same


def test_attention_without_a_trace_needs_causal():
    with pytest.raises(ValueError, match="causal"):
        positional_scores([(_tokens(["a", "b"]), torch.full((1, 1, 2, 2), 0.5))])


@pytest.mark.numeric
def test_entropy_and_distance_match_a_hand_computation():
    import math

    tokens = _tokens(["a", "b", "c"])
    attn = torch.tensor([[1 / 3, 1 / 3, 1 / 3], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]], dtype=torch.float64)[None, None]
    by = positional_scores([(tokens, attn)], causal=False).set_index("label")
    assert by.loc["entropy", "score"] == pytest.approx((math.log(3) + 0 + math.log(2)) / 3, abs=F64, rel=0)
    assert by.loc["entropy", "baseline"] == pytest.approx(math.log(3), abs=F64, rel=0)  # uniform over the three keys
    assert by.loc["distance", "score"] == pytest.approx((1 + 1 + 1.5) / 3, abs=F64, rel=0)  # Σ a_ij·|i − j| per query
    assert by.loc["distance", "baseline"] == pytest.approx((1 + 2 / 3 + 1) / 3, abs=F64, rel=0)
    causal_attn = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0, 0, 1.0]], dtype=torch.float64)[None, None]
    causal = positional_scores([(tokens, causal_attn)], causal=True).set_index("label")
    assert causal.loc["distance", "score"] == pytest.approx(0.5 / 3, abs=F64, rel=0)
    uniform_past = (0 + 0.5 + 1) / 3  # uniform over the past
    assert causal.loc["distance", "baseline"] == pytest.approx(uniform_past, abs=F64, rel=0)


@pytest.mark.numeric
def test_sink_share_is_the_weight_on_the_first_token_over_the_queries_after_it():
    tokens = _tokens(["<s>", "a", "b"], special=(0,))
    causal_attn = torch.tensor([[1.0, 0, 0], [0.8, 0.2, 0], [0.5, 0.25, 0.25]], dtype=torch.float64)[None, None]
    by = positional_scores([(tokens, causal_attn)] * 2, causal=True).set_index("label")
    # row 0 (which sees only itself in a decoder) is left out: the mean of 0.8 and 0.5
    assert by.loc["sink", "score"] == pytest.approx((0.8 + 0.5) / 2, abs=F64, rel=0)
    assert by.loc["sink", "baseline"] == pytest.approx((1 / 2 + 1 / 3) / 2, abs=F64, rel=0)  # uniform over the past
    assert by.loc["sink", "n"] == 4  # two queries of each of the two sentences
    assert "first" not in by.index  # the first token is one label, the sink: not a second name for it
    encoder = torch.tensor([[0.1, 0.6, 0.3], [0.9, 0.1, 0.0], [0.3, 0.3, 0.4]], dtype=torch.float64)[None, None]
    by = positional_scores([(tokens, encoder), (_tokens(["x"]), torch.ones(1, 1, 1, 1))], causal=False)
    by = by.set_index("label")
    assert by.loc["sink", "score"] == pytest.approx((0.9 + 0.3) / 2, abs=F64, rel=0)  # a one-token text adds nothing
    assert by.loc["sink", "baseline"] == pytest.approx(1 / 3, abs=F64, rel=0)


def test_the_sink_share_is_registered_as_a_plain_share():
    from probes.heads import registry

    assert [label for label, _ in registry.get("positional").shares] == ["sink"]
    assert "first token" in registry.share_labels()["sink"]


@pytest.mark.numeric
def test_real_decoder_heads_park_their_weight_on_the_first_token(smollm2):
    text = "Xiaoming gave the apple to Xiaohong because she was hungry."
    trace = runner.trace(smollm2, text)
    frame = positional_scores([trace]).set_index(["label", "layer", "head"]).sort_index()
    attention = trace.attention(29, 0).double()
    # head 29.0 of SmolLM2: 0.68 of " was"'s weight on the first token "X", 0.57 over every query after it
    assert frame.loc[("sink", 29, 0), "score"] == pytest.approx(float(attention[1:, 0].mean()), abs=F64, rel=0)
    assert frame.loc[("sink", 29, 0), "score"] > 3 * frame.loc[("sink", 29, 0), "baseline"]  # uniform: 0.17
    sinks = frame.loc["sink", "score"]
    assert len(sinks) == 30 * 9 and sinks.between(0, 1).all() and (sinks > 0.5).mean() > 0.5  # most heads are sinks


def test_each_label_is_named_once_and_a_decoder_has_no_label_that_looks_ahead():
    """One name per label: the sink (not also "first"), previous/next/self (not also offset−1/+1/0), Voita's test as
    "fixed offset" (not the probe's own name); a decoder's query cannot look ahead, so it gets no "next" or
    positive offsets (they would be 0 for every head)."""
    tokens = _tokens(["<s>", "a", "b", "c"], special=(0,))
    attn = torch.softmax(torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(1)).double(), -1)
    encoder = set(positional_scores([(tokens, attn)], causal=False)["label"])
    assert {"sink", "previous", "next", "self", "fixed offset", "offset-2", "offset+2"} <= encoder
    assert not encoder & {"first", "offset-1", "offset+1", "offset+0", "positional"}
    decoder = set(positional_scores([(tokens, attn.tril())], causal=True)["label"])
    assert {"sink", "previous", "self", "offset-2"} <= decoder
    assert not {label for label in decoder if label == "next" or label.startswith("offset+")}


@pytest.mark.numeric
def test_an_encoder_without_a_position_table_scores_the_same_from_every_trace(modernbert_mlm_dir):
    """ModernBERT has no position embedding (positions are turns of q and k) and local layers that see 2 positions
    either way: its positional scores read from Hugging Face's Trace, the eager and the lazy sdpa Trace agree in
    float64, and a local layer's best fixed offset lies inside its window."""
    from probes.models import load  # probes.load's model here, whose .cast the test needs

    model = load(str(modernbert_mlm_dir)).cast(torch.float64)
    texts = ["Xiaoming gave the apple to Xiaohong because she was hungry.", "小明把苹果给了小红，因为她饿了。"]
    frames = [positional_scores(runner.batches(model, texts, source=source, backend=backend))
              for source, backend in (("hf", "eager"), ("scratch", "eager"), ("scratch", "sdpa"))]
    for other in frames[1:]:
        assert frames[0][["label", "layer", "head"]].equals(other[["label", "layer", "head"]])
        for col in ("score", "baseline", "mean_attention"):
            assert ((frames[0][col] - other[col]).abs().fillna(0) <= F64 * max(1.0, frames[0][col].abs().max())).all()
    fixed = frames[0][(frames[0].label == "fixed offset") & (frames[0].layer > 0)]
    assert len(fixed) == 2 * model.n_heads and (fixed.offset.abs() <= 2).all()
