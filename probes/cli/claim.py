"""``python -m probes claim``: which head answers a question, judged on items it was not chosen on
(:mod:`probes.evidence.claims`)."""

from __future__ import annotations

import argparse
import json
import sys

from .common import MODEL_HELP, Count, load_model, loading_options, seed, text_arg, threads_option

controls_count = Count(2, 2000, "each control is one sentence run through the model")


def _print(ev, model: str) -> None:
    from ..evidence.claims import box_sentence
    from ..evidence.controls import recipes
    from ..evidence.record import percent, span

    if ev.head is None:
        print(f"{model}: no head could be chosen: {ev.said}")
        return
    layer, head = ev.head
    if ev.split is not None:
        split = ev.split
        print(f"{model}: head {layer}.{head} {ev.claim}: chosen on {len(split.chosen_on)} of {split.n} {ev.unit} "
              f"(seed {split.seed}; {percent(ev.chosen_score)} right there), judged on the other {ev.n}")
    else:
        print(f"{model}: head {layer}.{head} {ev.claim}: judged on all {ev.n} {ev.unit} (the head was given)")
    if ev.on_key is not None:
        print(f"on the text: {ev.on_key:.3f} of {ev.query!r}'s attention on {ev.key!r}, {ev.on_against:.3f} on "
              f"{ev.against!r} (margin {ev.text_margin:+.3f})")
    print(f"held out: {round(ev.score * ev.n)} of {ev.n} right = {percent(ev.score)} (95 % interval "
          f"{span(ev.low, ev.high)}); mean margin {ev.margin:+.3f} ({ev.margin_low:+.3f} to "
          f"{ev.margin_high:+.3f})")
    parts = [f"{b.name} {percent(b.score)}" + (f" (the head agrees with it on {percent(b.agreement)})"
                                                if b.agreement is not None else "") for b in ev.baselines]
    print("baselines on the same items: " + ", ".join(parts))
    print(f"verdict: {ev.said}")
    print(box_sentence(ev))
    made = ", ".join(f"{what} {count}" for what, count in recipes(ev.made).items())
    print(f"{ev.unit}: {made} (--json lists every recipe)")
    if ev.text_best is not None and ev.text_best != ev.head:
        print(f"(on the text alone the largest margin is head {ev.text_best[0]}.{ev.text_best[1]}'s: one sentence, "
              "not evidence)")


def main(args: argparse.Namespace) -> int:
    from ..errors import BadOption, EmptyInput
    from ..evidence.claims import question_evidence
    from ..evidence.questions import read_questions
    from ..head_index import parse_head
    from ..jobs import report_bad

    asked = [name for name in ("query", "key", "against") if getattr(args, name)]
    if args.data and (args.text is not None or asked):
        raise BadOption("give --text with --query, --key and --against, or --data FILE.jsonl, not both")
    if not args.data:
        if args.text is None:
            raise BadOption("say what to judge: --text T --query W --key W --against W, or --data FILE.jsonl")
        if not args.text.strip():
            raise EmptyInput("the text is empty: give a sentence (--text)")
        missing = [f"--{name}" for name in ("query", "key", "against") if not getattr(args, name)]
        if missing:
            raise BadOption(f"a question on --text needs {', '.join(missing)} too (e.g. --query she --key Xiaohong "
                            "--against Xiaoming)")
    questions = None
    if args.data:
        questions = read_questions(args.data)
        notify = (lambda message: print(f"note: {message}", file=sys.stderr)) if not args.json else None
        report_bad("claim", args.data, questions.bad, len(questions), None, args.strict, notify)
    model = load_model(args)
    head = parse_head(args.head, model.n_layers, model.n_heads, "--head", model.name) if args.head else None
    bar = None

    def progress(done: int, total: int) -> None:  # a bar once items run (a refusal before that is one line)
        nonlocal bar
        if args.json:
            return
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="claim", unit="item", file=sys.stderr, leave=False)
        bar.n = done
        bar.refresh()

    try:
        ev = question_evidence(model, args.text, args.query, args.key, args.against, questions=questions, head=head,
                               n_controls=args.controls, seed=args.seed, source=args.source, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    for note in ev.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(dict(model=model.name, **ev.to_dict()), ensure_ascii=False))
        return 0
    _print(ev, model.name)
    return 0


def add_parser(sub) -> None:
    from ..evidence.controls import DEFAULT_CONTROLS
    from ..models import OFFLINE_DEFAULT
    from ..runner import SOURCES

    p = sub.add_parser("claim", help="which head answers a question, judged on items it was not chosen on",
                       description="Which head finds what a word refers to, and how sure that is. On --text: controls "
                       "of the sentence are built (the verb flipped, the candidates swapped, templates, WinoBias); "
                       "with --data: your questions. The head is chosen on a seeded half of the items and judged on "
                       "the other half (with --head: that head, judged on all of them), against the most recent "
                       "candidate, the first-mentioned one and chance, with a 95 %% interval. Exit 0 with a verdict "
                       "whatever it is, 2 on bad input.")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--text", type=text_arg, help="the sentence the question is asked of")
    p.add_argument("--query", type=text_arg, help="the word whose attention is read (a pronoun: she)")
    p.add_argument("--key", type=text_arg, help="what it refers to (Xiaohong)")
    p.add_argument("--against", type=text_arg, help="the other candidate (Xiaoming)")
    p.add_argument("--data", help="your own questions instead: .jsonl, one {text, pronoun, candidates, answer} a line")
    p.add_argument("--head", help="judge this head (LAYER.HEAD) on every item instead of choosing one")
    p.add_argument("--controls", type=controls_count, default=DEFAULT_CONTROLS,
                   help=f"controls built for --text (default {DEFAULT_CONTROLS}: half to choose on, half to judge on)")
    p.add_argument("--seed", type=seed, default=0, help="the split's seed (and the controls' draw); default 0")
    p.add_argument("--source", choices=("auto", *SOURCES), default="auto",
                   help="Hugging Face's pass or the from-scratch one (auto: from scratch where the family has one)")
    p.add_argument("--strict", action="store_true", help="stop (exit 2, listing them) on any bad line of --data")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    loading_options(p)
    threads_option(p, "batch")
    p.set_defaults(func=main)
