"""Composition scores of every head pair of smollm2 (30 layers × 9 heads, 270 heads, D = 576, d = 64), from the
weights alone: the time per kind (Q, K, V) in float64 and float32, with the random baseline, and the largest
K-composition scores. Goal: all pairs of one kind in ≤ 30 s on a 2-core machine.

    .venv/bin/python benchmarks/compose.py [--rounds 3] [--out benchmarks/results]

float64 and float32 take turns round by round (``report.alternate``); float32 ÷ float64 is given per round.

``--conventions``: instead, how far the two conventions (``raw``, LayerNorm's centring left out; ``transformerlens``,
folded in as TransformerLens's defaults do) are apart on ``--model`` (``random-gpt2``: a GPT-2-small shape, 12 × 12
heads, D = 768, with Hugging Face's own random initialisation, built in a temporary folder): the largest and mean
|raw − transformerlens| per kind, in units of the random baseline's sd too, and for how many receivers the top sender
changes. ``--transformerlens PYTHON``: also score the model with TransformerLens itself, run by PYTHON, the
interpreter of a separate venv (never this one's), offline, from the model's local folder, and print the largest
|TransformerLens − ours| in each convention:

    python3 -m venv /tmp/tlvenv && /tmp/tlvenv/bin/pip install torch==2.13.0
    /tmp/tlvenv/bin/pip install transformer_lens
    .venv/bin/python benchmarks/compose.py --conventions --model random-gpt2 --transformerlens /tmp/tlvenv/bin/python
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from report import alternate, publish, ratios, summary  # noqa: E402  (benchmarks/, this script's folder)

# TransformerLens's composition scores (TransformerLens 4: TransformerBridge + enable_compatibility_mode(), which is
# HookedTransformer's fold_ln + center_writing_weights; float64 weights, though it folds them in float32), per receiver
# layer: all_composition_scores builds every pair at once (22 GB for a GPT-2-small shape in float64). Run by the other
# venv's interpreter: argv[1] the model's folder, argv[2] the .npz to write ({"Q", "K", "V"}: [L, H, L, H]).
TRANSFORMERLENS = """
import sys, numpy as np, torch
from transformer_lens.FactoredMatrix import FactoredMatrix
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.utilities import composition_scores
b = TransformerBridge.boot_transformers(sys.argv[1], dtype=torch.float64, device="cpu")
b.enable_compatibility_mode(disable_warnings=True)
layers = [b.blocks[i].attn for i, _ in b.blocks_with("attn")]
stack = lambda name, fn: torch.stack([fn(getattr(a, name)) for a in layers])
W_Q, W_K = stack("W_Q", b._reshape_qkv), b._expand_kv_heads(stack("W_K", b._reshape_qkv))
W_V, W_O = b._expand_kv_heads(stack("W_V", b._reshape_qkv)), stack("W_O", b._reshape_o)
L, H = W_Q.shape[:2]
out = {m: np.zeros((L, H, L, H)) for m in "QKV"}
with torch.no_grad():
    left = FactoredMatrix(W_V, W_O)
    for r in range(1, L):
        qk = FactoredMatrix(W_Q[r:r + 1], W_K[r:r + 1].transpose(-2, -1))
        for m, right in (("Q", qk), ("K", qk.T), ("V", FactoredMatrix(W_V[r:r + 1], W_O[r:r + 1]))):
            out[m][:, :, r:r + 1] = composition_scores(left, right, broadcast_dims=True).numpy()
