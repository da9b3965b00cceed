"""Readable tokens for byte-level BPE, WordPiece and SentencePiece, and token -> word alignment."""

from checkpoints import gpt2_tokenizer

from probes.tokens import _decode_pieces, align_to_words, readable_tokens, tokenizer_style, word_spans


def _readable(tok, text, pair=None):
    enc = tok(text, pair, return_offsets_mapping=True) if pair else tok(text, return_offsets_mapping=True)
    return readable_tokens(tok, enc["input_ids"], enc["offset_mapping"], text, pair, enc.sequence_ids())


MOJIBAKE = set("ĠÃÂåæçèéðŁĻĤ°ı")


def test_byte_level_shows_spaces_and_whole_characters():
    tok = gpt2_tokenizer()
    assert tokenizer_style(tok) == "bytelevel"
    text = "Xiaoming gave the apple 小明 🙂"
    labels = [t.text for t in _readable(tok, text)]
    assert not any(ch in MOJIBAKE for label in labels for ch in label), labels
    assert " gave" in labels or any(label.startswith(" ") for label in labels)
    # a character split over several byte tokens is named on each of its pieces
    pieces = [label for label in labels if label.startswith("🙂(")]
    assert pieces == ["🙂(1/4)", "🙂(2/4)", "🙂(3/4)", "🙂(4/4)"]
    assert "".join(labels).replace("(1/4)", "").startswith("Xiaoming gave")


def test_decode_pieces_names_straddling_characters_exactly():
    # "a小" as bytes split after the first byte of 小, then a lone continuation
    data = "a小".encode()
    labels = _decode_pieces([data[:2], data[2:3], data[3:]])
    assert labels == ["a小(1/3)", "小(2/3)", "小(3/3)"]
    assert _decode_pieces([b"\xff"]) == ["\\xff"]  # invalid bytes are escaped, never mojibake


def test_wordpiece_pieces_special_tokens_and_unknowns(minilm):
    tok = minilm.tokenizer
    assert tokenizer_style(tok) == "wordpiece"
    tokens = _readable(tok, "Xiaoming smiled 🙂", "she was hungry")
    labels = [t.text for t in tokens]
    assert labels[0] == "[CLS]" and tokens[0].special
    assert "##ming" in labels
    assert "[UNK:🙂]" in labels
    assert [t.segment for t in tokens if not t.special][-1] == 1
    assert sum(t.special for t in tokens) == 3  # [CLS] ... [SEP] ... [SEP]


def test_control_characters_are_visible(minilm):
    tok = gpt2_tokenizer()
    labels = [t.text for t in _readable(tok, "bell\x07 tab\tend")]
    assert all(ch.isprintable() for label in labels for ch in label), labels


def test_align_tokens_to_words(minilm):
    text = "Xiaoming gave the apple, didn't he? 小明"
    spans = word_spans(text)
    words = [text[a:b] for a, b in spans]
    assert words == ["Xiaoming", "gave", "the", "apple", ",", "didn't", "he", "?", "小明"]  # one word (jieba)
    for tok in (minilm.tokenizer, gpt2_tokenizer()):
        tokens = _readable(tok, text)
        word_of = align_to_words(tokens, spans)
        by_word: dict[int, list[str]] = {}
        for t, w in zip(tokens, word_of, strict=True):
            if w >= 0:
                by_word.setdefault(w, []).append(t.text)
        assert set(by_word) == set(range(len(words)))  # every word has at least one token
        assert "".join(by_word[0]).replace("##", "").lower() == "xiaoming"
        assert all(w == -1 for t, w in zip(tokens, word_of, strict=True) if t.special)


def test_sentencepiece_byte_fallback_pieces():
    from probes.tokens import _token_bytes

    pieces = [_token_bytes(p, "sentencepiece") for p in ["▁hello", "<0xE5>", "<0xB0>", "<0x8F>"]]
    assert _decode_pieces(pieces) == [" hello", "小(1/3)", "小(2/3)", "小(3/3)"]


def test_unknown_tokens_are_counted_and_a_byte_level_tokenizer_has_none(minilm, smollm2):
    from probes.tokens import unknown_tokens

    text = "小明把苹果给了小红，因为她很饿"
    assert unknown_tokens(minilm.tokenizer, minilm.tokenizer(text)["input_ids"]) == 11
    assert unknown_tokens(minilm.tokenizer, minilm.tokenizer("she was hungry")["input_ids"]) == 0
    assert unknown_tokens(smollm2.tokenizer, smollm2.tokenizer(text)["input_ids"]) == 0


def test_chinese_is_cut_into_words_not_characters(minilm, smollm2):
    """小红 is one word (jieba), on either tokenizer: WordPiece cuts it into two characters, byte-level BPE into four
    byte pieces, and both sets of pieces belong to it; a word is found as jieba cuts it, not inside another."""
    from probes.tokens import covered_words, word_positions

    text = "小明把苹果给了小红，因为她很饿"
    assert [text[a:b] for a, b in word_spans(text)] == ["小明", "把", "苹果", "给", "了", "小红", "，", "因为", "她",
                                                       "很", "饿"]
    for tok, pieces in ((minilm.tokenizer, 2), (smollm2.tokenizer, 4)):
        tokens = _readable(tok, text)
        words = dict(covered_words([t for t in tokens if not t.special], text))
        assert len(words["小红"]) == pieces and "小" not in words
        assert word_positions([t for t in tokens if not t.special], text, "小红") == words["小红"]
    mixed = "Xiaohong (小红) ate 苹果."
    assert [mixed[a:b] for a, b in word_spans(mixed)] == ["Xiaohong", "(", "小红", ")", "ate", "苹果", "."]
