"""Head-probe throughput: the full profile (every probe, every head) on the offline default over 500
UD English-EWT dev sentences, and the syntactic probe against a naive loop that scores heads one at
a time (one sentence per forward pass, then each layer and head separately, the way
TransformerLens's ``detect_head`` loops), side by side in one run. Goal: ≥ 5× faster.

    .venv/bin/python benchmarks/profile_speed.py [--sentences 500] [--naive-sentences 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import probes  # noqa: E402
from probes import runner, scratch  # noqa: E402
from probes.datasets.dependencies import ewt  # noqa: E402
from probes.heads.engine import score_pairs, sentence_attention, word_matrices  # noqa: E402
from probes.heads.profile import profile  # noqa: E402
from probes.heads.registry import probes as registered, texts  # noqa: E402
from probes.heads.syntactic import dependency_sentence  # noqa: E402
from probes.tokens import align_to_words  # noqa: E402


def naive_syntactic(model, sentences) -> dict:
    """One forward pass per sentence; then, for every layer and head on its own, word-level attention
    and the argmax of each dependency pair."""
    hits: dict[tuple[str, int, int], int] = {}
    for dep in sentences:
        sentence = dependency_sentence(dep)
        text, spans = sentence.text_and_spans()
        enc = model.encode(text, truncate=True)
        trace = scratch.forward(model, enc)
        word_of = align_to_words(trace.tokens[0], spans)
        to, frm = word_matrices(word_of, len(sentence.words))
        present = set(word_of)
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                words = frm @ trace.attention(layer, head).float() @ to
                for p in sentence.pairs:
                    if p.source in present and p.target in present:
                        key = (p.label, layer, head)
                        hits[key] = hits.get(key, 0) + int(words[p.source].argmax() == p.target)
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--naive-sentences", type=int, default=100)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = probes.load("minilm")
    data = ewt("dev")
    print(f"offline default (minilm, {model.n_layers}×{model.n_heads} heads), CPU, {torch.get_num_threads()} threads")

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        frame = profile(model, list(registered()), None, args.sentences, Path(tmp) / "all.csv", checkpoint_every=10**6)
        full = time.perf_counter() - t0
    print(f"full profile ({', '.join(registered())}; {args.sentences} items each, {len(frame)} rows): "
          f"{full:.1f} s, {args.sentences * len(registered()) / full:.1f} items/s")

    subset = data[: args.naive_sentences]
    t0 = time.perf_counter()
    sentences = [dependency_sentence(s) for s in subset]
    fast = score_pairs(sentence_attention(sentences, runner.batches(model, texts(sentences))), probe="syntactic")
    engine = time.perf_counter() - t0
    t0 = time.perf_counter()
    hits = naive_syntactic(model, subset)
    naive = time.perf_counter() - t0
    # the two must agree before their speeds mean anything: exactly, when the engine also runs one
    # sentence per forward pass (batched, padding changes the last bits of a few near-ties)
    one = score_pairs(sentence_attention(sentences, runner.batches(model, texts(sentences), batch_size=1)),
                      probe="syntactic").set_index(["label", "layer", "head"])
    batched = fast.set_index(["label", "layer", "head"])
    worst = 0.0
    for (label, layer, head), h in hits.items():
        assert round(one.loc[(label, layer, head), "score"] * one.loc[(label, layer, head), "n"]) == h
        worst = max(worst, abs(batched.loc[(label, layer, head), "score"] - one.loc[(label, layer, head), "score"]))
    print(f"naive loop == engine exactly (one sentence per pass); batched differs by at most {worst:.3f} accuracy")
    n = len(subset)
    print(f"{'syntactic probe, ' + str(n) + ' sentences':<34} | {'seconds':>8} | {'sentences/s':>11}")
    print(f"{'engine (batched, all heads at once)':<34} | {engine:>8.1f} | {n / engine:>11.1f}")
    print(f"{'naive (one sentence, one head)':<34} | {naive:>8.1f} | {n / naive:>11.1f}")
    speedup = naive / engine
    print(f"speed-up {speedup:.1f}×: goal ≥ 5× {'met' if speedup >= 5 else 'NOT met'} (same scores, checked)")


if __name__ == "__main__":
    main()
