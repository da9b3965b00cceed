"""Command line.

``python -m probes parity --model MODEL --text TEXT [--pair TEXT_B] [--dtype float64] [--json]``: exit 0 every
figure within tolerance, 1 a mismatch, 2 bad input or an unsupported model (one line on stderr).

``python -m probes profile --model MODEL --probe PROBE|all --data DATA --limit N --out FILE``: score
every layer × head; exit 2 on bad input or a bad data file (one line naming the file and line).

``python -m probes profile --corpus FILE --model M1,M2 --out FILE [--ray [ADDRESS] --workers N]``: label-free
statistics of every head over a corpus, and each head's top examples, on this process or on Ray.

``python -m probes generate --model MODEL --prompt TEXT --max-new-tokens N [--json]``: write text with the
from-scratch KV cache and prove it against one full forward pass; exit 0 proven, 1 a mismatch, 2 bad input.

``python -m probes ablate --model M --text T --heads 1.2,5.4 --how zero|mean|patch [--other T2] [--json]``: what
ablating heads changes. ``python -m probes importance --model M --data DATA --limit N --out FILE``: head importance
over a dataset (gradient and exact ablation), checkpointed like ``profile``.
"""

from __future__ import annotations

import argparse
import os
import sys

from .errors import ProbesError
from .families import coverage
from .models import KNOWN_HUB_MODELS, OFFLINE_DEFAULT
from .scratch.attention import BACKENDS
from .scratch.generate import GENERATE_BACKENDS


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
    report = parity.check(model, args.text, args.pair, truncate=args.truncate, backend=args.backend,
                          dtype=args.dtype)
    if args.json:
        print(report.to_json())
    else:
        print(report.to_text())
    return 0 if report.passed else 1


def cmd_profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .errors import BadOption

    if args.corpus:
        return cmd_corpus(args)
    if args.probe is None:
        raise BadOption("say what to score: --probe PROBE|all (built-in or --data), or --corpus FILE")
    for flag, given in (("--ray", args.ray), ("--examples", args.examples), ("--field", args.field)):
        if given:
            raise BadOption(f"{flag} goes with --corpus FILE (the corpus statistics); the probes run on one process")
    if "," in args.model:
        raise BadOption("several models in one run go with --corpus; run --probe once per model")

    from tqdm import tqdm

    from .heads.profile import check_out, profile
    from .heads.registry import for_data
    from .models import load

    check_out(Path(args.out), args.force)  # before anything heavy: a bad --out is one line, at once
    from .threads import apply

    threads = apply("profile", args.threads)  # the CPUs other work leaves free, not every core
    _quiet_transformers()
    model = load(args.model, allow_local_paths=not args.hub_only, device=args.device)
    # "all": every probe, or with --data the probes whose records say they read it
    probes = [p.name for p in for_data(args.data)] if args.probe == "all" else [args.probe]
    frame = profile(model, probes, args.data, args.limit, Path(args.out), batch_size=args.batch_size,
                    checkpoint_every=args.checkpoint_every, backend=args.backend,
                    notify=lambda message: print(f"note: {message}", file=sys.stderr), strict=args.strict,
                    progress_factory=lambda total, name: tqdm(total=total, desc=name, unit="item", file=sys.stderr))
    _print_top(frame, args.top)
    print(f"wrote {len(frame)} rows to {args.out} ({threads.describe()})", file=sys.stderr)
    return 0


