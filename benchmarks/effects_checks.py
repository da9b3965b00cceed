"""The head-effect checks on the real offline models, with their numbers:

1. smollm2: the head the induction probe ranks first, mean-ablated, against 20 randomly chosen heads: the rise in
   the next-token loss on the repeated half of random-token sequences (an induction head is what lets the model
   predict the second copy).
2. minilm, the seeds' sentence: the head whose zero-ablation most changes the representation of "she", and
   whether the she/he minimal pair moves weight between "Xiaohong" and "Xiaoming".

    .venv/bin/python benchmarks/effects_checks.py [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHE = "Xiaoming gave the apple to Xiaohong because she was hungry"
HE = "Xiaoming gave the apple to Xiaohong because he was hungry"


def induction_check(lines: list[str]) -> None:
    import torch

    from probes.effects.ablation import ablation_hooks
    from probes.effects.measures import token_losses
    from probes.heads.induction import repeated_tokens
    from probes.heads.profile import run_probe
    from probes.models import load
    from probes.scratch import run_with_hooks

    model = load("smollm2")
    table = run_probe(model, "induction", limit=20)
    ranked = table[table.label == "induction"].sort_values("score", ascending=False)
    top = (int(ranked.iloc[0]["layer"]), int(ranked.iloc[0]["head"]))
    length, n_seq = 25, 20
    enc = repeated_tokens(model, n_sequences=n_seq, length=length, seed=1)  # other sequences than the probe's
    clean = run_with_hooks(model, enc, keep=("attn.z",))
    means = torch.stack([z.transpose(1, 2).reshape(-1, z.shape[1], z.shape[-1]).double().mean(0)
                         for z in clean.each("attn.z")])
    first = enc.input_ids.shape[1] - length - 1  # predictions of the second copy: positions first .. end − 2

    def repeated_loss(heads) -> float:
        got = (run_with_hooks(model, enc, hooks=ablation_hooks([heads] * n_seq, "mean", means=means.float())) if heads
               else clean)
        logits = got.logits
        assert logits is not None  # a decoder's trace: its logits
        losses = torch.stack([token_losses(logits[i:i + 1], enc.input_ids[i], enc.input_ids.shape[1])[0]
                              for i in range(n_seq)])
        return float(losses[:, first:].mean())

    base = repeated_loss([])
    rise_top = repeated_loss([top]) - base
    rng = random.Random(0)
    others = [h for h in ((layer, head) for layer in range(model.n_layers) for head in range(model.n_heads))
              if h != top]
    picked = rng.sample(others, 20)
    rises = [repeated_loss([h]) - base for h in picked]
    mean_rise = sum(rises) / len(rises)
    lines += ["## smollm2: the top induction head, mean-ablated", "",
              f"- top induction head (probe, 20 sequences): {top[0]}.{top[1]}, score "
              f"{ranked.iloc[0]['score']:.3f} (baseline {ranked.iloc[0]['baseline']:.3f})",
              f"- loss on the repeated half of {n_seq} random sequences of {length} tokens (seed 1): {base:.3f} nats",
              f"- mean-ablating {top[0]}.{top[1]}: +{rise_top:.3f} nats",
              f"- mean-ablating each of 20 random heads (seed 0): +{mean_rise:.3f} nats on average "
              f"(largest +{max(rises):.3f}, head {picked[rises.index(max(rises))][0]}."
              f"{picked[rises.index(max(rises))][1]})",
              f"- check {'PASSED' if rise_top > mean_rise else 'FAILED'}: the induction head's rise "
              f"{'>' if rise_top > mean_rise else '≤'} the random heads' average", ""]


def minilm_check(lines: list[str]) -> None:
    from probes.effects.ablation import ablate_each
    from probes.effects.pairs import minimal_pair
    from probes.models import load

    model = load("minilm")
    enc = model.encode(SHE)
    she = next(i for i, t in enumerate(enc.tokens[0]) if t.text.strip() == "she")
    frame = ablate_each(model, SHE, position=she).sort_values("token_change", ascending=False)
    best = frame.iloc[0]
    lines += ["## minilm: the seeds' sentence", "",
              f"- the head whose zero-ablation most changes \"she\" (token {she}): {int(best['layer'])}."
              f"{int(best['head'])}, 1 − cos = {best['token_change']:.4f} (median head "
              f"{frame['token_change'].median():.4f})"]
    to_hong = minimal_pair(model, SHE, HE, "she", "Xiaohong").weights
    to_ming = minimal_pair(model, SHE, HE, "she", "Xiaoming").weights
    both = to_hong.merge(to_ming, on=["layer", "head"], suffixes=("_hong", "_ming"))
    both["moved"] = both["diff_ming"] - both["diff_hong"]  # she -> he: weight moved from Xiaohong to Xiaoming
    pick = both.loc[both["moved"].idxmax()]
    back = both.loc[both["moved"].idxmin()]
    answer = both[(both.layer == 1) & (both["head"] == 2)].iloc[0]
    lines += [f"- she → he, head 1.2 (the head the app opens on): weight on Xiaohong {answer['a_hong']:.3f} → "
              f"{answer['b_hong']:.3f}, on Xiaoming {answer['a_ming']:.3f} → {answer['b_ming']:.3f}",
              f"- the head where she → he moves most weight from Xiaohong to Xiaoming: {int(pick['layer'])}."
              f"{int(pick['head'])}: Xiaohong {pick['a_hong']:.3f} → {pick['b_hong']:.3f}, Xiaoming "
              f"{pick['a_ming']:.3f} → {pick['b_ming']:.3f}",
              f"- … and most the other way (towards Xiaohong): {int(back['layer'])}.{int(back['head'])}: Xiaohong "
              f"{back['a_hong']:.3f} → {back['b_hong']:.3f}, Xiaoming {back['a_ming']:.3f} → {back['b_ming']:.3f}",
              f"- heads where he puts more on Xiaoming and less on Xiaohong than she does: "
              f"{int(((both.diff_ming > 0) & (both.diff_hong < 0)).sum())} of {len(both)}", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from report import publish

    lines = ["# head-effect checks on the offline models", ""]
    induction_check(lines)
    minilm_check(lines)
    publish("\n".join(lines), args.out, "effects_checks.md")


if __name__ == "__main__":
    main()
