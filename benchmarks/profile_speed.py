"""Head-probe speed as a user feels it: on a quiet machine, and beside one competing process (a busy
loop pinned to one of this process's CPUs), each with torch's default threads and with the threads
``probes.threads`` chooses, side by side in one run. For each: the full profile (every probe over its
default data, as ``python -m probes profile --probe all`` runs it), its wall and CPU seconds, items/s
and CPU seconds per item; the syntactic probe through the engine (``profile.run_chunk``) against a
naive loop that scores heads one at a time (one sentence per forward pass, then each layer and head
separately, the way TransformerLens's ``detect_head`` loops), on the same sentences; and where the
engine's time goes (tokenisation, forward pass, reading attention and aligning words, scoring).
Goals, with the chosen threads: CPU seconds per item beside the busy process within 1.5× of quiet;
the engine ≥ 5× faster than the naive loop in both. Each cell runs in a fresh process; ``--rounds`` rounds of the
four cells, taking turns round by round (``report.alternate``): the table gives medians, the goals each round's
ratio.

    .venv/bin/python benchmarks/profile_speed.py [--items 150] [--sentences 100] [--rounds 2]
        [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from report import alternate, publish, ratios, summary  # noqa: E402  (benchmarks/, this script's folder)

CONDITIONS = ("quiet", "busy")  # busy: beside one competing process
BEHAVIOURS = ("default", "chosen")  # torch's default threads | probes.threads.apply("profile")


def naive_syntactic(model, sentences) -> dict:
    """One forward pass per sentence; then, for every layer and head on its own, word-level attention
    and the argmax of each dependency pair."""
    from probes import scratch
    from probes.heads.engine import word_matrices
    from probes.heads.syntactic import dependency_sentence
    from probes.tokens import align_to_words

    hits: dict[tuple[str, int, int], int] = {}
    for dep in sentences:
        sentence = dependency_sentence(dep)
        text, spans = sentence.text_and_spans()
        enc = model.encode(text, truncate=True)
        trace = scratch.forward(model, enc)
        word_of = align_to_words(trace.tokens[0], spans)
        to, frm = word_matrices(word_of, len(sentence.words))
        present = set(word_of)
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                words = frm @ trace.attention(layer, head).float() @ to
                for p in sentence.pairs:
                    if p.query in present and p.target in present:
                        key = (p.label, layer, head)
                        hits[key] = hits.get(key, 0) + int(words[p.query].argmax() == p.target)
    return hits


def timed(fn):
    """(result, wall seconds, CPU seconds of this process, all its threads)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def engine_parts(model, subset) -> dict[str, float]:
    """Where the engine's time goes on ``subset``, part by part (each timed on its own, in the order
    ``run_chunk`` runs them)."""
    from probes import runner
    from probes.datasets.catalog import texts
    from probes.heads.engine import score_pairs, sentence_attention
    from probes.heads.profile import shortest_first
    from probes.heads.syntactic import dependency_sentence

    t0 = time.perf_counter()
    subset = shortest_first(model, subset, texts(subset))
    sentences = [dependency_sentence(s) for s in subset]
    batch = [texts(subset)[i:i + 16] for i in range(0, len(subset), 16)]
    encodings = [model.encode(b, truncate=True) for b in batch]
    t1 = time.perf_counter()
    traces = [runner.forward(model, enc, source="auto", logits=False) for enc in encodings]
    t2 = time.perf_counter()
    items = list(sentence_attention(sentences, traces))
    t3 = time.perf_counter()
    score_pairs(items, probe="syntactic")
    t4 = time.perf_counter()
    return {"tokenise": t1 - t0, "forward": t2 - t1, "attention & words": t3 - t2, "score": t4 - t3}


