"""``python -m probes patch``: path patching, each sender head's output on a corrupted text patched into one receiver
head's q, k or v on the clean text (:mod:`probes.effects.paths`), senders ranked by effect."""

from __future__ import annotations

import argparse
import json
import sys

from .common import (MODEL_HELP, head_list_or_all, heads_of, index, load_model, loading_options, positive,
                     text_arg)


def run_patch(args: argparse.Namespace) -> int:
    from ..effects.ablation import lm_measures
    from ..effects.attribution import target_id
    from ..effects.paths import ABOUT, parse_head, path_patch
    from ..errors import BadOption, EmptyInput

    if not args.text.strip() or not args.corrupt.strip():
        raise EmptyInput("a text is empty: give the clean text (--text) and the corrupted one (--corrupt)")
    model = load_model(args)
    receiver = parse_head(args.receiver, model, "receiver")
    senders = None if args.senders is None else heads_of(model, args.senders)
    lm = lm_measures(model)
    targets = None
    if args.target or args.versus:
        if not lm:
            raise BadOption(f"{model.name} has no language-model head the from-scratch pass runs: no logits for "
                            "--target; its receiver's pattern change is still measured (leave --target out)")
        if not (args.target and args.versus):
            raise BadOption("a logit difference needs two tokens: --target WORD --versus WORD")
        targets = (target_id(model, args.target), target_id(model, args.versus))
    got = path_patch(model, args.text, args.corrupt, receiver, args.into, senders=senders, position=args.position,
                     targets=targets)
    ranked = got.ranked()
    top = ranked.head(args.top)
    name = f"{receiver[0]}.{receiver[1]}"
    if args.json:
        print(json.dumps(dict(model=model.name, text=args.text, corrupt=args.corrupt, receiver=name, into=args.into,
                              ranked_by="loss" if lm else "pattern_shift", senders=ranked.to_dict("records")),
                         ensure_ascii=False))
        return 0
    if not lm:
        print(f"note: {model.name} has no language-model head: senders are ranked by the receiver's pattern shift "
              "(no loss)", file=sys.stderr)
    print(f"{model.name}: each sender's output on --corrupt patched into receiver {name}'s {args.into} only "
          f"({len(ranked)} senders; the {len(top)} largest effects)")
    cols = ["loss", "pattern_shift", "pattern_change"] if lm else ["pattern_shift", "pattern_change"]
    if targets is not None:
        cols.insert(1, "logit_diff")
    print("  sender  " + "".join(f"{c:>16}" for c in cols))
    for row in top.itertuples():
        print(f"  {row.layer:>3}.{row.head:<3} " + "".join(f"{getattr(row, c):>+16.6f}" for c in cols))
    about = dict(ABOUT, loss="change in the mean next-token loss (nats)",
                 logit_diff="change in logit(target) − logit(versus)")
    for c in cols:
        print(f"  {c}: {about[c]}")
    return 0


def add_parser(sub) -> None:
    """The ``patch`` subcommand."""
    from ..models import OFFLINE_DEFAULT

    p = sub.add_parser("patch", help="path patching: which earlier heads reach one head through its q, k or v",
                       description="For each sender head (every head before the receiver's layer, or --senders), add "
                       "its output on --corrupt minus its output on --text to the receiver layer's input, recompute "
                       "only the receiver's q, k or v from it, and run on: the change in the receiver's attention "
                       "pattern and in the next-token loss (decoders with a language-model head). The two texts must "
                       "have the same length in tokens.")
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
    p.add_argument("--top", type=positive, default=10, help="senders to print (default: 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object (every sender, ranked)")
    loading_options(p)
    p.set_defaults(func=run_patch)
