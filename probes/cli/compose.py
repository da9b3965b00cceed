"""``python -m probes compose``: which earlier heads a head composes with (Q-, K-, V-composition scores from the
weights alone, :mod:`probes.effects.compose`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import MODEL_HELP, draws, load_model, loading_options, positive, seed, threads_option


def main(args: argparse.Namespace) -> int:
    from ..effects.compose import (
        ABOUT,
        composition_scores,
        convention_said,
        conventions,
        notes,
        parse_kinds,
        parse_receiver,
    )
    from ..evidence.edges import ALPHA, COMPOSITION_RULE, composition_floors

    kinds = parse_kinds(args.kind)  # bad options fail before the model loads
    model = load_model(args)
    layer, head = parse_receiver(args.receiver, model.n_layers, model.n_heads)
    # these are readers (@probes.seam.reader) typed LocalModel | Network: a served model (--ray) is right too, its
    # server runs them on its own LocalModel
    frame = composition_floors(composition_scores(model,
                                                  kinds, receivers=[(layer, head)], draws=args.draws,
                                                  seed=args.seed, convention=args.convention))
    lines = notes(model, args.convention)
    said = convention_said(model, args.convention)
    # a LayerNorm decoder: the other convention gives other numbers
    if len(set(conventions(model).values())) > 1:
        said += ("; --convention raw leaves it out" if args.convention == "transformerlens" else
                 "; --convention transformerlens folds it in as TransformerLens's defaults do")
    result: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        part = frame[frame.kind == kind].dropna(subset=["score"]).sort_values("score", ascending=False)
        top = part.head(args.top)
        floor = float(part.floor.iloc[0]) if len(part) else None
        result[kind] = dict(about=ABOUT[kind], baseline_mean=float(frame.baseline_mean.iloc[0]),
                            baseline_sd=float(frame.baseline_sd.iloc[0]),
                            random_low=float(frame.random_low.iloc[0]), random_high=float(frame.random_high.iloc[0]),
                            senders=len(part), floor=floor, above_floor=int(part.above_floor.sum()),
                            top=[dict(sender=f"{r.sender_layer}.{r.sender_head}", score=float(r.score), z=float(r.z),
                                      floor=float(r.floor), above_floor=bool(r.above_floor))
                                 for r in top.itertuples()])
    if args.json:
        print(json.dumps(dict(model=model.name, receiver=f"{layer}.{head}", draws=args.draws,
                              convention=args.convention, convention_about=said, notes=lines,
                              alpha=ALPHA, rule=COMPOSITION_RULE, kinds=result), ensure_ascii=False))
        return 0
    print(f"{model.name}, receiver head {layer}.{head}: the earlier heads it composes with most")
    print(f"convention: {said}")
    print(f"note: {'; '.join(lines)}")
    for kind, got in result.items():
        mean, sd = got["baseline_mean"], got["baseline_sd"]
        if not got["top"]:
            print(f"{kind.upper()}-composition: no score (the receiver's map, or every sender's, is all zero)")
            continue
        print(f"{kind.upper()}-composition: {got['about']}; random baseline {mean:.3f} ± {sd:.3f} "
              f"({args.draws} draws; 95 % of random matrices {got['random_low']:.3f} to {got['random_high']:.3f}); "
              f"noise floor {got['floor']:.4f}")
        for rank, row in enumerate(got["top"], start=1):
            mark = "above the floor" if row["above_floor"] else "below the floor"
            print(f"  {rank:>2}. head {row['sender']:<6} {row['score']:.4f}  floor {row['floor']:.4f}  {mark}  "
                  f"({row['z']:+.1f} sd from the baseline)")
        print(f"  {got['above_floor']} of {got['senders']} senders clear the floor {got['floor']:.4f}")
    print(f"rule: {COMPOSITION_RULE}")
    return 0


def add_parser(sub) -> None:
    """The ``compose`` subcommand."""
    from ..models import OFFLINE_DEFAULT

    p = sub.add_parser("compose", help="which earlier heads a head composes with (weights only)",
                       description="Composition scores (Elhage et al. 2021) of every earlier head onto head "
                       "LAYER.HEAD, from the weights alone: how much of what the earlier head writes the receiver "
                       "reads as its query (Q), key (K) or value (V), ‖W_OV·W‖ ÷ (‖W_OV‖·‖W‖), beside the same score "
                       "of random matrices of the same shapes and its noise floor (Bonferroni over the senders: at "
                       "most 1 receiver in 20 gets a false edge). Norm gains folded in; biases, the norms' scale and "
                       "rotary positions (offset 0) left out; LayerNorm's centring left out too unless "
                       "--convention transformerlens.")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--receiver", required=True, help="the receiving head, LAYER.HEAD (layer 1 or later), e.g. 18.6")
    p.add_argument("--kind", default="all", help="q, k, v or all (default: all)")
    p.add_argument("--top", type=positive, default=5, help="senders to print per kind (default: 5)")
    p.add_argument("--draws", type=draws, default=20, help="random draws for the baseline (default: 20)")
    p.add_argument("--seed", type=seed, default=0, help="the baseline's random seed (default: 0)")
    p.add_argument("--convention", choices=("raw", "transformerlens"), default="raw",
                   help="raw (the default): LayerNorm's centring left out, this library's own numbers; "
                        "transformerlens: folded in (W_Q, W_K, W_V and every head's W_O centred), the numbers "
                        "TransformerLens's all_composition_scores gives with its default weights (fold_ln, "
                        "center_writing_weights). The same on RMSNorm models (Llama, SmolLM2); refused on BERT "
                        "(post-norm: TransformerLens folds nothing there)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    loading_options(p)
    threads_option(p, "batch")
    p.set_defaults(func=main)
