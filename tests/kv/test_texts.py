"""The long text the KV lab ships: EWT's sentences as running text, within the token count asked for."""

from probes.datasets.dependencies import ewt
from probes.kv.texts import detokenized, ewt_text


def test_words_become_running_text():
    words = ["He", "did", "n't", "say", "(", "why", ")", ",", "did", "he", "?"]
    assert detokenized(words) == "He didn't say (why), did he?"
    assert detokenized(["It", "'s", "$", "5", "."]) == "It's $5."


def test_whole_sentences_within_the_count(gpt2_model):
    text = ewt_text(gpt2_model, 60)
    count = lambda t: len(gpt2_model.tokenizer(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    sentences = [detokenized(s.words) for s in ewt("dev")]
    used = next(i for i in range(1, len(sentences)) if " ".join(sentences[:i]) == text)
    assert count(text) <= 60 < count(" ".join(sentences[:used + 1]))  # as many whole sentences as fit
    first = sentences[0]
    assert text.startswith(first)
    assert ewt_text(gpt2_model, 1).startswith(first)  # at least one sentence, however short the count