def cmd_corpus(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tqdm import tqdm

    from .corpus.reader import Corpus
    from .corpus.run import examples_path, in_process, profile_corpus
    from .errors import BadOption
    from .heads.profile import check_out
    from .models import load

    if args.probe is not None:
        raise BadOption("--corpus profiles the label-free statistics (entropy, distance, first/previous/self, "
                        "special, punctuation, fixed offset): leave out --probe")
    out = Path(args.out)
    examples = Path(args.examples) if args.examples else examples_path(out)
    check_out(out, args.force)  # before anything heavy: bad paths are one line, at once
    if examples.suffix.lower() != ".parquet":
        raise BadOption(f"--examples {examples}: the top examples are written as .parquet")
    if examples.exists() and not args.force:
        raise BadOption(f"--examples {examples} exists: pass --force to replace it, or choose another file")
    corpus = Corpus(args.corpus, args.field or "text")
    names = [n.strip() for n in args.model.split(",") if n.strip()]
    if not names:
        raise BadOption("--model is empty: give one model, or several separated by commas")
    if len(set(names)) < len(names):
        raise BadOption(f"--model {args.model}: a model is named twice")
    _quiet_transformers()
    executor, started, threads = in_process, False, None
    if args.ray:
        try:
            from .corpus import ray_pool
        except ImportError:
            raise BadOption("--ray needs Ray: pip install -c constraints.txt -e '.[ray]' (README, Install)") from None
        started = ray_pool.start(None if args.ray == "local" else args.ray)
        import ray

        cpus = int(ray.cluster_resources().get("CPU", 1))
        workers = args.workers or max(1, cpus // args.cpus_per_worker)
        pool_stats: dict = {}
        executor = ray_pool.executor(workers, args.cpus_per_worker, args.gpus_per_worker,
                                     allow_local_paths=not args.hub_only, stats=pool_stats)
        where = f"Ray at {args.ray}" if args.ray != "local" else "a local Ray"
        print(f"running on {where}: {workers} worker(s), {args.cpus_per_worker} CPU(s)"
              + (f" and {args.gpus_per_worker} GPU(s)" if args.gpus_per_worker else "") + " each", file=sys.stderr)
    else:
        from .threads import apply

        threads = apply("profile", args.threads)
    try:
        models = [load(n, allow_local_paths=not args.hub_only, device=args.device) for n in names]
        table, found = profile_corpus(
            models, corpus, out, examples, window=args.window, chunk_size=args.checkpoint_every, k=args.top_k,
            batch_size=args.batch_size, backend=args.backend, executor=executor, strict=args.strict,
            notify=lambda message: print(f"note: {message}", file=sys.stderr),
            progress_factory=lambda total, name: tqdm(total=total, desc=name, unit="chunk", file=sys.stderr))
    finally:
        if started:
            import ray

            ray.shutdown()
    _print_top(table, args.top)
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


def _print_top(frame, top: int) -> None:
    import pandas as pd

    from .heads.engine import top_heads

    if "model" in frame:
        best = pd.concat([top_heads(part, top) for _, part in frame.groupby("model", sort=False)], ignore_index=True)
    else:
        best = top_heads(frame, top)
    cols = [c for c in ("model", "probe", "label", "layer", "head", "score", "baseline", "n", "offset")
            if c in best.columns]
    with pd.option_context("display.max_rows", 500, "display.width", 160, "display.float_format", "{:.3f}".format):
        print(best[cols].to_string(index=False))


def cmd_generate(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from .errors import BadOption
    from .models import load
    from .scratch import generate as g

    _quiet_transformers()
    if not args.prompt.strip():  # before loading a model: one line, at once
        raise BadOption("the prompt is empty: give the start of a text for the model to continue (--prompt)")
    model = load(args.model, allow_local_paths=not args.hub_only, device=args.device)
    g.decoder(model)
    layer = args.layer if args.layer is not None else model.n_layers - 1
    for name, value, n in (("layer", layer, model.n_layers), ("head", args.head, model.n_heads)):
        if not 0 <= value < n:
            raise BadOption(f"--{name} {value} does not exist in {model.name} (0–{n - 1})")
    sampling = g.Sampling(args.sample, args.seed, args.temperature, args.top_k, args.top_p)
    gen = g.generate(model, args.prompt, args.max_new_tokens, sampling, stop_at_eos=not args.no_eos,
                     backend=args.backend)
    if gen.note:
        print(f"note: {gen.note}", file=sys.stderr)
    proof = g.prove(model, gen, "hf")
    hf_ids = None if sampling.sample else g.hf_generate(model, args.prompt, gen.n_steps)
    same = None if hf_ids is None else hf_ids == gen.new_ids
    steps = [dict(step=s, query=gen.tokens[gen.query_position(s)].text, wrote=gen.tokens[gen.query_position(s) + 1].text,
                  top=[dict(position=p, token=t, weight=round(w, 4)) for p, t, w in gen.top_keys(s, layer, args.head)],
                  cache_bytes=gen.cache_bytes[s], attention_max_abs_diff=proof.per_step[s])
             for s in range(gen.n_steps)]
    text = model.tokenizer.decode(gen.new_ids)
    if args.json:
        print(json.dumps(dict(model=model.name, prompt=args.prompt, text=text, new_tokens=[t.text for t in
                         gen.tokens[gen.prompt_length:]], new_ids=gen.new_ids, sampling=sampling.describe(),
                         stopped=gen.stopped, backend=gen.backend, layer=layer, head=args.head, steps=steps,
                         cache_bytes=gen.cache_bytes[-1], cache_bytes_without_grouped_query=gen.cache_bytes_mha[-1],
                         proof={k: v for k, v in asdict(proof).items() if k != "per_step"},
                         hf_generate_same_tokens=same), ensure_ascii=False))
    else:
        print(f"{model.name}, {sampling.describe()}, {gen.n_steps} new tokens (stopped: {gen.stopped})")
        print(f"{args.prompt}[{text}]")
        print(f"\nper step: the fed token's top 3 keys in layer {layer}, head {args.head}")
        for row in steps:
            top = ", ".join(f"{t['position']}:{t['token']!r} {t['weight']:.2f}" for t in row["top"])
            print(f"{row['step']:>4}  {row['query']!r:>14} -> {row['wrote']!r:<14} {top:<60} "
                  f"cache {row['cache_bytes'] / 2**10:,.0f} KiB  |Δ| {row['attention_max_abs_diff']:.1e}")
        print(f"\nKV cache: {gen.cache_bytes[-1]:,} bytes ({model.n_kv_heads} key/value heads; "
              f"{gen.cache_bytes_mha[-1]:,} with one per query head)")
        print(f"proof: {proof.to_text()}")
        if same is not None:
            print("Hugging Face generate: " + ("the same tokens" if same else f"DIFFERENT tokens {hf_ids}"))
    return 0 if proof.passed and same is not False else 1


def positive(text: str) -> int:
    """argparse type: a whole number of 1 or more (0 and negative counts are mistakes, not "all")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m probes", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "parity",
        help="run Hugging Face and our from-scratch forward pass on a text and compare their attention",
        description="Compare Hugging Face (eager, fp32) with the from-scratch forward pass on every layer and "
        f"head ({coverage()}). Models: {OFFLINE_DEFAULT!r} (offline default, all-MiniLM-L6-v2), a hub id such as "
        f"{', '.join(KNOWN_HUB_MODELS)}, or a local model directory.",
    )
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=f"short name, hub id or local directory "
                   f"(default: {OFFLINE_DEFAULT})")
    p.add_argument("--text", required=True, help="the text to run")
    p.add_argument("--pair", default=None, help="a second sentence (BERT sentence pairs)")
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
    p.set_defaults(func=cmd_parity)

    from .heads.registry import BUILTIN, probes

    p = sub.add_parser("profile", help=f"score every layer × head for {', '.join(probes())} heads over a dataset",
                       description="Score every layer × head of a model with one probe or all of them: "
                       + "; ".join(f"{name}: {probe.about}" for name, probe in probes().items()) + ".")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=f"short name, hub id or local directory "
                   f"(default: {OFFLINE_DEFAULT})")
    p.add_argument("--probe", choices=(*probes(), "all"),
                   help="one probe, or all (with --data: the probes that read that data); not with --corpus")
    defaults = ", ".join(f"{name} {probe.default_data}" for name, probe in probes().items() if probe.default_data)
    p.add_argument("--data", help=f"{', '.join(BUILTIN)}, or a .conllu, .jsonl ({{text, pronoun, antecedent}}) or "
                   f".txt (one sentence a line) file (default: each probe's own: {defaults})")
    p.add_argument("--limit", type=positive, help="use only the first N items")
    p.add_argument("--out", required=True, help="result table: .csv, .json or .parquet")
    p.add_argument("--batch-size", type=positive, default=16)
    p.add_argument("--checkpoint-every", type=positive, default=64,
                   help="items (with --corpus: texts) per checkpoint and per Ray task (a rerun resumes)")
    p.add_argument("--backend", choices=tuple(BACKENDS), default="eager")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=positive, help="torch's CPU threads (default: $PROBES_THREADS, else the CPUs "
                   "other work leaves free; see probes/threads.py)")
    p.add_argument("--top", type=positive, default=3, help="heads to print per label")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.add_argument("--strict", action="store_true",
                   help="stop (exit 2, listing them all) on any bad item of the data, instead of skipping it")
    p.add_argument("--hub-only", action="store_true", help="refuse local paths")
    c = p.add_argument_group("corpus", "label-free statistics of every head over your own texts, with each head's "
                             "top examples (instead of --probe); --model may name several models, comma-separated")
    c.add_argument("--corpus", help="a .txt (one text a line), .jsonl or .parquet file, read as a stream")
    c.add_argument("--field", help="the text field (JSONL) or column (Parquet); default: text")
    c.add_argument("--window", type=positive, default=128, help="tokens per window, special tokens included; a "
                   "longer text is cut into consecutive windows (default: 128)")
    c.add_argument("--top-k", type=positive, default=10, help="top examples kept per head (default: 10)")
    c.add_argument("--examples", help="where the top examples go (.parquet; default: OUT's name + .examples.parquet)")
    c.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run the chunks on Ray: alone, a local Ray on this machine; with an address "
                   "(ray://host:10001, or auto), that cluster")
    c.add_argument("--workers", type=positive, help="Ray workers (default: the cluster's CPUs / --cpus-per-worker)")
    c.add_argument("--cpus-per-worker", type=positive, default=1, help="CPUs (torch threads) per Ray worker")
    c.add_argument("--gpus-per-worker", type=float, default=0, help="GPUs per Ray worker (GPU clusters)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("generate", help="write text with the from-scratch KV cache and prove its attention equals "
                       "a full forward pass", description="Write text one token at a time with our KV cache (prefill "
                       "the prompt, then one token per step), show where a head looks at each step and what the "
                       "cache holds, and prove every step's attention row and logits equal one full forward pass "
                       "(and, greedy, that Hugging Face's generate writes the same tokens). Decoders only.")
    p.add_argument("--model", default="smollm2", help="a decoder: short name, hub id or local directory "
                   "(default: smollm2)")
    p.add_argument("--prompt", required=True, help="the start of the text")
    p.add_argument("--max-new-tokens", type=positive, default=20)
    p.add_argument("--layer", type=int, help="layer whose head is shown per step (default: the last)")
    p.add_argument("--head", type=int, default=0)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy (seeded)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="sample within the smallest set reaching this mass")
    p.add_argument("--no-eos", action="store_true", help="keep writing past the end-of-text token")
    p.add_argument("--backend", choices=GENERATE_BACKENDS, default="eager",
                   help="attention of each step: eager (the formula) or flash (our Triton kernel; needs CUDA, "
                   "else eager runs and a note says so)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--device", default="auto")
    p.add_argument("--hub-only", action="store_true", help="refuse local paths")
    p.set_defaults(func=cmd_generate)

    from .effects.cli import add_parsers

    add_parsers(sub, dict(default=OFFLINE_DEFAULT, help=f"short name, hub id or local directory (default: "
                          f"{OFFLINE_DEFAULT})"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ProbesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resume = " to resume" if args.command in ("profile", "importance") else ""
        print(f"\ninterrupted: rerun the same command{resume}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
