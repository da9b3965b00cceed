"""What every command shares: one way to quiet transformers, to load the model a command names, the types of its
numbers and head lists (one vocabulary for every command; heads are read by :mod:`probes.head_index`), and to print
the best heads of a table."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable

from ..errors import BadOption
from ..head_index import Head, read_heads, read_heads_or_all
from ..models import OFFLINE_DEFAULT, load
from ..seam import ModelLike

MODEL_HELP = f"short name, hub id or local directory (default: {OFFLINE_DEFAULT})"


def quiet_transformers() -> None:
    """transformers' warnings and progress bars off: a command prints its own lines."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def load_model(args: argparse.Namespace, name: str | None = None) -> ModelLike:
    """The model a command names (``--model``, or ``name``), loaded the way its ``--hub-only`` and ``--device``
    say, with transformers quiet; with ``--ray [ADDRESS]``, the model a server on that Ray cluster holds
    (:func:`probes.load` with ``ray=``), on which the command's readers then run."""
    quiet_transformers()
    name = args.model if name is None else name
    served_on = getattr(args, "served_on", None)
    if served_on:
        from .. import load as load_anywhere

        return load_anywhere(name, ray=served_on)
    return load(name, allow_local_paths=not args.hub_only, device=args.device)


def loading_options(parser: argparse.ArgumentParser, served: bool = True) -> None:
    """The options :func:`load_model` reads besides ``--model``: ``--device``, ``--hub-only`` and (``served``) the
    Ray cluster whose server holds the model (:func:`served_option`)."""
    parser.add_argument("--device", default="auto")
    parser.add_argument("--hub-only", action="store_true", help="refuse local paths")
    if served:
        served_option(parser)


RAY_ADDRESS_HELP = ("HOST:6379 (a Ray head), or --ray alone (the same as --ray auto) for the cluster this machine "
                    "has joined (RAY_ADDRESS, ray start)")


def ray_option(parser, what: str, dest: str = "ray") -> None:
    """``--ray [ADDRESS]``, one meaning on every command: the Ray cluster at ADDRESS, or alone (``auto``) the cluster
    this machine has joined. ``what``: what the command does there (its help, before :data:`RAY_ADDRESS_HELP`). A
    command that can also start a Ray of its own has another flag for it (``profile --local-ray``)."""
    parser.add_argument("--ray", dest=dest, nargs="?", const="auto", default=None, metavar="ADDRESS",
                        help=f"{what}: {RAY_ADDRESS_HELP}")


def served_option(parser: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``: use the model a server on that Ray cluster holds (``python -m probes serve``)."""
    ray_option(parser, "use the model that a server on this Ray cluster holds (start one with python -m probes serve "
               "--model NAME --ray ADDRESS); the work runs there, with the same numbers as here", dest="served_on")


# -- torch's threads: every command says the kind of its work, the dispatcher (probes.cli.main) chooses from it -----

THREADS_HELP = ("torch's CPU threads (default: $PROBES_THREADS, else $OMP_NUM_THREADS, else chosen from the CPUs other "
                "work leaves free and the kind of work; see probes/threads.py)")
Work = str | Callable[[argparse.Namespace], str]  # a kind of probes.threads.KINDS, or one read from the arguments


def threads_option(parser: argparse.ArgumentParser, work: Work, *, reports: bool = False) -> None:
    """``--threads N`` and the kind of the command's work (:data:`probes.threads.KINDS`: ``batch`` for whole passes,
    ``stream`` for work a token at a time; or a function of the parsed arguments that says which), from which the
    dispatcher chooses torch's threads before the command runs (:func:`apply_threads`). ``reports``: the command
    prints the choice itself (``args.threads_chosen``), else the dispatcher prints it on stderr after a run."""
    parser.add_argument("--threads", type=threads, help=THREADS_HELP)
    parser.set_defaults(work=work, threads_reported=reports)


def no_threads(parser: argparse.ArgumentParser, why: str) -> None:
    """A command that runs no torch work in this process (``serve``: its server's threads are its ``--cpus``), and
    ``why``, for whoever reads the registry."""
    parser.set_defaults(work=None, no_threads_why=why)


def glibc_threshold(parser: argparse.ArgumentParser, why: str) -> None:
    """A command that leaves glibc's moving mmap threshold alone (:mod:`probes.memory`), and ``why``: a run of one
    text start to end in a process of its own, where the page faults of a fixed threshold cost more than the memory
    it hands back mid-run (every other command fixes it, as the app does). ``PROBES_MMAP_THRESHOLD``, when set, is
    still obeyed (:func:`steadies`)."""
    parser.set_defaults(steady_memory=False, glibc_threshold_why=why)


def steadies(args: argparse.Namespace) -> bool:
    """Whether the dispatcher fixes the mmap threshold for the parsed command (:func:`probes.memory.steady`): every
    command but those that said :func:`glibc_threshold`, and those too when ``PROBES_MMAP_THRESHOLD`` is set."""
    from ..memory import ENV

    return bool(getattr(args, "steady_memory", True)) or ENV in os.environ


def work_of(args: argparse.Namespace) -> str | None:
    """The kind of work of the parsed command (None: no torch work here). A command that declared nothing is a
    mistake of its own module (tests/cli/test_threads.py walks every subcommand)."""
    if "work" not in args:
        raise TypeError(f"the command {args.command!r} does not say the kind of its work: call threads_option or "
                        "no_threads in its add_parser")
    work = args.work
    return work(args) if callable(work) else work


def apply_threads(args: argparse.Namespace):
    """Set torch's threads for the parsed command (:func:`probes.threads.apply` with its kind of work and
    ``--threads``); the :class:`probes.threads.Choice`, also kept as ``args.threads_chosen``, or None for a command
    that runs no torch work here (:func:`no_threads`)."""
    kind = work_of(args)
    args.threads_chosen = None
    if kind is None:
        return None
    from ..threads import apply

    args.threads_chosen = apply(kind, args.threads)
    return args.threads_chosen


def _shown(text: str) -> str:
    """What the user typed, quoted, and cut short when it is long (a message is one line)."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


