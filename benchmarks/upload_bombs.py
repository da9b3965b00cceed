"""Upload bombs on the public app (issue 40): what reading an upload costs the server, in memory and time.

Each upload is built here as a file, then read by the function the app calls for it (``jobs.read_table`` for a
probe table on Heads, ``readback.read_examples`` for a corpus run's top examples, ``questions.question_upload`` for
Find's questions, as a public deployment: ``PROBES_PUBLIC=1``) in a fresh Python process of its own, which has the
upload's bytes in memory already (as the app has them from Streamlit's uploader). That process resets its peak
resident memory (``/proc/self/clear_refs``), reads, and reports the growth of its peak (``VmHWM`` after, less
``VmRSS`` before), the time taken, and the answer: the rows read, or the first words of the refusal. A process
still reading after ``--timeout`` seconds is stopped and shown as such.

The issue's goal: any upload within the 20 MB upload limit raises the server's memory by less than 300 MB and is
answered within 30 s. The bombs are the issue's (a 645 KB Parquet of 30 M zero rows, zstd; a 12 MB CSV whose header
names 1.5 M columns) and others that fit the limit; the largest files a person could rightly upload are there too
(a 19 MB probe table, the top examples of a 1,024-head model).

The last rows time the server's stop: ``streamlit run dashboard/serve.py`` (as ``make app`` starts it) is sent
SIGTERM idle, and while its event loop (the thread that carries out the normal shutdown) is held up by a slow step
(the stub of ``tests/dashboard/stop_hooks``); the time until the process is gone is measured (goal: under 5 s).

    .venv/bin/python benchmarks/upload_bombs.py [--timeout 120] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import publish  # noqa: E402  (benchmarks/, this script's folder)

GOAL_MB, GOAL_S, STOP_GOAL_S = 300, 30, 5
WORDS = ("river apple teacher quietly because window seven gave hungry mountain she the to and old bright walked "
         "under before a letter green city wrote").split()


# -- the uploads ---------------------------------------------------------------------------------------------------

def _parquet(table, **options) -> bytes:
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", **options)
    return buf.getvalue()


def zero_rows(rows: int, every_column: bool) -> bytes:
    """``rows`` rows of zeros: one int64 column (the issue's file), or every column of the top examples."""
    import numpy as np
    import pyarrow as pa

    from probes.corpus.examples import COLUMNS

    zeros = pa.array(np.zeros(rows, dtype=np.int64))
    if not every_column:
        return _parquet(pa.table({"x": zeros}))
    empty = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array([""]))
    text = ("query_token", "key_token", "snippet", "context")
    return _parquet(pa.table({c: empty if c in text else zeros for c in COLUMNS}))


