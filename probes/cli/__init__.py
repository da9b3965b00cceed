"""The attention workbench's command line: parity, profile, generate, kv, ablate, importance, why, compose and patch.

One module per command group (``parity.py``, ``profile.py``, ``generate.py``, ``effects.py``), each with its
``add_parser(sub)``, which sets the command's entry: ``main(args)``, the exit code (a module of two commands names
each: ``effects.main_ablate``, ``effects.main_importance``); what they share is in ``common.py``.

Every command that computes here takes ``--threads N`` and says the kind of its work (``common.threads_option``:
``batch``, whole passes; ``stream``, a token at a time), from which :func:`main` sets torch's threads before it runs
(:mod:`probes.threads`; ``PROBES_THREADS`` and ``OMP_NUM_THREADS`` as there) and prints the choice on stderr after.

``python -m probes parity --model MODEL --text TEXT [--pair TEXT_B] [--dtype float64] [--json]``: exit 0 every
figure within tolerance, 1 a mismatch, 2 bad input or an unsupported model (one line on stderr).

``python -m probes profile --model MODEL --probe PROBE|all --data DATA --limit N --out FILE``: score
every layer × head; exit 2 on bad input or a bad data file (one line naming the file and line).

``python -m probes profile --corpus FILE --model M1,M2 --out FILE [--ray [ADDRESS] | --local-ray] [--workers N]``:
label-free statistics of every head over a corpus, and each head's top examples, on this process or on Ray.

``python -m probes generate --model MODEL --prompt TEXT --max-new-tokens N [--json]``: write text with the
from-scratch KV cache and prove it against one full forward pass; exit 0 proven, 1 a mismatch, 2 bad input.

``python -m probes kv --model MODEL (--text T | --text-file F | --ewt N) --policies full,window:256,h2o:256,...
[--method layers|stream] [--per-head [--top K]] [--json]``: perplexity through a KV cache that evicts as each policy
says, a layer at a time (``layers``, the default) or token by token (``stream``: the same numbers, slower), the bytes
it held, and (``--per-head``) each key/value head cut alone; exit 2 on bad input.

``python -m probes ablate --model M --text T --heads 1.2,5.4 --how zero|mean|patch [--other T2] [--truncate] [--json]``:
what ablating heads changes. ``python -m probes importance --model M --data DATA --limit N --out FILE``: head importance
over a dataset (gradient and exact ablation), checkpointed like ``profile``.

``python -m probes why --model M --text T --layer L --head H --query WORD|N --key WORD|N [--csv FILE] [--force]
[--json]``: one attention score split into what wrote its query and its key; exit 2 on bad input.

``python -m probes claim --model M (--text T --query W --key W --against W | --data FILE.jsonl) [--head L.H]
[--controls N] [--seed S] [--json]``: which head finds what a word refers to, chosen on half the items and judged on the
other half against the most recent candidate, the first-mentioned one and chance; exit 2 on bad input.

``python -m probes compose --model M --receiver L.H [--kind q|k|v|all] [--top N] [--json]``: the earlier heads
head L.H composes with most (Q-, K-, V-composition scores from the weights, beside a random baseline); exit 2 on a
bad receiver.

``python -m probes patch --model M --text CLEAN --corrupt CORRUPTED --receiver L.H --into q|k|v [--senders all|L.H,...]
[--json]``: path patching, each sender's output on the corrupted text into only the receiver's q, k or v; senders
ranked by the change in loss (or the receiver's pattern shift, for an encoder); exit 2 on bad input.

``python -m probes serve --model M [--ray [ADDRESS]] [--gpus-per-replica N] [--detach | --stop]``: hold a model on a
Ray cluster for the app (PROBES_RAY_ADDRESS) and the library (``probes.load(M, ray=ADDRESS)``); exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys

from .. import memory
from ..errors import InputTooLong, ProbesError
from . import claim, compose, effects, generate, kv, parity, path_patching, profile, serve, why
from .common import apply_threads, steadies

# each adds its subcommand(s): add_parser(sub)
COMMANDS = (parity, profile, generate, kv, effects, why, claim, compose, path_patching, serve)


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake on the command line is one line on stderr and exit 2, like every other bad input
    (its subcommands' parsers are of this class too)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m probes", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if steadies(args):  # large tensors' memory goes back to the system when freed (probes.memory)
            memory.steady()
        chosen = apply_threads(args)  # torch's threads for the command's kind of work (probes.threads)
        code = args.func(args)
        if chosen is not None and code == 0 and not args.threads_reported:
            print(chosen.describe(), file=sys.stderr)
        return code
    except ProbesError as exc:
        if isinstance(exc, InputTooLong) and not exc.custom_advice and "truncate" not in args:
            exc = InputTooLong(exc.n_tokens, exc.max_tokens, exc.model, "shorten it")  # no --truncate to advise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resume = " to resume" if args.command in ("profile", "importance") else ""
        print(f"\ninterrupted: rerun the same command{resume}", file=sys.stderr)
        return 130
    finally:
        if "probes.jobs" in sys.modules:  # the --out files this command claimed (probes.jobs.check_out) are free
            sys.modules["probes.jobs"].release()