class Count:
    """argparse type: a whole number from ``minimum`` to ``maximum``. Every whole-number option of every command
    takes one (the vocabulary below), so 0 and negative counts are mistakes, not "all", and a huge number is refused
    in one line instead of overflowing later; ``why`` says what the upper bound protects, ``zero`` what 0 means where
    it is allowed."""

    def __init__(self, minimum: int = 1, maximum: int = 10**9, why: str = "", zero: str = ""):
        self.minimum, self.maximum, self.why, self.zero = minimum, maximum, why, zero
        self.__name__ = "whole number"  # argparse names the type by it

    def __call__(self, text: str) -> int:
        try:
            if not text.isascii():  # int() takes '٣' (3) and other scripts' digits: a number here is ASCII
                raise ValueError(text)
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {_shown(text)}") from None
        if not self.minimum <= value <= self.maximum:
            zero = f" ({self.zero})" if self.zero else ""
            why = f": {self.why}" if self.why and value > self.maximum else ""
            shown = value if len(str(value)) <= 40 else _shown(str(value))
            raise argparse.ArgumentTypeError(f"expected a whole number from {self.minimum}{zero} to {self.maximum:,}, "
                                             f"got {shown}{why}")
        return value

    def __repr__(self) -> str:
        return f"Count({self.minimum}, {self.maximum})"


class Real:
    """argparse type: a finite number above ``low`` (or from it, ``low_open=False``) and at most ``high``."""

    def __init__(self, low: float, high: float = math.inf, low_open: bool = True, hint: str = ""):
        self.low, self.high, self.low_open, self.hint = low, high, low_open, hint
        self.__name__ = "number"

    def __call__(self, text: str) -> float:
        try:
            if not text.isascii():  # float() takes '٣' (3) and other scripts' digits: a number here is ASCII
                raise ValueError(text)
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)}") from None
        low_ok = value > self.low if self.low_open else value >= self.low
        if not (math.isfinite(value) and low_ok and value <= self.high):
            if math.isfinite(self.high):
                what = (f"above {self.low:g} and at most {self.high:g}" if self.low_open
                        else f"from {self.low:g} to {self.high:g}")
            else:
                what = f"above {self.low:g}" if self.low_open else f"of {self.low:g} or more"
            hint = f" ({self.hint})" if self.hint else ""
            raise argparse.ArgumentTypeError(f"expected a finite number {what}, got {_shown(text)}{hint}")
        return value

    def __repr__(self) -> str:
        return f"Real({self.low}, {self.high})"


