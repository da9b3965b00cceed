"""Top examples: the strongest (query, key) entries per head, kept sparsely, ranked the same however the corpus
was split, and bounded in size."""

import pandas as pd
import pytest
import torch
from numeric import F64

from probes.corpus import examples as ex
from probes.corpus.reader import Window
from probes.models import Piece
from probes.tokens import Token

TEXT = "the cat sat on the mat"


def _window(text_id=1):
    spans = [(0, 3), (4, 7), (8, 11), (12, 14), (15, 18), (19, 22)]
    words = [Token(TEXT[a:b], a, b, False) for a, b in spans]
    tokens = [Token("[CLS]", 0, 0, True), *words, Token("[SEP]", 0, 0, True)]
    piece = Piece([0] * 8, [(0, 0)] + spans + [(0, 0)], [None] + [0] * 6 + [None])
    return Window(text_id, 0, TEXT, piece, 0, len(TEXT)), tokens


def _planted():
    """Layer 0 head 0 copies the previous word with decreasing confidence; head 1 parks on [CLS]."""
    n = 8
    attn = torch.full((1, 2, n, n), 0.001, dtype=torch.float64)  # float64: the weights read back as written
    for i in range(2, 7):
        attn[0, 0, i, i - 1] = 1.0 - 0.1 * i
    attn[0, 1, :, 0] = 0.99
    return attn


@pytest.mark.numeric
def test_the_strongest_non_special_keys_of_a_head_are_kept_and_described():
    window, tokens = _window()
    found = ex.Collector(k=3)
    found.add(window, tokens, _planted())
    best = found.result()
    head0 = best[best["head"] == 0]
    assert head0[["rank", "query", "key"]].values.tolist() == [[1, 2, 1], [2, 3, 2], [3, 4, 3]]
    assert head0["weight"].tolist() == pytest_approx([0.8, 0.7, 0.6])
    first = head0.iloc[0]
    assert (first.query_token, first.key_token) == ("cat", "the")
    assert first.snippet == "⟦the⟧ «cat» sat on the mat"
    assert first.context[first.query_start:first.query_end] == "cat"
    assert first.context[first.key_start:first.key_end] == "the"
    head1 = best[best["head"] == 1]  # all its weight is on [CLS], not a candidate; the rest is under MIN_WEIGHT
    assert head1.empty


def pytest_approx(values):
    return pytest.approx(values, abs=F64, rel=0)  # float64 attention, copied through


def test_the_ranking_does_not_depend_on_how_windows_are_grouped():
    window, tokens = _window()
    attn = torch.softmax(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)) * 3, dim=-1)
    whole = ex.Collector(k=4)
    parts = []
    for text_id in range(1, 7):
        w = Window(text_id, 0, window.text, window.piece, 0, len(TEXT))
        whole.add(w, tokens, attn if text_id % 2 else attn.flip(-1))
        part = ex.Collector(k=4)
        part.add(w, tokens, attn if text_id % 2 else attn.flip(-1))
        parts.append(part.result())
    assert ex.strongest(parts, 4)[ex.COLUMNS].equals(whole.result())
    ties = whole.result()  # equal weights: the lower text id first
    assert (ties.groupby(["layer", "head"])["rank"].max() == 4).all()


def test_a_long_window_keeps_a_bounded_context_around_the_pair():
    words = [f"w{i:04d}" for i in range(800)]
    text = " ".join(words)
    spans = [(6 * i, 6 * i + 5) for i in range(800)]
    tokens = [Token(text[a:b], a, b, False) for a, b in spans]
    window = Window(3, 0, text, Piece([0] * 800, spans, [0] * 800), 0, len(text))
    row = ex.describe(window, tokens, 700, 650)
    assert len(row["context"]) <= ex.CONTEXT_CHARS
    assert row["context"][row["query_start"]:row["query_end"]] == "w0700"
    assert row["context"][row["key_start"]:row["key_end"]] == "w0650"
    assert len(row["snippet"]) <= ex.SNIPPET_CHARS + 6 and "⟦w0650⟧" in row["snippet"] and "«w0700»" in row["snippet"]
    frame = pd.DataFrame([dict(row, layer=0, head=0, rank=1, weight=0.5, text_id=3, window=0, query=700, key=650)])
    assert len(frame[ex.COLUMNS].to_csv(index=False, header=False).encode()) <= ex.BYTES_PER_EXAMPLE


@pytest.mark.numeric
def test_a_decoders_first_token_is_no_example_however_much_it_is_attended():
    """Without a BOS token the first token is the sink (query 0 sees only it, with weight 1): not an example."""
    spans = [(0, 3), (4, 7), (8, 11), (12, 14), (15, 18), (19, 22)]
    tokens = [Token(TEXT[a:b], a, b, False) for a, b in spans]
    window = Window(1, 0, TEXT, Piece([0] * 6, spans, [0] * 6), 0, len(TEXT))
    attn = torch.zeros(1, 1, 6, 6, dtype=torch.float64)
    attn[0, 0, :, 0] = 0.9  # every query parks on the first token…
    attn[0, 0, 0, 0] = 1.0
    attn[0, 0, torch.arange(1, 6), torch.arange(1, 6)] = 0.1  # …and keeps a little for itself
    found = ex.Collector(k=3)
    found.add(window, tokens, attn)
    best = found.result()
    assert (best["key"] != 0).all() and (best["query"] != 0).all()
    assert best["weight"].tolist() == pytest_approx([0.1, 0.1, 0.1])
