"""Corpus profiles on one process and on a local Ray, side by side in one run.

1. ``python -m probes profile --corpus`` end to end, as a user runs it (a fresh process each: imports, model
   load, and for ``--local-ray`` starting a local Ray and its workers), on minilm over the first 2,000 UD
   English-EWT dev sentences (one text a line, window 128): one process (torch threads as ``profile``
   chooses them), ``--local-ray --workers 1 --cpus-per-worker 2`` and ``--local-ray --workers 2``. Goals: Ray's
   overhead at 1 worker ≤ 15 %, 2 workers ≥ 1.6× the single process. Each Ray run's own line says what its
   workers did (start-up, busy seconds, peak memory), so the fixed cost and the throughput are seen apart.
2. Windows per second for minilm and smollm2 at window 128 and 512 (texts of about 600 tokens: consecutive
   EWT sentences joined), on one Ray worker with 2 CPUs: its busy seconds (the chunks, not its start-up),
   and its peak memory (ru_maxrss).
3. Bytes per head of the top-examples store (the Parquet file / layers × heads), k = 10.
4. Where the 1-worker Ray run's time goes against one process (:func:`breakdown`): outside the work (``ray.init``
   and the rest), the worker's start-up, its chunks, the rest of the pipeline; the CPU seconds Ray's own
   processes take meanwhile (:class:`CpuSampler`), the pickled bytes, and a worker's threads.

    .venv/bin/python benchmarks/corpus_ray.py [--texts 2000] [--rounds 2] [--out benchmarks/results]

Part 1's three runs take turns round by round; its table gives each round's ratio against one process.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from report import RESULTS, alternate, out_folder, publish, ratios, summary  # noqa: E402  (benchmarks/)


def ewt(n: int) -> list[str]:
    from probes.heads.registry import get

    probe = get("positional")
    texts = probe.texts(probe.items("ewt-dev", None))
    if len(texts) < n:
        texts += probe.texts(probe.items("ewt-train", n - len(texts)))
    return texts[:n]


def documents(sentences: list[str], words: int = 450) -> list[str]:
    """Consecutive sentences joined until each text has about ``words`` words (~600 tokens)."""
    out, current = [], []
    for s in sentences:
        current.append(s)
        if sum(len(c.split()) for c in current) >= words:
            out.append(" ".join(current))
            current = []
    return out


import pandas as pd  # noqa: E402


class CpuSampler:
    """CPU seconds (user + system) of this process and of every process under it (a local Ray's raylet, GCS,
    log monitor, idle workers, actors), sampled every ``every`` seconds so that a process that exits (the actor
    at the end of the pipeline) keeps what it used; by kind (Ray's process title, or the program's name)."""

    def __init__(self, every: float = 0.25):
        import threading

        self.every, self.stop = every, threading.Event()
        self.seen: dict[int, float] = {}  # pid -> CPU seconds (user + system) at its last sample
        self.kinds: dict[int, str] = {}  # pid -> what it is (its Ray title, or its program's name)
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self):
        import psutil

        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                title = proc.cmdline()[0] if proc.cmdline() else proc.name()
                # a pooled worker is titled ray::IDLE, then by what it runs (ray::ChunkWorker), then IDLE again: keep
                # the work
                if proc.pid not in self.kinds or self.kinds[proc.pid] in ("ray::IDLE", "python default_worker.py") \
                        or not self.kinds[proc.pid].startswith("ray::"):
                    kind = ("the driver" if proc.pid == me.pid else
                                            title.split("(")[0] if title.startswith("ray::") else
                                            Path(title.split()[0]).name + (" " + Path(proc.cmdline()[1]).name
                                                                           if Path(title).name.startswith("python")
                                                                           and len(proc.cmdline()) > 1 else ""))
                    if kind != "ray::IDLE" or proc.pid not in self.kinds:
                        self.kinds[proc.pid] = kind
                self.seen[proc.pid] = times.user + times.system
            except psutil.Error:
                pass

    def _loop(self):
        while not self.stop.is_set():
            self._sample()
            self.stop.wait(self.every)

    def __enter__(self):
        self._sample()
        self.before = dict(self.seen)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self._sample()

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """kind -> (processes, CPU seconds used while sampled)."""
        out: dict[str, tuple[int, float]] = {}
        for pid, cpu in self.seen.items():
            n, total = out.get(self.kinds[pid], (0, 0.0))
            out[self.kinds[pid]] = (n + 1, total + cpu - self.before.get(pid, 0.0))
        return out


def breakdown(model, corpus, tmp: Path, chunk: int, here: float, cli: dict, init_s: float) -> list[str]:
    """Where the 1-worker Ray run's time goes, against one process, measured on a running local Ray: the
    worker's start-up, its chunks, the rest of the pipeline, what Ray's own processes took of the CPUs meanwhile,
    the bytes and seconds of pickling the jobs and the results, and the threads a worker's torch gets."""
    import pickle

    import ray

    from probes.corpus import ray_pool
    from probes.corpus.run import CorpusJob, in_process

    scan = corpus.scan(chunk)
    jobs = [CorpusJob(corpus, c, 128, 10) for c in scan.chunks]
    results = [r for _, r in in_process(model, jobs[:4])]
    start = time.perf_counter()
    sent = sum(len(pickle.dumps(job)) for job in jobs)
    back = [pickle.dumps(r) for r in results]
    [pickle.loads(b) for b in back]
    pickling = (time.perf_counter() - start) * len(jobs) / len(results)  # the results scaled to every chunk
    back_bytes = sum(map(len, back)) * len(jobs) / len(results)

    @ray.remote(num_cpus=2)
    def threads():
        import torch

        return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()

    omp, torch_threads = ray.get(threads.remote())
    stats: dict = {}
    first: list[float] = []
    pool = ray_pool.executor(1, cpus_per_worker=2, stats=stats)

    def watched(m, js):
        for item in pool(m, js):
            first.append(time.perf_counter())
            yield item

    with CpuSampler() as cpu:
        start = time.perf_counter()
        timed([model], corpus, tmp / "breakdown.csv", 128, watched, chunk)
        wall = time.perf_counter() - start
    load, busy = max(stats["load_seconds"].values()), sum(stats["busy_seconds"].values())
    to_first = first[0] - start
    kinds = cpu.by_kind()
    worker = sum(t for k, (n, t) in kinds.items() if k.startswith("ray::ChunkWorker"))
    driver = kinds.get("the driver", (1, 0.0))[1]
    ray_own = {k: v for k, v in kinds.items()
               if k != "the driver" and not k.startswith("ray::ChunkWorker") and v[1] >= 0.05}
    one, on_ray = cli["one process"], cli["Ray, 1 worker × 2 CPUs"]
    lines = ["## Where the Ray run's time goes (1 worker × 2 CPUs, against one process)", "",
             "| part | one process, s | Ray, s | Ray − one process, s |", "|---|---|---|---|",
             f"| the CLI end to end (above) | {one:.1f} | {on_ray:.1f} | {on_ray - one:+.1f} |",
             f"| outside the work: interpreter, imports, the driver's model load, the scan; for Ray also "
             f"`ray.init` ({init_s:.1f} s here) and `ray.shutdown` | {one - here:.1f} | {on_ray - wall:.1f} | "
             f"{(on_ray - wall) - (one - here):+.1f} |",
             f"| the work, the model loaded (the pipeline, on a running Ray) | {here:.1f} | {wall:.1f} | "
             f"{wall - here:+.1f} |",
             f"| … the worker's start-up (its imports and model load, in the actor) | – | {load:.1f} | {load:+.1f} |",
             f"| … the chunks (the worker's busy seconds) | {here:.1f} | {busy:.1f} | {busy - here:+.1f} |",
             f"| … the rest: starting the actor's process, Ray's scheduling, moving jobs and "
             f"results, waiting | – | {wall - load - busy:.1f} | {wall - load - busy:+.1f} |", "",
             f"First result {to_first:.1f} s after the pipeline started (the worker's start-up {load:.1f} s and "
             f"one chunk). Pickling: {sent / 1e3:,.0f} kB of jobs out and {back_bytes / 1e3:,.0f} kB of results back "
             f"for {len(jobs)} chunks, {pickling:.2f} s to pickle and unpickle them all. A Ray worker with "
             f"2 CPUs gets OMP_NUM_THREADS={omp} and torch {torch_threads} threads (ChunkWorker sets torch's to its "
             "CPUs).", "",
             f"CPU seconds used during the pipeline ({wall:.1f} s on {os.cpu_count()} CPUs = "
             f"{wall * (os.cpu_count() or 1):.1f} CPU-s): the worker {worker:.1f}, the driver {driver:.1f}, Ray's "
             "own processes " + ", ".join(f"{k} {t:.1f} ({n} process{'es' if n > 1 else ''})"
                                          for k, (n, t) in sorted(ray_own.items(), key=lambda kv: -kv[1][1]))
             + f"; in all {sum(t for _, t in ray_own.values()):.1f}.", ""]
    return lines


