"""``python -m probes profile``: every layer × head scored by the probes over a dataset, or the label-free
statistics of a corpus (``--corpus``), on this process or on Ray."""

from __future__ import annotations

import argparse
import sys

from ..models import OFFLINE_DEFAULT
from ..scratch import BACKENDS
from .common import (
    MODEL_HELP,
    batch_size,
    gpus,
    load_model,
    loading_options,
    positive,
    print_top,
    quiet_transformers,
    ray_option,
    seed,
    threads,
    threads_option,
    workers,
)


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..errors import BadOption

    if args.corpus:
        return main_corpus(args)
    if args.probe is None:
        raise BadOption("say what to score: --probe PROBE|all (built-in or --data), or --corpus FILE")
    for flag, given in (("--examples", args.examples), ("--field", args.field)):
        if given:
            raise BadOption(f"{flag} goes with --corpus FILE (the corpus statistics); leave it out with --probe")
    if "," in args.model:
        raise BadOption("several models in one run go with --corpus; run --probe once per model")

    from tqdm import tqdm

    from ..evidence.probes import profile
    from ..heads.registry import for_data
    from ..jobs import check_out

    check_out(args.out, args.force, {"--data": args.data},  # before anything heavy: one line, at once
              notify=lambda message: print(f"note: {message}", file=sys.stderr))
    notify = lambda message: print(f"note: {message}", file=sys.stderr)  # noqa: E731
    executor, started, threads = None, False, None
    pool_stats: dict = {}
    if on_ray_asked(args):
        quiet_transformers()  # before Ray starts: a local Ray's workers inherit this environment
        executor, started = on_ray(args, pool_stats, notify)
    else:
        threads = args.threads_chosen  # the CPUs other work leaves free, not every core (chosen by probes.cli.main)
    try:
        model = load_model(args)
        # "all": every probe, or with --data the probes whose records say they read it
        probes = [p.name for p in for_data(args.data)] if args.probe == "all" else [args.probe]
        frame = profile(model, probes, args.data, args.limit, Path(args.out), seed=args.seed,
                        batch_size=args.batch_size,
                        checkpoint_every=args.checkpoint_every, backend=args.backend, notify=notify, strict=args.strict,
                        executor=executor,
                        progress_factory=lambda total, name: tqdm(total=total, desc=name, unit="item", file=sys.stderr))
    finally:
        off_ray(executor, started)
    print_top(frame, args.top)
    where = threads.describe() if threads else "on Ray: " + ray_summary(pool_stats)
    print(f"wrote {len(frame)} rows to {args.out} ({where})", file=sys.stderr)
    return 0


# what a refusal of --ray offers here besides a working address (probes.cluster.check_address)
INSTEAD = "give --local-ray to start a Ray of this machine for this run, or leave --ray out to run on this process"


def on_ray_asked(args: argparse.Namespace) -> bool:
    """Whether the chunks run on Ray: ``--ray [ADDRESS]`` (a cluster) or ``--local-ray`` (a Ray of this machine).
    ``--ray local`` (no address: what a bare ``--ray`` meant here before it meant the joined cluster, as on every
    other command) is refused, naming the flag that says it."""
    from ..errors import BadOption

    if args.ray == "local":
        raise BadOption("--ray local: --ray takes a Ray head's address, or nothing for the cluster this machine has "
                        "joined; to start a Ray of this machine for this run, give --local-ray")
    return bool(args.ray or args.local_ray)


