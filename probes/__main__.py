"""Command line: ``python -m probes parity --model MODEL --text TEXT [--pair TEXT_B] [--json]``.

Exit codes: 0 every figure within tolerance, 1 a mismatch, 2 bad input or an unsupported model
(one line on stderr naming the reason).
"""

from __future__ import annotations

import argparse
import os
import sys

from .errors import ProbesError
from .models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT


def _quiet_transformers() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def cmd_parity(args: argparse.Namespace) -> int:
    from . import parity
    from .models import load

    _quiet_transformers()
    model = load(args.model, allow_local_paths=not args.hub_only, device=args.device)
    report = parity.check(model, args.text, args.pair, truncate=args.truncate, backend=args.backend)
    if args.json:
        print(report.to_json())
    else:
        print(report.to_text())
    return 0 if report.passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m probes", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "parity",
        help="run Hugging Face and our from-scratch forward pass on a text and compare their attention",
        description="Compare Hugging Face (eager, fp32) with the from-scratch forward pass on every layer and "
        f"head. Models: {OFFLINE_DEFAULT!r} (offline default, all-MiniLM-L6-v2), a hub id such as "
        f"{', '.join(KNOWN_HUB_MODELS)}, or a local model directory.",
    )
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=f"short name, hub id or local directory "
                   f"(default: {OFFLINE_DEFAULT})")
    p.add_argument("--text", required=True, help="the text to run")
    p.add_argument("--pair", default=None, help="a second sentence (BERT sentence pairs)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--truncate", action="store_true",
                   help="keep the first tokens of a text longer than the context window instead of refusing it")
    p.add_argument("--backend", choices=("eager", "sdpa", "flash"), default="eager",
                   help="attention backend of the from-scratch pass: eager materialises the probabilities; sdpa "
                   "and flash keep the logsumexp and are compared through the probabilities recovered from it "
                   "(flash needs CUDA; without it sdpa runs and the report says so)")
    p.add_argument("--device", default="auto",
                   help="where to run both passes: cpu, cuda, or auto (CUDA when there is one; default)")
    p.add_argument("--hub-only", action="store_true", help="refuse local paths (as a public deployment does)")
    p.set_defaults(func=cmd_parity)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ProbesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
