"""The GPU check: the kernel tests on CUDA, then forward TFLOP/s of our Triton FlashAttention against
torch SDPA's FLASH_ATTENTION backend. Made to finish in under 5 minutes on one H200.

    python benchmarks/gpu_check.py [--quick] [--json FILE]

For head dims 64 and 128, causal and not, fp16 and bf16, L = 1k .. 16k with batch × heads = 128,
it prints both throughputs, their ratio (goal: ours ≥ 0.9× SDPA flash) and each as a share of the
H200's 989 TFLOP/s dense bf16/fp16 peak. FLOPs counted as 4·B·H·L²·d (half of it when causal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from probes.scratch.flash import flash_attention  # noqa: E402

PEAK_TFLOPS = 989.0  # H100/H200 SXM dense fp16/bf16 tensor-core peak


def run_tests() -> int:
    """The kernel and backend tests, compiled on the GPU, then parity of the offline default through
    each backend on CUDA (HF eager vs our pass, probabilities recovered from the logsumexp)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiled, on the GPU
    text = "Xiaoming gave the apple to Xiaohong because she was hungry."
    commands = [[sys.executable, "-m", "pytest", "-q", "tests/scratch/test_flash.py", "tests/scratch/test_backends.py"]]
    commands += [[sys.executable, "-m", "probes", "parity", "--model", "minilm", "--device", "cuda", "--text", text,
                  "--backend", backend] for backend in ("eager", "sdpa", "flash")]
    worst = 0
    for cmd in commands:
        print("$", " ".join(cmd[1:]), flush=True)
        worst = max(worst, subprocess.run(cmd, cwd=ROOT, env=env).returncode)
    return worst


def timed(fn, repeats: int = 10) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def sdpa_flash(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="L = 1k and 8k only")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check needs a GPU (the CPU tests run the kernel under the interpreter)")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    tests_rc = 0 if args.skip_tests else run_tests()

    lengths = [1024, 8192] if args.quick else [1024, 2048, 4096, 8192, 16384]
    rows: list[dict[str, Any]] = []
    header = (f"{'dtype':>8} {'d':>4} {'causal':>6} {'L':>6} {'B×H':>5} | {'ours TF/s':>9} {'% peak':>6} | "
              f"{'SDPA TF/s':>9} {'% peak':>6} | {'ours/SDPA':>9}")
    print(header)
    print("-" * len(header))
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for causal in (False, True):
                for n in lengths:
                    heads = 16
                    batch = 8  # B × H = 128
                    q, k, v = (torch.randn(batch, heads, n, d, device="cuda", dtype=dtype) for _ in range(3))
                    flops = 4 * batch * heads * n * n * d * (0.5 if causal else 1.0)
                    ours = flops / timed(lambda q=q, k=k, v=v, causal=causal:
                                         flash_attention(q, k, v, causal=causal)) / 1e12
                    ref = flops / timed(lambda q=q, k=k, v=v, causal=causal: sdpa_flash(q, k, v, causal)) / 1e12
                    row = dict(dtype=str(dtype).split(".")[-1], d=d, causal=causal, L=n, BH=batch * heads,
                               ours_tflops=ours, sdpa_tflops=ref, ratio=ours / ref)
                    rows.append(row)
                    print(f"{row['dtype']:>8} {d:>4} {str(causal):>6} {n:>6} {batch * heads:>5} | {ours:>9.1f} "
                          f"{100 * ours / PEAK_TFLOPS:>5.1f}% | {ref:>9.1f} {100 * ref / PEAK_TFLOPS:>5.1f}% | "
                          f"{ours / ref:>8.2f}×", flush=True)
    worst = min(r["ratio"] for r in rows)
    print(f"goal ours ≥ 0.9× SDPA flash: {'met' if worst >= 0.9 else 'NOT met'} (worst {worst:.2f}×); "
          f"kernel tests: {'passed' if tests_rc == 0 else 'FAILED'}")
    if args.json:
        args.json.write_text(json.dumps(dict(tests_rc=tests_rc, rows=rows), indent=2))
    sys.exit(tests_rc)


if __name__ == "__main__":
    main()