def on_ray(args: argparse.Namespace, pool_stats: dict, notify) -> tuple:
    """``--ray [ADDRESS]`` (that cluster joined) or ``--local-ray`` (a Ray started here): an executor on a pool of
    its workers, which fills ``pool_stats`` and tells ``notify`` of chunks that ran again; and whether this run
    started Ray (and so shuts it down)."""
    from ..errors import BadOption

    flag = "--local-ray" if args.local_ray else "--ray"
    try:
        from .. import cluster
        from ..corpus import ray_pool
    except ImportError:
        raise BadOption(f"{flag} needs Ray: pip install -c constraints.txt -e '.[ray]' (docs/quickstart.md)") from None
    started = cluster.start(None if args.local_ray else args.ray, instead=INSTEAD)
    cpus = int(cluster.resources().get("CPU", 1))
    workers = args.workers or max(1, cpus // args.cpus_per_worker)
    executor = ray_pool.executor(workers, args.cpus_per_worker, args.gpus_per_worker,
                                 allow_local_paths=not args.hub_only, stats=pool_stats, notify=notify)
    where = "a local Ray" if args.local_ray else f"Ray at {args.ray}"
    print(f"running on {where}: {workers} worker(s), {args.cpus_per_worker} CPU(s)"
          + (f" and {args.gpus_per_worker} GPU(s)" if args.gpus_per_worker else "") + " each", file=sys.stderr)
    return executor, started


def off_ray(executor, started: bool) -> None:
    """The end of a run: the executor's Ray workers stopped (a cluster this run joined has their CPUs back at once;
    the one-process executor has none), and the local Ray stopped if this run started it."""
    close = getattr(executor, "close", None)
    if close is not None:
        close()
    if started:
        from .. import cluster

        cluster.shutdown()


def main_corpus(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from ..corpus.reader import Corpus, is_uri
    from ..corpus.run import examples_path, in_process, profile_corpus
    from ..errors import BadOption
    from ..jobs import check_out

    if args.probe is not None:
        raise BadOption("--corpus profiles the label-free statistics (entropy, distance, sink/previous/self, "
                        "special, punctuation, fixed offset): leave out --probe")
    out = Path(args.out)
    # --out "" (or a folder: ".", "/") has no name to extend: its refusal comes from check_out
    given = args.examples if args.examples is not None else str(examples_path(out)) if out.name else None

    def parquet(path: Path) -> None:
        if path.suffix.lower() != ".parquet":
            raise BadOption(f"--examples {path}: the top examples are written as .parquet")

    # every output at once, before anything heavy: bad paths are one line, at once, and both files are this run's
    check_out(args.out, args.force, {"--corpus": args.corpus}, also={"--examples": given},
              formats={"--examples": parquet}, notify=lambda message: print(f"note: {message}", file=sys.stderr))
    if given is None:  # (check_out refuses an --out with no name, the one way to get here without --examples)
        raise BadOption(f"--out {args.out}: give a file name")
    examples = Path(given)
    ray = on_ray_asked(args)
    if is_uri(args.corpus) and not ray:
        raise BadOption(f"--corpus {args.corpus}: a URI corpus is read by Ray Data: add --ray [ADDRESS] (a Ray "
                        "cluster) or --local-ray (a Ray of this machine), or give a local path")
    # on Ray the chunks carry their texts (read here, or by Ray Data from a URI): no worker opens the corpus
    if ray:
        from ..corpus.ray_data import DatasetCorpus

        dataset = DatasetCorpus(args.corpus, args.field or "text")
        dataset.check()  # a store that cannot be read: one line, before Ray starts and the models load
        corpus: Corpus = dataset
    else:
        corpus = Corpus(args.corpus, args.field or "text")
    names = [n.strip() for n in args.model.split(",") if n.strip()]
    if not names:
        raise BadOption("--model is empty: give one model, or several separated by commas")
    if len(set(names)) < len(names):
        raise BadOption(f"--model {args.model}: a model is named twice")
    quiet_transformers()  # before Ray starts: a local Ray's workers inherit this environment
    executor, started, threads = in_process, False, None
    pool_stats: dict = {}
    if ray:
        executor, started = on_ray(args, pool_stats, lambda message: print(f"note: {message}", file=sys.stderr))
    else:
        threads = args.threads_chosen
    try:
        models = [load_model(args, n) for n in names]
        table, found = profile_corpus(
            models, corpus, out, examples, window=args.window, chunk_size=args.checkpoint_every, k=args.top_k,
            batch_size=args.batch_size, backend=args.backend, executor=executor, strict=args.strict,
            notify=lambda message: print(f"note: {message}", file=sys.stderr),
            progress_factory=lambda total, name: tqdm(total=total, desc=name, unit="chunk", file=sys.stderr))
    finally:
        off_ray(executor, started)
    print_top(table, args.top)
    where = threads.describe() if threads else "on Ray: " + ray_summary(pool_stats)
    print(f"wrote {len(table)} rows to {out} and {len(found)} top examples to {examples} ({where})", file=sys.stderr)
    return 0


def ray_summary(stats: dict) -> str:
    """One line on what the Ray workers did: how many, their start-up, busy seconds and peak memory."""
    if not stats.get("peak_bytes"):
        return "every chunk was done already"
    pids = list(stats["peak_bytes"])
    return (f"{len(pids)} worker process(es), start-up {max(stats['load_seconds'].values()):.1f} s, busy "
            f"{sum(stats['busy_seconds'].values()):.1f} s in all, peak memory "
            f"{max(stats['peak_bytes'].values()) / 2**20:,.0f} MiB per worker")


def add_parser(sub) -> None:
    from ..datasets.catalog import BUILTIN
    from ..heads.registry import probes

    p = sub.add_parser("profile", help=f"score every layer × head for {', '.join(probes())} heads over a dataset",
                       description="Score every layer × head of a model with one probe or all of them: "
                       + "; ".join(f"{name}: {probe.about}" for name, probe in probes().items()) + ".")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--probe", choices=(*probes(), "all"),
                   help="one probe, or all (with --data: the probes that read that data); not with --corpus")
    defaults = ", ".join(f"{name} {probe.default_data}" for name, probe in probes().items() if probe.default_data)
    p.add_argument("--data", help=f"{', '.join(BUILTIN)}, or a .conllu, .jsonl ({{text, pronoun, antecedent}}) or "
                   f".txt (one sentence a line) file (default: each probe's own: {defaults})")
    p.add_argument("--limit", type=positive, help="use only the first N items")
    p.add_argument("--out", required=True, help="result table: .csv, .json or .parquet")
    p.add_argument("--batch-size", type=batch_size, default=16)
    p.add_argument("--checkpoint-every", type=positive, default=64,
                   help="items (with --corpus: texts) per checkpoint and per Ray task (a rerun resumes)")
    p.add_argument("--backend", choices=tuple(BACKENDS), default="eager")
    loading_options(p, served=False)  # --ray here is the cluster the chunks run on (below)
    threads_option(p, "profile", reports=True)  # on its last line, beside "wrote"
    p.add_argument("--top", type=positive, default=3, help="heads to print per label")
    p.add_argument("--seed", type=seed, default=0,
                   help="the seed of the split: each label's head is chosen on one half of the items and judged on "
                   "the other (default 0; recorded in the table's split_seed column)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--strict", action="store_true",
                   help="stop (exit 2, listing them all) on any bad item of the data, instead of skipping it")
    c = p.add_argument_group("corpus", "label-free statistics of every head over your own texts, with each head's "
                             "top examples (instead of --probe); --model may name several models, comma-separated")
    c.add_argument("--corpus", help="a .txt (one text a line), .jsonl or .parquet file, read as a stream")
    c.add_argument("--field", help="the text field (JSONL) or column (Parquet); default: text")
    c.add_argument("--window", type=positive, default=128, help="tokens per window, special tokens included; a "
                   "longer text is cut into consecutive windows (default: 128)")
    c.add_argument("--top-k", type=positive, default=10, help="top examples kept per head (default: 10)")
    c.add_argument("--examples", help="where the top examples go (.parquet; default: OUT's name + .examples.parquet)")
    on = c.add_mutually_exclusive_group()
    ray_option(on, "run the chunks (of --corpus or --probe) on this Ray cluster (ray:// is refused: Ray Data does not "
               "run through Ray Client)")
    on.add_argument("--local-ray", action="store_true",
                    help="run the chunks (of --corpus or --probe) on a Ray started on this machine for this run (its "
                    "CPUs; stopped at the end)")
    c.add_argument("--workers", type=workers, help="Ray workers (default: the cluster's CPUs / --cpus-per-worker)")
    c.add_argument("--cpus-per-worker", type=threads, default=1, help="CPUs (torch threads) per Ray worker")
    c.add_argument("--gpus-per-worker", type=gpus, default=0, help="GPUs per Ray worker (GPU clusters)")
    p.set_defaults(func=main)