def cell(args) -> dict:
    """One cell of the table, in this (fresh) process: ``args.behaviour`` threads, under whatever
    runs beside it."""
    import torch

    from probes import threads

    choice = threads.apply("profile") if args.behaviour == "chosen" else None
    busy = choice.busy if choice else threads.busy_cpus()
    import probes
    from probes.datasets.dependencies import ewt
    from probes.heads.profile import profile, run_chunk
    from probes.heads.registry import get, probes as registered

    torch.manual_seed(0)
    model = probes.load("minilm")
    subset = ewt("dev")[: args.sentences]
    syntactic = get("syntactic")
    run_chunk(syntactic, model, subset[:16])  # warm: first calls allocate
    out: dict[str, Any] = dict(busy=busy, threads=torch.get_num_threads(), cpus=threads.usable_cpus())

    names = list(registered())
    out["items"] = sum(len(get(name).items(None, args.items)) for name in names)
    with tempfile.TemporaryDirectory() as tmp:
        frame, out["full_wall"], out["full_cpu"] = timed(
            lambda: profile(model, names, None, args.items, Path(tmp) / "all.csv", checkpoint_every=10**6))
    out["rows"] = len(frame)

    fast, out["engine_wall"], out["engine_cpu"] = timed(lambda: run_chunk(syntactic, model, subset))
    hits, out["naive_wall"], out["naive_cpu"] = timed(lambda: naive_syntactic(model, subset))
    if args.check:
        # the two must agree before their speeds mean anything: exactly, when the engine also runs one
        # sentence per forward pass (batched, padding changes the last bits of a few near-ties)
        one = run_chunk(syntactic, model, subset, batch_size=1).set_index(["label", "layer", "head"])
        batched = fast.set_index(["label", "layer", "head"])
        for key, h in hits.items():
            assert round(one.loc[key, "score"] * one.loc[key, "n"]) == h, key
        out["checked"] = len(hits)
        out["batched_vs_one"] = float((batched["score"] - one["score"]).abs().max())
    if args.behaviour == "chosen":
        from probes import scratch

        out["parts"] = engine_parts(model, subset)
        _, out["naive_forward"], _ = timed(lambda: [scratch.forward(model, model.encode(t, truncate=True))
                                                    for t in [" ".join(s.words) for s in subset]])
    return out


