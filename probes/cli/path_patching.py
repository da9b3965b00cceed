"""``python -m probes patch``: path patching, each sender head's output on a corrupted text patched into one receiver
head's q, k or v on the clean text (:mod:`probes.effects.path_patching`), senders ranked by effect."""

from __future__ import annotations

import argparse
import json
import math
import sys

from .common import (
    MODEL_HELP,
    Count,
    head_list_or_all,
    index,
    load_model,
    loading_options,
    positive,
    seed,
    text_arg,
    threads_option,
)

nulls = Count(2, 64, "each null corruption is one more path-patching run of the senders checked")


def main(args: argparse.Namespace) -> int:
    from ..effects.attribution import target_id
    from ..effects.path_patching import ABOUT, parse_head, path_patch
    from ..errors import BadOption, EmptyInput
    from ..evidence.edges import null_corruptions, patch_floors
    from ..head_index import check_heads

    if not args.text.strip() or not args.corrupt.strip():
        raise EmptyInput("a text is empty: give the clean text (--text) and the corrupted one (--corrupt)")
    model = load_model(args)
    receiver = parse_head(args.receiver, model, "receiver")
    senders = None if args.senders is None else check_heads(args.senders, model.n_layers, model.n_heads,
                                                            where=model.name)
    lm = model.predicts_tokens
    targets = None
    if args.target or args.versus:
        if not lm:
            raise BadOption(f"{model.name} has no language-model head the from-scratch pass runs: no logits for "
                            "--target; its receiver's pattern change is still measured (leave --target out)")
        if not (args.target and args.versus):
            raise BadOption("a logit difference needs two tokens: --target WORD --versus WORD")
        targets = (target_id(model, args.target), target_id(model, args.versus))
    null_corruptions(model, args.text, args.corrupt, args.nulls, args.null_seed)  # a text too short: before the run
    got = path_patch(model, args.text, args.corrupt, receiver, args.into, senders=senders, position=args.position,
                     targets=targets)
    evidence = patch_floors(model, args.text, args.corrupt, receiver, args.into, result=got, count=args.nulls,
                            seed=args.null_seed, top=args.top, position=args.position, targets=targets)
    measure = evidence.measure
    ranked = got.ranked(measure)
    floored = evidence.frame.set_index(["layer", "head"])
    ranked = floored.loc[list(zip(ranked["layer"], ranked["head"], strict=True))].reset_index()
    top = ranked.head(args.top)
    above = evidence.above
    name = f"{receiver[0]}.{receiver[1]}"
    if args.json:
        records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                   for r in ranked.to_dict("records")]  # JSON has no NaN: a sender not checked has no floor (null)
        print(json.dumps(dict(model=model.name, text=args.text, corrupt=args.corrupt, receiver=name, into=args.into,
                              ranked_by=measure, nulls=args.nulls, null_seed=args.null_seed, floor_rule=evidence.rule,
                              checked=len(evidence.checked), above_floor=len(above), senders=records),
                         ensure_ascii=False))
        return 0
    if not lm:
        print(f"note: {model.name} has no language-model head: senders are ranked by the receiver's pattern shift "
              "(no loss)", file=sys.stderr)
    print(f"{model.name}: each sender's output on --corrupt patched into receiver {name}'s {args.into} only "
          f"({len(ranked)} senders; the {len(top)} largest effects, each beside its noise floor: the largest "
          f"|{measure}| of the same patch from {args.nulls} corruptions that change as many tokens elsewhere)")
    cols = ["loss", "pattern_shift", "pattern_change"] if lm else ["pattern_shift", "pattern_change"]
    if targets is not None:
        cols.insert(1, "logit_diff")
    print("  sender  " + "".join(f"{c:>16}" for c in cols) + f"{'floor (' + measure + ')':>24}  above it")
    for row in top.itertuples():
        clears = "yes" if getattr(row, f"{measure}_above") else "no"
        print(f"  {row.layer:>3}.{row.head:<3} " + "".join(f"{getattr(row, c):>+16.6f}" for c in cols)
              + f"{getattr(row, f'{measure}_floor'):>24.6f}  {clears}")
    about = dict(ABOUT, loss="change in the mean next-token loss (nats)",
                 logit_diff="change in logit(target) − logit(versus)")
    for c in cols:
        print(f"  {c}: {about[c]}")
    if len(above):
        shown = ", ".join(f"{a}.{b}" for a, b in zip(above["layer"], above["head"], strict=True))
        print(f"{len(above)} of the {len(evidence.checked)} senders checked clear their noise floor: {shown}")
    else:
        print(f"no sender's effect is above what a change elsewhere in the text does through the same path (its "
              f"noise floor): none of the {len(evidence.checked)} largest |{measure}| is above the largest of "
              f"{args.nulls} null corruptions")
    print(f"rule: {evidence.rule}")
    return 0


def add_parser(sub) -> None:
    """The ``path-patch`` subcommand (``patch`` too, its earlier name)."""
    from ..models import OFFLINE_DEFAULT

    p = sub.add_parser("path-patch", aliases=["patch"],
                       help="path patching: which earlier heads reach one head through its q, k or v",
                       description="For each sender head (every head before the receiver's layer, or --senders), add "
                       "its output on --corrupt minus its output on --text to the receiver layer's input, recompute "
                       "only the receiver's q, k or v from it, and run on: the change in the receiver's attention "
                       "pattern and in the next-token loss (decoders with a language-model head). The two texts must "
                       "have the same length in tokens. Each of the --top largest effects is set beside its noise "
                       "floor: the same patch from --nulls corruptions that change as many tokens elsewhere.")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--text", type=text_arg, required=True, help="the clean text")
    p.add_argument("--corrupt", type=text_arg, required=True, help="the corrupted text (same length in tokens)")
    p.add_argument("--receiver", required=True, help="LAYER.HEAD of the receiver (layer 1 or later)")
    p.add_argument("--into", choices=("q", "k", "v"), default="k", help="which input of the receiver (default: k)")
    p.add_argument("--senders", type=head_list_or_all, default="all", help="all (every head before the receiver's "
                   "layer) or LAYER.HEAD, comma-separated")
    p.add_argument("--position", type=index, help="token whose change the logit difference measures (default: last)")
    p.add_argument("--target", type=text_arg,
                   help="a one-token word: the logit difference is logit(target) − logit(versus)")
    p.add_argument("--versus", type=text_arg, help="the second word of the logit difference")
    p.add_argument("--top", type=positive, default=10, help="senders to print and check against their noise floor "
                   "(default: 10)")
    p.add_argument("--nulls", type=nulls, default=8, help="null corruptions for the noise floor: the clean text with "
                   "as many tokens changed elsewhere (default: 8; the floor is the largest effect among them)")
    p.add_argument("--null-seed", type=seed, default=0, help="the null corruptions' random seed (default: 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object (every sender, ranked)")
    loading_options(p)
    threads_option(p, "batch")
    p.set_defaults(func=main)