np.savez(sys.argv[2], **out)
"""


def random_gpt2(path: Path) -> Path:
    """A GPT-2-small shape (12 layers × 12 heads, D = 768) with Hugging Face's own random initialisation (LayerNorm
    gains 1, matrices N(0, 0.02)), and the tests' small tokenizer, saved in ``path``."""
    import torch
    from checkpoints import gpt2_tokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = gpt2_tokenizer()
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_layer=12, n_head=12, n_embd=768, bos_token_id=tok.eos_token_id,
                               eos_token_id=tok.eos_token_id)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def conventions(args) -> None:
    """The two conventions side by side on one model (and TransformerLens's own numbers, given its interpreter)."""
    import numpy as np

    from probes.effects.compose import composition_scores, conventions as offered
    from probes.models import load

    with tempfile.TemporaryDirectory() as tmp:
        model = load(str(random_gpt2(Path(tmp) / "random-gpt2")) if args.model == "random-gpt2" else args.model)
        frames, seconds = {}, {}
        for name in offered(model):
            start = time.perf_counter()
            frames[name] = composition_scores(model, convention=name)
            seconds[name] = time.perf_counter() - start
        mean, sd = frames["raw"].baseline_mean.iloc[0], frames["raw"].baseline_sd.iloc[0]
        lines = [f"composition scores in two conventions, {args.model}: {model.n_layers} layers × {model.n_heads} "
                 f"heads, all pairs, float64; random baseline {mean:.4f} ± {sd:.4f}; "
                 + ", ".join(f"{name} {took:.1f} s" for name, took in seconds.items())]
        for name, said in offered(model).items():
            lines.append(f"  {name}: {said}")
        keys = ["receiver_layer", "receiver_head"]

        def tops(frame):  # each receiver's top sender, receivers in order
            return frame.loc[frame.groupby(keys).score.idxmax(), ["sender_layer", "sender_head"]].to_numpy()

        if "transformerlens" in frames:
            lines += ["", f"{'kind':<5} {'max |raw − TL|':>15} {'in sd':>6} {'mean':>9}  top sender changes"]
            for kind in "qkv":
                raw, tl = (f[f.kind == kind].reset_index(drop=True) for f in (frames["raw"], frames["transformerlens"]))
                gap = (raw.score - tl.score).abs()
                changed = (tops(raw) != tops(tl)).any(axis=1)
                lines.append(f"{kind.upper():<5} {gap.max():>15.2g} {gap.max() / sd:>6.2f} {gap.mean():>9.2g}  "
                             f"{int(changed.sum())} of {len(changed)} receivers ({100 * changed.mean():.0f} %)")
        else:
            lines += ["", "transformerlens is refused on this model (post-norm): raw alone"]
        if args.transformerlens:
            npz = Path(tmp) / "transformerlens.npz"
            subprocess.run([args.transformerlens, "-c", TRANSFORMERLENS, str(model.location), str(npz)], check=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=tmp)
            theirs = np.load(npz)
            lines += ["", "TransformerLens itself (TransformerBridge + enable_compatibility_mode(), all pairs):"]
            for name, frame in frames.items():
                got = np.concatenate([theirs[k.upper()][p.sender_layer, p.sender_head, p.receiver_layer,
                                                        p.receiver_head] - p.score.to_numpy()
                                      for k in "qkv" for p in [frame[frame.kind == k]]])
                lines.append(f"  max |TransformerLens − ours ({name})| = {np.abs(got).max():.2g}")
    publish("\n".join(lines), args.out, f"compose_conventions_{Path(args.model).name}.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write compose.txt into this folder")
    parser.add_argument("--model", default="smollm2", help="a model name or folder (random-gpt2 with --conventions)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of float64 and float32, taking turns")
    parser.add_argument("--conventions", action="store_true",
                        help="compare the raw and transformerlens conventions instead of timing")
    parser.add_argument("--transformerlens", metavar="PYTHON",
                        help="with --conventions: TransformerLens's own scores, from this interpreter's venv")
    args = parser.parse_args()
    if args.conventions:
        return conventions(args)

    import torch

    from probes.effects.compose import HeadMaps, composition_scores, notes
    from probes.models import load
    from probes.scratch import build

    model = load(args.model)
    net = build(model)
    start = time.perf_counter()
    HeadMaps(net)
    gather = time.perf_counter() - start
    lines = [f"composition scores, {model.name}: {model.n_layers} layers × {model.n_heads} heads "
             f"({model.n_kv_heads} key/value heads), {torch.get_num_threads()} threads "
             f"(os.cpu_count() = {os.cpu_count()}); {'; '.join(notes(model))}",
             f"gathering the weights (float64): {gather:.2f} s", "",
             "time for all pairs (every earlier head → every head from layer 1), 20 baseline draws; median of "
             f"{args.rounds} rounds, float64 and float32 taking turns; ÷ float64: each round's own, median (min–max: "
             "every round)",
             f"{'kind':<6} {'dtype':<8} {'pairs':>7} {'seconds':>8} {'baseline':>16}   ÷ float64, per round"]
    frames, took, per_round = {}, {}, {}
    for kind in "qkv":  # float64 and float32 take turns round by round (report.alternate)
        timing = alternate({dtype: (lambda kind=kind, dtype=dtype: composition_scores(net, kind, dtype=dtype))
                            for dtype in (torch.float64, torch.float32)}, args.rounds)
        for dtype in (torch.float64, torch.float32):
            frames[kind, dtype], took[kind, dtype] = timing.results[dtype], timing.median(dtype)
        per_round[kind] = ratios(timing.seconds, torch.float64)[torch.float32]
    for dtype in (torch.float64, torch.float32):
        for kind in "qkv":
            frame = frames[kind, dtype]
            ratio = summary(per_round[kind]) if dtype == torch.float32 else "–"
            lines.append(f"{kind.upper():<6} {str(dtype).removeprefix('torch.'):<8} {len(frame):>7} "
                         f"{took[kind, dtype]:>8.2f} {frame.baseline_mean.iloc[0]:>8.4f} ± "
                         f"{frame.baseline_sd.iloc[0]:.4f}   {ratio}")
    all_kinds = time.perf_counter()
    composition_scores(net, "all")
    lines.append(f"all three kinds in one call (float64): {time.perf_counter() - all_kinds:.2f} s")
    gap = max(float((frames[k, torch.float64].score - frames[k, torch.float32].score).abs().max()) for k in "qkv")
    lines.append(f"largest |float64 − float32| score: {gap:.2g}")
    lines += ["", "the largest K-composition scores (float64):"]
    k = frames["k", torch.float64].sort_values("score", ascending=False).head(10)
    for row in k.itertuples():
        z = (row.score - row.baseline_mean) / row.baseline_sd
        lines.append(f"  {row.sender_layer}.{row.sender_head} → {row.receiver_layer}.{row.receiver_head}  "
                     f"{row.score:.4f}  ({z:+.1f} sd)")
    publish("\n".join(lines), args.out, "compose.txt")


if __name__ == "__main__":
    main()
