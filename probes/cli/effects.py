"""``python -m probes ablate`` and ``python -m probes importance``: the head-effect commands."""

from __future__ import annotations

import argparse
import json
import sys

from .common import (
    MODEL_HELP,
    batch_size,
    head_list,
    index,
    load_model,
    loading_options,
    positive,
    print_top,
    projections,
    text_arg,
    threads_option,
)


def main_ablate(args: argparse.Namespace) -> int:
    from ..effects.ablation import ablate
    from ..effects.attribution import target_id
    from ..effects.measures import ABOUT
    from ..errors import BadOption, EmptyInput
    from ..head_index import check_heads

    if not args.text.strip():
        raise EmptyInput("the text is empty: give a sentence (--text)")
    if args.how == "patch" and not args.other:
        raise BadOption("--how patch takes the heads' outputs from another text: give it with --other")
    if args.other and args.how != "patch":
        raise BadOption("--other is the text patched from: it goes with --how patch")
    model = load_model(args)
    heads = check_heads(args.heads, model.n_layers, model.n_heads, where=model.name)
    targets = None
    if args.target or args.versus:
        if not model.predicts_tokens:
            raise BadOption(f"{model.name} is an encoder without a language-model head: it has no logits for "
                            "--target; its effects are measured on its hidden states")
        if not (args.target and args.versus):
            raise BadOption("a logit difference needs two tokens: --target WORD --versus WORD")
        targets = (target_id(model, args.target), target_id(model, args.versus))
    reference = None
    if args.how == "mean":
        from ..datasets.catalog import read_items, texts

        reference = texts(read_items(args.reference))[:args.reference_limit]
    effect = ablate(model, args.text, heads, args.how, other=args.other, reference=reference,
                    position=args.position, targets=targets, truncate=args.truncate)
    names = ", ".join(f"{layer}.{head}" for layer, head in heads)
    if args.json:
        print(json.dumps(dict(model=model.name, text=args.text, heads=names, how=args.how, other=args.other,
                              position=args.position, target=args.target, versus=args.versus, effects=effect),
                         ensure_ascii=False))
        return 0
    print(f"{model.name}: {args.how}-ablating head(s) {names}")
    for key, value in effect.items():
        print(f"  {key:<17} {value:+.6f}   {ABOUT[key]}")
    return 0


def main_importance(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from ..effects.importance import profile_importance
    from ..jobs import check_out

    check_out(args.out, args.force, {"--data": args.data},
              notify=lambda message: print(f"note: {message}", file=sys.stderr))
    threads = args.threads_chosen  # batch work, like profile (chosen by probes.cli.main)
    model = load_model(args)
    if model.scratch_problem:  # an architecture the from-scratch path does not cover is refused here, in one line
        from ..errors import UnsupportedModel

        raise UnsupportedModel(model.scratch_problem)
    frame = profile_importance(
        model, args.data, args.limit, Path(args.out), batch_size=args.batch_size,
        checkpoint_every=args.checkpoint_every, projections=args.projections, ablation=not args.no_ablation,
        strict=args.strict,
        notify=lambda message: print(f"note: {message}", file=sys.stderr),
        progress_factory=lambda total, name: tqdm(total=total, desc=name, unit="item", file=sys.stderr))
    print_top(frame, args.top)
    print(f"wrote {len(frame)} rows to {args.out} ({threads.describe()})", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    """The ``ablate`` and ``importance`` subcommands."""
    from ..datasets.catalog import BUILTIN
    from ..models import OFFLINE_DEFAULT

    p = sub.add_parser("ablate", help="ablate heads on a text and say what changed",
                       description="Zero-, mean-ablate or patch heads on a text with the from-scratch pass and print "
                       "the change in each measure: next-token loss, top predictions and a logit difference (decoders "
                       "with a language-model head), and the last hidden states (every model).")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--text", type=text_arg, required=True)
    p.add_argument("--heads", type=head_list, required=True, help="LAYER.HEAD, comma-separated (e.g. 1.2,5.4): "
                   "ablated together (a head named twice counts once)")
    p.add_argument("--how", choices=("zero", "mean", "patch"), default="zero",
                   help="zero: the head writes nothing; mean: its mean output over --reference; patch: its output "
                   "on --other (a text of the same length in tokens)")
    p.add_argument("--other", type=text_arg, help="the text patched from (--how patch)")
    p.add_argument("--truncate", action="store_true", help="keep the first tokens of a text (and of --other) longer "
                   "than the context window instead of refusing it")
    p.add_argument("--reference", default="ewt-dev", help=f"texts averaged for --how mean: {', '.join(BUILTIN)} or "
                   "a .txt/.conllu/.jsonl file (default: ewt-dev)")
    p.add_argument("--reference-limit", type=positive, default=64, help="first N reference texts (default: 64)")
    p.add_argument("--position", type=index, help="token whose change token_change and the logit difference measure "
                   "(default: the last)")
    p.add_argument("--target", type=text_arg,
                   help="a one-token word: the logit difference is logit(target) − logit(versus)")
    p.add_argument("--versus", type=text_arg, help="the second word of the logit difference")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    loading_options(p)
    threads_option(p, "batch")
    p.set_defaults(func=main_ablate)

    p = sub.add_parser("importance", help="head importance over a dataset (Michel et al.), with each head's exact "
                       "ablation effect", description="Gate every head's output and average |∂L/∂gate| over the "
                       "items (L2-normalised per layer); beside it the exact zero-ablation effect. Decoders: L is the "
                       "next-token loss; encoders: the last hidden states on random directions.")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--data", default="ewt-dev", help=f"{', '.join(BUILTIN)}, or a .conllu, .jsonl or .txt file "
                   "(default: ewt-dev)")
    p.add_argument("--limit", type=positive, help="use only the first N items")
    p.add_argument("--out", required=True, help="result table: .csv, .json or .parquet")
    p.add_argument("--batch-size", type=batch_size, default=8)
    p.add_argument("--checkpoint-every", type=positive, default=32, help="items per checkpoint (a rerun resumes)")
    p.add_argument("--projections", type=projections, default=8, help="random directions per item (encoders)")
    p.add_argument("--no-ablation", action="store_true", help="the gradient only (ablating every head of every "
                   "item takes layers × heads edited copies)")
    p.add_argument("--top", type=positive, default=3, help="heads to print per label")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--strict", action="store_true", help="stop on any bad item of the data")
    threads_option(p, "profile", reports=True)  # on its last line, beside "wrote"
    loading_options(p)
    p.set_defaults(func=main_importance)