# The one vocabulary of the command line's numbers (tests/test_cli_contract.py walks every option of this type).
positive = Count(1)  # a count: items, texts, tokens, rows to print
index = Count(0, why="no model has that many")  # a layer, head or token number, checked against the model later
batch_size = Count(1, 1024, "a batch's activations must fit in memory")
threads = Count(1, 1024, "more threads than any machine has CPUs")
workers = Count(1, 1024, "more Ray workers than a cluster has CPUs")
projections = Count(1, 1024, "every item holds that many copies in memory at once")
draws = Count(1, 1000, "the random draws are held in memory at once")
seed = Count(0, 2**64 - 1, "torch's generator takes seeds below 2^64")
top_k = Count(0, zero="off")
temperature = Real(1e-3, low_open=False, hint="below that the logits overflow; leave out --sample for greedy decoding")
top_p = Real(0, 1, hint="1 keeps every token")
gpus = Real(0, 1024, low_open=False)


def text_arg(text: str) -> str:
    """argparse type of every text typed on the command line (``--text``, ``--pair``, ``--prompt``, ``--other``,
    ``--corrupt``, a word): bytes that are not UTF-8 (a Latin-1 terminal's 'café') reach Python as lone surrogates
    ('caf\\udce9'), which no tokenizer takes; they are refused here, saying where the first one is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        what = f"byte 0x{code - 0xDC00:02X}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}, a lone surrogate"
        raise argparse.ArgumentTypeError(
            f"the text is not UTF-8 at character {exc.start + 1} ({what}): set your terminal to UTF-8 and type it "
            'again, or save the text in a UTF-8 file and pass "$(cat FILE)"') from None
    return text


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def head_list(text: str) -> list[Head]:
    """argparse type of a head list (``--heads 1.2,5.4``): :func:`probes.head_index.read_heads` (numbers only: the
    ranges are checked once the model is loaded, :func:`probes.head_index.check_heads`), a head named twice noted on
    stderr, a malformed list refused as argparse refuses (``argument --heads: ...``)."""
    try:
        return read_heads(text, notify=_note)
    except BadOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def head_list_or_all(text: str) -> list[Head] | None:
    """argparse type: ``all`` (None) or a :func:`head_list` (:func:`probes.head_index.read_heads_or_all`)."""
    try:
        return read_heads_or_all(text, notify=_note)
    except BadOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def print_top(frame, top: int) -> None:
    """The ``top`` best heads of each label (per model, for several), as a table on stdout."""
    import pandas as pd

    from ..heads.engine import top_heads

    if "model" in frame:
        best = pd.concat([top_heads(part, top) for _, part in frame.groupby("model", sort=False)], ignore_index=True)
    else:
        best = top_heads(frame, top)
    cols = [c for c in ("model", "probe", "label", "layer", "head", "score", "baseline", "n", "offset", "verdict")
            if c in best.columns]
    with pd.option_context("display.max_rows", 500, "display.width", 160, "display.float_format", "{:.3f}".format):
        print(best[cols].to_string(index=False))
    if "chosen" in frame:
        print_verdicts(frame)


def print_verdicts(frame) -> None:
    """Each label's head chosen on one half of the items and judged on the other (:mod:`probes.evidence.probes`):
    its scores on both halves, the held-out interval, the baseline on the held-out half and the verdict."""
    from ..evidence.probes import verdicts

    chosen = verdicts(frame)
    if chosen.empty:
        return
    seed = int(chosen["split_seed"].iloc[0])
    print(f"\nheld out (split seed {seed}): each label's head chosen on one half of the items, judged on the other")
    width = max(len(str(x)) for x in chosen["label"])
    for row in chosen.itertuples():
        model = f"{row.model}  " if "model" in chosen and chosen["model"].nunique() > 1 else ""
        head = f"{int(row.layer)}.{int(row.head)}"
        held = (f"{row.heldout_score:.3f} [{row.heldout_low:.3f}–{row.heldout_high:.3f}]"
                if row.heldout_low == row.heldout_low else "—")
        base = f"{row.baseline_heldout:.3f}" if row.baseline_heldout == row.baseline_heldout else "—"
        print(f"  {model}{str(row.label):<{width}}  {head:>6}  chosen on {row.selection_score:.3f}  held out {held} "
              f"(n {int(row.heldout_n)})  baseline {base}  {row.verdict}")
