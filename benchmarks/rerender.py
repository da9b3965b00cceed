"""Re-render time of the app when the view changes but the input does not (server-side, AppTest).

The offline default with a 40-token sentence on Explore: after the first run (model load, forward
pass), change the head 20 times (then the query token, then the layer) and time each rerun of the
whole script. Goal: a head change re-renders in < 150 ms, median of 20, because nothing reruns the
model (models in ``st.cache_resource``, traces and per-head numbers cached).

    .venv/bin/python benchmarks/rerender.py [--repeats 20] [--page explore]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

TEXT = ("Xiaoming gave the apple to Xiaohong because she was hungry, and then the two friends walked "
        "home together along the quiet river while the sun went down behind the old mill at long last.")  # 40 tokens
GOAL_MS = 150.0


def timed(at: AppTest) -> float:
    t0 = time.perf_counter()
    at.run()
    ms = (time.perf_counter() - t0) * 1000
    if at.exception:
        raise SystemExit(f"the app raised: {at.exception}")
    return ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--page", default="explore", choices=["explore", "qkv", "parity"])
    args = parser.parse_args()

    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=300)
    at.query_params.update(text=TEXT, page=args.page)
    first = timed(at)
    n_tokens = len(at.selectbox(key="w_query").options)
    n_heads = int(at.sidebar.slider(key="w_head").max) + 1
    rows = [("first run (load + forward)", [first])]
    for what, key, values in [
        ("head change, first visit", "w_head", [(i % (n_heads - 1)) + 1 for i in range(n_heads - 1)]),
        ("head change", "w_head", [i % n_heads for i in range(args.repeats)]),
        ("query token change", "w_query", [(3 * i + 1) % n_tokens for i in range(args.repeats)]),
        ("layer change", "w_layer", [i % 6 for i in range(1, args.repeats + 1)]),
    ]:
        times = []
        for value in values:
            widget = at.sidebar.slider(key=key) if key != "w_query" else at.selectbox(key=key)
            widget.set_value(value)
            times.append(timed(at))
        rows.append((what, times))

    print(f"app re-render, server side (AppTest), page {args.page}, minilm, {n_tokens} tokens")
    print(f"{'change':<28} | {'runs':>4} | {'median ms':>9} | {'p90 ms':>7} | {'min ms':>7} | {'max ms':>7}")
    print("-" * 75)
    for what, times in rows:
        ordered = sorted(times)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        print(f"{what:<28} | {len(times):>4} | {statistics.median(times):>9.1f} | {p90:>7.1f} | {ordered[0]:>7.1f} | "
              f"{ordered[-1]:>7.1f}")
    median = statistics.median(rows[2][1])
    verdict = "met" if median < GOAL_MS else "NOT met"
    print(f"goal: a head change re-renders in < {GOAL_MS:.0f} ms (median of {args.repeats}): {verdict} "
          f"({median:.1f} ms)")


if __name__ == "__main__":
    main()
