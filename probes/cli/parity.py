"""``python -m probes parity``: Hugging Face against the from-scratch pass on one text."""

from __future__ import annotations

import argparse

from ..families import coverage
from ..models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT
from ..scratch import BACKENDS
from .common import MODEL_HELP, load_model, served_option, text_arg, threads_option


def main(args: argparse.Namespace) -> int:
    from .. import parity

    model = load_model(args)
    # a reader typed Model: a served model (--ray) is right too, its server checks its own LocalModel
    report = parity.check(model,
                          args.text, args.pair, truncate=args.truncate, backend=args.backend, dtype=args.dtype)
    if args.json:
        print(report.to_json())
    else:
        print(report.to_text())
    return 0 if report.passed else 1


def add_parser(sub) -> None:
    p = sub.add_parser(
        "parity",
        help="run Hugging Face and our from-scratch forward pass on a text and compare their attention",
        description="Compare Hugging Face (eager, fp32) with the from-scratch forward pass on every layer and "
        f"head ({coverage()}). Models: {OFFLINE_DEFAULT!r} (offline default, all-MiniLM-L6-v2), a hub id such as "
        f"{', '.join(KNOWN_HUB_MODELS)}, or a local model directory.",
    )
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--text", type=text_arg, required=True, help="the text to run")
    p.add_argument("--pair", type=text_arg, default=None, help="a second sentence (BERT sentence pairs)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--truncate", action="store_true",
                   help="keep the first tokens of a text longer than the context window instead of refusing it")
    p.add_argument("--backend", choices=tuple(BACKENDS), default="eager",
                   help="attention backend of the from-scratch pass: eager materialises the probabilities; sdpa "
                   "and flash keep the logsumexp and are compared through the probabilities recovered from it "
                   "(flash needs CUDA; without it sdpa runs and the report says so)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="float32 (default): what the app shows, judged against fp32 rounding; float64: both passes on "
                   "a float64 copy of the model, the proof that they are the same function (attention within 1e-10 "
                   "on any machine; eager and sdpa, not the fp32-only flash kernel)")
    p.add_argument("--device", default="auto",
                   help="where to run both passes: cpu, cuda, or auto (CUDA when there is one; default)")
    p.add_argument("--hub-only", action="store_true", help="refuse local paths (as a public deployment does)")
    served_option(p)
    threads_option(p, "batch")
    p.set_defaults(func=main)
