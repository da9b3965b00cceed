"""What every command shares: one way to quiet transformers, to load the model a command names, to read a count
and to print the best heads of a table."""

from __future__ import annotations

import argparse
import os

from ..models import OFFLINE_DEFAULT, Model, load

MODEL_HELP = f"short name, hub id or local directory (default: {OFFLINE_DEFAULT})"


def quiet_transformers() -> None:
    """transformers' warnings and progress bars off: a command prints its own lines."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def load_model(args: argparse.Namespace, name: str | None = None) -> Model:
    """The model a command names (``--model``, or ``name``), loaded the way its ``--hub-only`` and ``--device``
    say, with transformers quiet."""
    quiet_transformers()
    return load(args.model if name is None else name, allow_local_paths=not args.hub_only, device=args.device)


def loading_options(parser: argparse.ArgumentParser) -> None:
    """The options :func:`load_model` reads besides ``--model``: ``--device`` and ``--hub-only``."""
    parser.add_argument("--device", default="auto")
    parser.add_argument("--hub-only", action="store_true", help="refuse local paths")


def positive(text: str) -> int:
    """argparse type: a whole number of 1 or more (0 and negative counts are mistakes, not "all")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def print_top(frame, top: int) -> None:
    """The ``top`` best heads of each label (per model, for several), as a table on stdout."""
    import pandas as pd

    from ..heads.engine import top_heads

    if "model" in frame:
        best = pd.concat([top_heads(part, top) for _, part in frame.groupby("model", sort=False)], ignore_index=True)
    else:
        best = top_heads(frame, top)
    cols = [c for c in ("model", "probe", "label", "layer", "head", "score", "baseline", "n", "offset")
            if c in best.columns]
    with pd.option_context("display.max_rows", 500, "display.width", 160, "display.float_format", "{:.3f}".format):
        print(best[cols].to_string(index=False))