def timed(models, corpus, out: Path, window: int, executor,
          chunk_size: int) -> tuple[float, pd.DataFrame, pd.DataFrame]:
    from probes.corpus.run import profile_corpus

    start = time.perf_counter()
    table, found = profile_corpus(models, corpus, out, window=window, chunk_size=chunk_size, executor=executor)
    return time.perf_counter() - start, table, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=64, help="texts per chunk (the CLI's --checkpoint-every)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three CLI runs in part 1, alternating")
    parser.add_argument("--windows", type=int, default=64, help="windows per items/s measurement (long texts)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for corpus_ray.md (default: a new temporary folder, printed; "
                             "--out benchmarks/results writes the committed one)")
    parser.add_argument("--overhead-only", action="store_true",
                        help="parts 1 and 4 only; parts 2 and 3 copied from the saved result, marked so")
    args = parser.parse_args()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    import ray

    from probes import cluster
    from probes.corpus import ray_pool
    from probes.corpus.reader import Corpus
    from probes.models import load
    from probes.threads import apply

    apply("profile")  # the in-process runs below, as profile runs them
    out = out_folder(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="corpus-bench-"))
    sentences = ewt(args.texts)
    (tmp / "ewt.txt").write_text("\n".join(sentences) + "\n")
    corpus = Corpus(str(tmp / "ewt.txt"))
    minilm = load("minilm")
    lines = [f"# corpus_ray.py: {len(sentences)} EWT sentences, window 128, chunks of {args.chunk} texts, "
             f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start",
             f"# command: .venv/bin/python benchmarks/corpus_ray.py --texts {args.texts} --rounds {args.rounds}"
             + (f" --out {args.out}" if args.out else "")
             + (" --overhead-only" if args.overhead_only else ""), ""]

    # 1. the CLI, end to end: one process vs Ray with 1 and 2 workers
    import subprocess

    base = [sys.executable, "-m", "probes", "profile", "--corpus", str(tmp / "ewt.txt"), "--model", "minilm",
            "--window", "128", "--checkpoint-every", str(args.chunk), "--force"]
    runs = {"one process": [], "Ray, 1 worker × 2 CPUs": ["--local-ray", "--workers", "1", "--cpus-per-worker", "2"],
            "Ray, 2 workers × 1 CPU": ["--local-ray", "--workers", "2"]}
    said, tables = {}, {}

    def cli(name: str, extra: list[str]):
        def go() -> None:
            out_csv = tmp / f"{list(runs).index(name)}.csv"
            done = subprocess.run([*base, "--out", str(out_csv), *extra], capture_output=True, text=True, cwd=ROOT)
            if done.returncode:
                raise SystemExit(done.stderr)
            said[name] = done.stderr.strip().splitlines()[-1]
            tables[name] = pd.read_csv(out_csv).sort_values(["label", "layer", "head"])["score"].to_numpy()
            print(name, said[name], flush=True)
        return go

    # the three take turns round by round (rotated each round), so load drift hits them alike
    timing = alternate({name: cli(name, extra) for name, extra in runs.items()}, args.rounds)
    per_round = ratios(timing.seconds, "one process")
    seconds = {name: timing.median(name) for name in runs}
    single = seconds["one process"]
    same = max(float(abs(t - tables["one process"]).max()) for t in tables.values())
    lines += [f"## minilm, statistics + top examples over {len(sentences)} sentences, the CLI end to end", "",
              f"{args.rounds} round{'s' if args.rounds > 1 else ''}, the three runs taking turns (each round in an "
              "order rotated by one); seconds and sentences/s are medians over the rounds, the ratio is each "
              "round's own (one process's seconds ÷ this run's, same round): median (min–max: every round)", "",
              "| run | seconds per round | seconds | sentences/s | vs one process, per round |",
              "|---|---|---|---|---|"]
    for name, t in seconds.items():
        goal = {"Ray, 1 worker × 2 CPUs": f" (overhead {100 * (t / single - 1):+.0f} %; goal ≤ +15 %)",
                "Ray, 2 workers × 1 CPU": " (goal ≥ 1.6×)"}.get(name, "")
        speed = [1 / x for x in per_round[name]]
        lines.append(f"| {name} | {' / '.join(f'{x:.1f}' for x in timing.seconds[name])} | {t:.1f} | "
                     f"{len(sentences) / t:.1f} | {summary(speed)}{goal} |")
    lines += ["", "What each run said on its last line:", ""] + [f"- {name}: `{said[name]}`" for name in runs]
    lines += ["", f"Largest |Δ score| between the three tables: {same:.1e}.", ""]
    from probes.corpus.run import in_process

    # the work alone: in this process with the model loaded, and on Ray's workers (their busy seconds)
    here, _, found = timed([minilm], corpus, tmp / "single.csv", 128, in_process, args.chunk)
    init_start = time.perf_counter()
    cluster.start(None, cpus=os.cpu_count())
    init_s = time.perf_counter() - init_start
    busy = {}
    for name, (workers, cpus) in {"Ray, 1 worker × 2 CPUs": (1, 2), "Ray, 2 workers × 1 CPU": (2, 1)}.items():
        stats: dict = {}
        wall, _, _ = timed([minilm], corpus, tmp / f"busy-{workers}.csv", 128,
                           ray_pool.executor(workers, cpus_per_worker=cpus, stats=stats), args.chunk)
        busy[name] = (max(stats["busy_seconds"].values()), wall - max(stats["load_seconds"].values()))
    lines += ["The work alone (the model loaded; for Ray, a cluster already started): this process "
              f"{here:.1f} s; " + "; ".join(f"{name}: the busiest worker {b:.1f} s on chunks "
                                            f"({here / b:.2f}× this process), the pipeline {w:.1f} s after its "
                                            f"workers started ({here / w:.2f}×)" for name, (b, w) in busy.items())
              + ".", ""]
    lines += breakdown(minilm, corpus, tmp, args.chunk, here, seconds, init_s)
    print("\n".join(lines[-9:]), flush=True)
    heads = minilm.n_layers * minilm.n_heads
    sizes = [(f"minilm, {len(sentences)} sentences", 128, (tmp / "single.examples.parquet").stat().st_size / heads,
              len(found) / heads)]

    if args.overhead_only:
        ray.shutdown()
        previous = (args.out or RESULTS) / "corpus_ray.md"  # parts 2 and 3 from the saved run (committed by default)
        saved = previous.read_text() if previous.is_file() else ""
        kept = saved[saved.find("## Windows per second"):] if "## Windows per second" in saved else ""
        lines += [f"(load average {os.getloadavg()[0]:.1f} at the end)", ""]
        if kept:
            lines += ["*Parts 2 and 3 below are from the previous full run (`--overhead-only` did not rerun them).*",
                      "", kept.rstrip("\n")]
        publish("\n".join(lines), out, "corpus_ray.md")
        return

    # 2. windows per second and peak memory per worker, long texts
    docs = documents(ewt(max(args.texts, 4000)))
    smollm2 = load("smollm2")
    lines += ["## Windows per second and peak memory, one Ray worker × 2 CPUs", "",
              "| model | window | windows | worker busy s | windows/s | worker start-up s | worker peak memory |",
              "|---|---|---|---|---|---|---|"]
    for model in (minilm, smollm2):
        for window in (128, 512):
            room = window - 2 if model is minilm else window
            per_doc = max(1, 600 // room)
            need = max(1, args.windows // per_doc)
            (tmp / f"docs-{window}.txt").write_text("\n".join(docs[:need]) + "\n")
            docs_corpus = Corpus(str(tmp / f"docs-{window}.txt"))
            from probes.corpus.reader import cut

            n_windows = len(cut(model, [(i, d) for i, d in enumerate(docs[:need])], window))
            stats = {}
            name = f"{model.name}-{window}"
            _, _, found_w = timed([model], docs_corpus, tmp / f"{name}.csv", window,
                                  ray_pool.executor(1, cpus_per_worker=2, stats=stats), max(1, need // 4))
            peak = max(stats["peak_bytes"].values()) / 2**20
            spent = sum(stats["busy_seconds"].values())
            lines.append(f"| {model.name} | {window} | {n_windows} | {spent:.1f} | {n_windows / spent:.1f} | "
                         f"{max(stats['load_seconds'].values()):.1f} | {peak:,.0f} MiB |")
            n_heads = model.n_layers * model.n_heads
            size = (tmp / f"{name}.examples.parquet").stat().st_size
            sizes.append((f"{model.name}, {need} long texts", window, size / n_heads, len(found_w) / n_heads))
            print(lines[-1], flush=True)
    ray.shutdown()
    lines += ["",
              "## Top-examples store, bytes per head (Parquet, k = 10)", "",
              "| run | window | bytes per head | examples per head |", "|---|---|---|---|"]
    lines += [f"| {m} | {w} | {b:,.0f} | {e:.1f} |" for m, w, b, e in sizes]
    publish("\n".join(lines), out, "corpus_ray.md")


if __name__ == "__main__":
    main()