def competitor(cpu: int) -> subprocess.Popen:
    """A busy loop pinned to one CPU: another process keeping one core busy the whole time."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def run_cell(behaviour: str, condition: str, args) -> dict:
    rival = competitor(max(os.sched_getaffinity(0))) if condition == "busy" else None
    try:
        time.sleep(1.0 if rival else 0.0)  # running before the cell starts, as a neighbour would be
        env = {k: v for k, v in os.environ.items() if k not in ("PROBES_THREADS", "OMP_NUM_THREADS")}
        check = ["--check"] if (behaviour, condition) == ("chosen", "quiet") else []
        cmd = [sys.executable, __file__, "--cell", behaviour, "--items", str(args.items),
               "--sentences", str(args.sentences), *check]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    finally:
        if rival:
            rival.kill()
            rival.wait()
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_cell(runs: list[dict]) -> dict:
    """One cell's rounds as one: every measured number (and every part of ``parts``) the median over the rounds;
    the counts (items, rows, threads), the same each round, as the last round has them."""
    out = dict(runs[-1])
    for key, value in runs[-1].items():
        if isinstance(value, float):
            out[key] = statistics.median(r[key] for r in runs)
        elif isinstance(value, dict):
            out[key] = {k: statistics.median(r[key][k] for r in runs) for k in value}
    return out


def table(cells: dict, args, seconds: float, runs: dict) -> str:
    from probes.heads.registry import probes as registered

    first = cells["chosen", "quiet"]
    cols = [(b, c) for b in BEHAVIOURS for c in CONDITIONS]
    head = {"default": "torch's default threads", "chosen": "threads chosen by probes.threads"}
    where = {"quiet": "quiet", "busy": "beside 1 busy"}
    lines = [f"offline default (minilm, 6×12 heads), CPU, {first['cpus']} CPUs; full profile: "
             f"{', '.join(registered())} ({args.items} items each where the data has them: {first['items']} items, "
             f"{first['rows']} rows); syntactic probe: the first {args.sentences} UD English-EWT dev sentences",
             "each cell in a fresh process; 'beside 1 busy': a Python busy loop pinned to one of these CPUs, started "
             "1 s before the cell; 'quiet': nothing started beside it (the first row: what else the machine ran)", ""]
    w = 34
    lines.append(f"{'':<{w}} | " + " | ".join(f"{head[b]:^27}" for b in BEHAVIOURS))
    lines.append(f"{'':<{w}} | " + " | ".join(f"{where[c]:>12}" for _, c in cols))
    rows = [
        ("other work seen at start (CPUs)", lambda x: f"{x['busy']:.1f}"),
        ("torch threads", lambda x: f"{x['threads']}"),
        ("full profile: wall s", lambda x: f"{x['full_wall']:.1f}"),
        ("full profile: CPU s", lambda x: f"{x['full_cpu']:.1f}"),
        ("full profile: items/s", lambda x: f"{x['items'] / x['full_wall']:.1f}"),
        ("full profile: CPU s per item", lambda x: f"{x['full_cpu'] / x['items'] * 1000:.1f} ms"),
        (f"syntactic engine s ({args.sentences} sent.)", lambda x: f"{x['engine_wall']:.2f}"),
        ("syntactic naive loop s", lambda x: f"{x['naive_wall']:.2f}"),
        ("speed-up engine / naive", lambda x: f"{x['naive_wall'] / x['engine_wall']:.1f}×"),
    ]
    lines.append("-" * (w + 1) + "+" + "+".join("-" * 14 for _ in cols))
    for name, fmt in rows:
        lines.append(f"{name:<{w}} | " + " | ".join(f"{fmt(cells[k]):>12}" for k in cols))
    per_item = {c: [r["full_cpu"] / r["items"] for r in runs["chosen", c]] for c in CONDITIONS}
    each = ratios(per_item, "quiet")["busy"]  # round by round: the two cells of one round ran next to each other
    ratio = statistics.median(each)
    rounds = {c: [r["naive_wall"] / r["engine_wall"] for r in runs["chosen", c]] for c in CONDITIONS}
    speedups = [statistics.median(rounds[c]) for c in CONDITIONS]
    mark = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    lines += ["", f"goals, with the chosen threads ({args.rounds} rounds, the four cells taking turns; the table: "
              "medians over the rounds; ratios: each round's own, median (min–max: every round)):",
              f"  CPU s per item beside 1 busy / quiet = {summary(each)} (goal ≤ 1.5×): {mark(ratio <= 1.5)}",
              f"  engine ≥ 5× the naive loop: quiet {summary(rounds['quiet'])}, beside 1 busy "
              f"{summary(rounds['busy'])}: {mark(min(speedups) >= 5)}",
              "", f"checked: naive loop == engine exactly on {first['checked']} (relation, layer, head) counts, one "
              f"sentence per pass; batched, accuracy differs by at most {first['batched_vs_one']:.3f}"]
    lines.append("where the time goes, chosen threads (each part timed on its own):")
    for c in CONDITIONS:
        x = cells["chosen", c]
        parts, total = x["parts"], sum(x["parts"].values())
        shares = ", ".join(f"{k} {v / total:.0%}" for k, v in parts.items())
        lines.append(f"  {where[c]:<13} engine {total:.2f} s: {shares}"
                     + f"; the naive loop's own forward passes (one sentence each) {x['naive_forward']:.2f} s of its "
                     f"{x['naive_wall']:.2f} s; 5× would need the engine in {x['naive_wall'] / 5:.2f} s, its forward "
                     f"passes alone take {parts['forward']:.2f} s")
    lines.append(f"whole benchmark: {seconds:.0f} s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=150, help="items per probe in the full profile")
    parser.add_argument("--sentences", type=int, default=100, help="sentences for engine vs naive")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four cells, taking turns")
    parser.add_argument("--out", type=Path, help="folder for profile_speed.txt (default: a new temporary folder)")
    parser.add_argument("--cell", choices=BEHAVIOURS, help=argparse.SUPPRESS)
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        args.behaviour = args.cell
        print(json.dumps(cell(args)))
        return
    t0 = time.perf_counter()
    runs: dict[tuple[str, str], list[dict]] = {(b, c): [] for b in BEHAVIOURS for c in CONDITIONS}

    def contender(behaviour: str, condition: str):
        def go() -> None:
            runs[behaviour, condition].append(run_cell(behaviour, condition, args))
            print(f"{behaviour:>8} {condition:>6}: {json.dumps(runs[behaviour, condition][-1])}", file=sys.stderr)
        return go

    # the four cells take turns round by round (report.alternate), so load drift hits them alike
    alternate({f"{b} {c}": contender(b, c) for b, c in runs}, args.rounds)
    cells = {key: median_cell(got) for key, got in runs.items()}
    text = table(cells, args, time.perf_counter() - t0, runs)
    publish(text, args.out, "profile_speed.txt")


if __name__ == "__main__":
    main()