def examples(rows: int, contexts: int, chars: int = 2000, dictionary: bool = True) -> bytes:
    """Top examples as ``profile --corpus`` writes them for a 32 × 32-head model: ``rows`` rows over ``contexts``
    different contexts of ``chars`` characters (one context in every row: a dictionary bomb)."""
    import pandas as pd
    import pyarrow as pa

    rng = random.Random(0)
    texts = []
    for _ in range(contexts):
        words, n = [], 0
        while n < chars:
            words.append(rng.choice(WORDS))
            n += len(words[-1]) + 1
        texts.append(" ".join(words)[:chars])
    heads = [(layer, head) for layer in range(32) for head in range(32)]
    frame = pd.DataFrame({
        "layer": [heads[(i // 10) % len(heads)][0] for i in range(rows)],
        "head": [heads[(i // 10) % len(heads)][1] for i in range(rows)],
        "rank": [i % 10 + 1 for i in range(rows)], "weight": [0.5] * rows,
        "text_id": [i % contexts for i in range(rows)],
        "window": [0] * rows, "query": [3] * rows, "key": [1] * rows, "query_token": ["the"] * rows,
        "key_token": ["river"] * rows, "snippet": ["⟦river⟧ … «the»"] * rows,
        "context": [texts[i % contexts] for i in range(rows)], "query_start": [10] * rows, "query_end": [13] * rows,
        "key_start": [0] * rows, "key_end": [5] * rows})
    return _parquet(pa.Table.from_pandas(frame, preserve_index=False), use_dictionary=dictionary)


def wide_header(columns: int = 1_500_000) -> bytes:
    """The issue's CSV: a header of ``columns`` names (12 MB at 1.5 M) and one row."""
    return ("label,layer,head,score," + ",".join(f"c{i}" for i in range(columns - 4)) + "\nx,0,0,0.5\n").encode()


def table(rows: int) -> bytes:
    """A probe table as profile writes it (label, layer, head, score, baseline, n) of a 32 × 32-head model."""
    lines = ["label,layer,head,score,baseline,n"]
    lines += [f"label-{i // 1024},{(i % 1024) // 32},{i % 32},0.{i % 9973:04d},0.1,{i % 500}" for i in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def narrow(rows: int) -> bytes:
    return b"label,layer,head,score\n" + b"x,0,0,0\n" * rows


def wide_row(fields: int) -> bytes:
    return b"label,layer,head,score\nx,0,0,0.5" + b",0" * fields + b"\n"


def many_columns(rows: int, columns: int = 64) -> bytes:
    names = ",".join(f"c{i}" for i in range(columns - 4))
    return f"label,layer,head,score,{names}\n".encode() + (b"x,0,0,0" + b",0" * (columns - 4) + b"\n") * rows


def deep_jsonl(size: int) -> bytes:
    return b"[" * (size // 2) + b"]" * (size // 2) + b"\n"


def questions(n: int) -> bytes:
    """``n`` questions of the longest text a question may have (2,000 characters)."""
    rng = random.Random(0)
    rows = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(330)]
        text = ("Mary gave the apple to John because he was hungry. " + " ".join(words))[:2000]
        rows.append(json.dumps({"text": text, "pronoun": "he", "candidates": ["Mary", "John"], "answer": "John"}))
    return ("\n".join(rows) + "\n").encode()


def long_lines(size: int, lines: int) -> bytes:
    line = json.dumps({"text": "x" * (size // lines - 80), "pronoun": "he", "candidates": ["a", "b"], "answer": "a"})
    return (line + "\n").encode() * lines


CASES = [  # (what, reader, build)
    ("Parquet: 30 M zero rows, one column (the issue's)", "examples", lambda: zero_rows(30_000_000, False)),
    ("Parquet: 30 M zero rows of every column", "examples", lambda: zero_rows(30_000_000, True)),
    ("Parquet: one 2,000-char context in 90,000 rows", "examples", lambda: examples(90_000, 1)),
    ("Parquet: 90,000 rows, 2,000-char contexts, plain", "examples", lambda: examples(90_000, 1, dictionary=False)),
    ("Parquet: one context in 30,000 rows (text bound)", "examples", lambda: examples(30_000, 1)),
    ("Parquet: 25,000 rows, plain (decompressed bound)", "examples", lambda: examples(25_000, 1, dictionary=False)),
    ("Parquet: top 10 of a 1,024-head model (fits)", "examples", lambda: examples(10_240, 2_000)),
    ("CSV: header of 1.5 M columns (the issue's)", "table", wide_header),
    ("CSV: one row of 9 M fields", "table", lambda: wide_row(9_000_000)),
    ("CSV: 2.4 M rows 'x,0,0,0'", "table", lambda: narrow(2_400_000)),
    ("CSV: 64 columns, 150,000 rows", "table", lambda: many_columns(150_000)),
    ("CSV: 2.0 M rows 'x,0,0,0' (the row bound)", "table", lambda: narrow(2_000_000)),
    ("CSV: probe table of 640,000 rows (fits)", "table", lambda: table(640_000)),
    ("JSONL: one line nested 1 M deep", "questions", lambda: deep_jsonl(1_999_000)),
    ("JSONL: 20 lines of 100,000 characters", "questions", lambda: long_lines(1_999_000, 20)),
    ("JSONL: 300 questions of 2,000 characters (fits)", "questions", lambda: questions(300)),
]


# -- one upload read, in a process of its own ----------------------------------------------------------------------

def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def read_one(reader: str, path: Path) -> dict:
    """Read the upload at ``path`` as the app does; the peak memory growth, seconds and answer."""
    from dashboard.core import questions
    from probes import jobs
    from probes.corpus import readback
    from probes.errors import ProbesError

    raw = path.read_bytes()
    call = {"table": lambda: jobs.read_table(raw, path.name),
            "examples": lambda: readback.read_examples(raw, path.name, "m", 32, 32),
            "questions": lambda: questions.question_upload(path.name, raw)}[reader]
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from here
    before, start = _status("VmRSS"), time.perf_counter()
    try:
        found = call()
        answer = f"read: {len(found):,} row(s)" if reader != "questions" else \
            f"read: {len(found):,} questions, {len(found.bad):,} bad lines"
    except ProbesError as exc:
        answer = "refused: " + str(exc).split(": ", 1)[-1]
    except Exception as exc:  # noqa: BLE001 - what a bomb does to the reader is the measurement
        answer = f"crashed: {type(exc).__name__}"
    seconds = time.perf_counter() - start
    return {"mb": (_status("VmHWM") - before) / 1e6, "s": seconds, "answer": answer}


def measure(reader: str, raw: bytes, folder: Path, timeout: float) -> dict:
    path = folder / {"table": "upload.csv", "examples": "upload.parquet", "questions": "upload.jsonl"}[reader]
    path.write_bytes(raw)
    env = dict(os.environ, PROBES_PUBLIC="1", OMP_NUM_THREADS="1")
    try:
        done = subprocess.run([sys.executable, __file__, "--one", reader, str(path)], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"mb": None, "s": None, "answer": f"still reading after {timeout:.0f} s (stopped)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"mb": None, "s": None, "answer": f"the reader died: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(lines[-1])


# -- the server's stop on SIGTERM ----------------------------------------------------------------------------------

HOOKS = ROOT / "tests" / "dashboard" / "stop_hooks"  # the stalled server of tests/dashboard/test_serve.py
STOPS = {"idle": False, "its event loop held up by a 600 s step": True}


def stop_time(stalled: bool, folder: Path) -> tuple[float | None, int | None]:
    """Seconds from SIGTERM to the end of ``streamlit run dashboard/serve.py``, idle or with its event loop (the
    thread that carries out the normal shutdown) in a 600 s step of Python (``tests/dashboard/stop_hooks``)."""
    from load_test import start_server  # benchmarks/: the server on a free loopback port, once it answers

    flag = folder / "stall"
    flag.unlink(missing_ok=True)
    saved = dict(os.environ)
    os.environ.update(STALL_FLAG=str(flag), PYTHONPATH=os.pathsep.join(filter(None, [str(HOOKS),
                                                                                    saved.get("PYTHONPATH")])))
    try:
        server, _ = start_server([], "serve.py")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if stalled:
        flag.touch()
    time.sleep(2)  # the step has begun
    start = time.perf_counter()
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        return None, None
    return time.perf_counter() - start, code


# -- the table -----------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=120, help="seconds a read may take before it is stopped")
    parser.add_argument("--only", help="only the uploads whose description contains this")
    parser.add_argument("--no-server", action="store_true", help="leave out the SIGTERM rows")
    parser.add_argument("--out", type=Path, help="folder to write upload_bombs.txt to")
    parser.add_argument("--one", nargs=2, metavar=("READER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(read_one(args.one[0], Path(args.one[1]))))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for what, reader, build in CASES:
            if args.only and args.only not in what:
                continue
            raw = build()
            found = measure(reader, raw, folder, args.timeout)
            rows.append((what, len(raw), found))
            print(f"{what}: {found}", file=sys.stderr)
        stops = [] if args.no_server else [(what, *stop_time(stalled, folder)) for what, stalled in STOPS.items()]
    width = max(len(r[0]) for r in rows) if rows else 10
    lines = [f"Reading an upload as the app does, in a fresh process each (peak RSS growth; goal < {GOAL_MB} MB and "
             f"< {GOAL_S} s for any upload within the 20 MB limit):", "",
             f"{'upload':<{width}}  {'file':>9}  {'peak +MB':>8}  {'seconds':>7}  answer",
             f"{'-' * width}  {'-' * 9}  {'-' * 8}  {'-' * 7}  {'-' * 40}"]
    for what, size, found in rows:
        mb = "—" if found["mb"] is None else f"{found['mb']:.0f}"
        s = "—" if found["s"] is None else f"{found['s']:.2f}"
        size_text = f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
        lines.append(f"{what:<{width}}  {size_text:>9}  {mb:>8}  {s:>7}  {found['answer'][:110]}")
    if stops:
        lines += ["", f"SIGTERM to the server (streamlit run dashboard/serve.py; goal: gone within {STOP_GOAL_S} s):",
                  ""]
        for what, seconds, code in stops:
            lines.append(f"  {what:<42} " + ("still running after 60 s (killed)" if seconds is None
                                              else f"gone after {seconds:.1f} s (exit status {code})"))
    publish("\n".join(lines), args.out, "upload_bombs.txt")


if __name__ == "__main__":
    main()
