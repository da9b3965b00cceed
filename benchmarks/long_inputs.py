"""Long inputs: "every head of every layer can be inspected", Hugging Face eager against our lazy Trace.

``--model gpt2-small`` (default): GPT-2-small shapes (random init, 12 layers × 12 heads, d = 768,
positions up to 8,192); ``--model smollm2``: the offline SmolLM2-135M (real weights, 30 layers × 9
heads reading 3 key/value heads, rotary positions, an 8,192-token context). One sequence of L random
tokens, on the CPU. For each L, in a fresh process each:

* **HF eager**: ``GPT2Model(..., output_attentions=True)``, which returns every head's L×L
  probabilities, then reading one head out of them;
* **lazy Trace**: our from-scratch forward with the ``sdpa`` backend (it keeps hidden states and one
  logsumexp per query row), then recovering one chosen head's full L×L probabilities from q, k and
  the logsumexp.

Peak memory is the resident memory above the level before the forward (sampled every millisecond,
glibc returning large blocks to the OS so RSS follows live memory); time is wall time of forward +
one head. Where Hugging Face's attentions alone (layers × heads × L² × 4 bytes) would not fit in
this machine's memory it is not run, and the table says how much it would need. Writes a plot next
to the JSON (PNG through ``vl-convert-python``, a dependency).

    .venv/bin/python benchmarks/long_inputs.py [--lengths 512 1024 2048 4096 8192] [--out benchmarks/results]
    .venv/bin/python benchmarks/long_inputs.py --model smollm2 [--lengths 2048 4096 8192] [--out ...]

Results go to ``OUT/long_inputs.json`` (GPT-2-small; the app's Cost page reads the committed one) or
``OUT/long_inputs_smollm2.json``, with the plot beside them; without ``--out``, OUT is a new temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forward import PeakRSS  # benchmarks/ is on sys.path when run as a script
from report import out_folder

from probes import scratch
from probes.families import family_of
from probes.models import Encoding, LocalModel

LAYER, HEAD = 5, 3  # the head recovered in both paths
GIB = 2**30


def gpt2_small() -> LocalModel:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_positions=8192, n_embd=768, n_layer=12, n_head=12)
    config._attn_implementation = "eager"
    hf = GPT2Model(config).eval()  # no LM head on either side: logits are not attention
    hf.requires_grad_(False)
    return LocalModel(name="gpt2-small shapes", location="random init, in memory", family=family_of(config),
                      hf=hf, tokenizer=None, config=hf.config)


def smollm2() -> LocalModel:
    from probes.models import load  # probes.load's model here (its .hf), not a served one

    return load("smollm2")


MODELS = {"gpt2-small": (gpt2_small, [512, 1024, 2048, 4096, 8192], "long_inputs"),
          "smollm2": (smollm2, [2048, 4096, 8192], "long_inputs_smollm2")}


def encoding(m: LocalModel, n: int) -> Encoding:
    ids = torch.randint(0, m.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(n))
    return Encoding(ids, torch.ones_like(ids), None, [[]], ["random"], [None], [None])


def hf_head(m: LocalModel, enc: Encoding) -> torch.Tensor:
    with torch.inference_mode():  # the base model: no LM head on either side, logits are not attention
        out = m.hf.base_model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, output_attentions=True)
    return out.attentions[LAYER][0, HEAD]


def lazy_head(m: LocalModel, enc: Encoding) -> torch.Tensor:
    trace = scratch.forward(m, enc, backend="sdpa", logits=False)
    return trace.attention(LAYER, HEAD)


def child(name: str, path: str, n: int) -> None:
    m = MODELS[name][0]()
    scratch.build(m)
    enc = encoding(m, n)
    fn = hf_head if path == "hf" else lazy_head
    fn(m, encoding(m, 16))  # warm-up: first-call set-up of the kernels is not what we measure
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        head = fn(m, enc)
        seconds = time.perf_counter() - t0
    assert head.shape == (n, n) and torch.allclose(head.sum(-1), torch.ones(n), atol=1e-4)
    print(json.dumps(dict(peak=mem.extra, seconds=seconds, row0=head[n - 1, : min(n, 8)].tolist())))


def run_child(name: str, path: str, n: int) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, __file__, "--child", name, path, str(n)], env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        return dict(error=(out.stderr.strip().splitlines() or ["killed"])[-1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    return info["MemAvailable"]


def plot(rows: list[dict], out: Path, stem: str = "long_inputs", model: str = "GPT-2-small shapes") -> None:
    import altair as alt
    import pandas as pd

    data = []
    for r in rows:
        if r.get("hf_peak") is not None:
            data.append(dict(tokens=r["tokens"], path="HF eager, output_attentions", GiB=r["hf_peak"] / GIB))
        data.append(dict(tokens=r["tokens"], path="lazy Trace (sdpa + logsumexp)", GiB=r["lazy_peak"] / GIB))
        data.append(dict(tokens=r["tokens"], path="layers × heads × L² (fp32)", GiB=r["attention_bytes"] / GIB))
    skipped = [r["tokens"] for r in rows if r.get("hf_peak") is None]
    title = alt.TitleParams(
        f"Peak memory to inspect every head, {model} (CPU)",
        subtitle=[f"HF eager not run at {', '.join(map(str, skipped))} tokens: its attentions alone do not fit"]
        if skipped else [])
    chart = (
        alt.Chart(pd.DataFrame(data), title=title)
        .mark_line(point=True)
        .encode(x=alt.X("tokens:Q", scale=alt.Scale(type="log", base=2),
                        axis=alt.Axis(values=[r["tokens"] for r in rows])),
                y=alt.Y("GiB:Q", scale=alt.Scale(type="log"), title="GiB (log scale)"),
                color=alt.Color("path:N", title=None, legend=alt.Legend(orient="bottom", direction="vertical")))
        .properties(width=520, height=320)
    )
    chart.save(out / f"{stem}.html")
    try:
        chart.save(out / f"{stem}.png", scale_factor=2)
    except Exception as exc:  # noqa: BLE001 - vl-convert missing: the HTML plot is still written
        print(f"(no PNG: {exc})")


def replot(out: Path) -> None:
    plot(json.loads((out / "long_inputs.json").read_text()), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(MODELS), default="gpt2-small")
    parser.add_argument("--lengths", type=int, nargs="+",
                        help="default: 512 … 8192 (gpt2-small), 2048 … 8192 (smollm2)")
    parser.add_argument("--out", type=Path, help="folder for the JSON and the plot (default: a new temporary folder)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return

    build, lengths, stem = MODELS[args.model]
    lengths = args.lengths or lengths
    m = build()
    layers, heads = m.n_layers, m.n_heads
    weights = sum(p.numel() * p.element_size() for p in m.hf.parameters())
    del m
    budget = available_bytes()
    print(f"{args.model} ({layers} layers × {heads} heads), CPU, torch {torch.__version__}; one head recovered: "
          f"layer {LAYER}, head {HEAD}; memory available {budget / GIB:.1f} GiB; peaks are above the loaded model "
          f"({weights / GIB:.2f} GiB of fp32 weights)")
    header = (f"{'tokens':>6} | {'L² attentions':>13} | {'HF peak':>9} | {'HF s':>6} | {'lazy peak':>9} | "
              f"{'lazy s':>6} | {'memory ×':>8}")
    print(header)
    print("-" * len(header))
    rows = []
    for n in lengths:
        attention_bytes = 4 * layers * heads * n * n
        row: dict[str, Any] = dict(tokens=n, attention_bytes=attention_bytes, hf_peak=None, hf_seconds=None)
        if attention_bytes * 1.3 < budget:
            hf = run_child(args.model, "hf", n)
            if "error" in hf:
                row["hf_error"] = hf["error"]
            else:
                row.update(hf_peak=hf["peak"], hf_seconds=hf["seconds"])
        else:
            row["hf_error"] = f"needs > {attention_bytes * 1.3 / GIB:.0f} GiB: not run"
        lazy = run_child(args.model, "lazy", n)
        if "error" in lazy:
            raise SystemExit(f"the lazy path failed at {n} tokens: {lazy['error']}")
        row.update(lazy_peak=lazy["peak"], lazy_seconds=lazy["seconds"])
        rows.append(row)
        hf_cells = (f"{row['hf_peak'] / GIB:>7.2f}Gi | {row['hf_seconds']:>6.1f}" if row["hf_peak"] is not None
                    else f"{'—':>9} | {'—':>6}")
        ratio = f"{row['hf_peak'] / row['lazy_peak']:>7.1f}×" if row["hf_peak"] is not None else f"{'—':>8}"
        print(f"{n:>6} | {attention_bytes / GIB:>11.2f}Gi | {hf_cells} | {row['lazy_peak'] / GIB:>7.2f}Gi | "
              f"{row['lazy_seconds']:>6.1f} | {ratio}" + (f"   HF: {row['hf_error']}" if "hf_error" in row else ""),
              flush=True)
    by_n = {r["tokens"]: r for r in rows}
    if 1024 in by_n and by_n[1024]["hf_peak"]:
        ratio = by_n[1024]["hf_peak"] / by_n[1024]["lazy_peak"]
        print(f"goal ≥ 10× less peak memory at 1,024 tokens: {'met' if ratio >= 10 else 'NOT met'} ({ratio:.1f}×)")
    if 8192 in by_n:
        peak, goal = by_n[8192]["lazy_peak"] / GIB, 2 if args.model == "smollm2" else 4
        print(f"goal 8,192 tokens under {goal} GiB: {'met' if peak < goal else 'NOT met'} ({peak:.2f} GiB); "
              f"HF: {by_n[8192].get('hf_error', 'ran')}")
    out = out_folder(args.out)
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=2))
    plot(rows, out, stem, "GPT-2-small shapes" if args.model == "gpt2-small" else "SmolLM2-135M")
    print(f"wrote {out / (stem + '.json')} and the plot beside it")


if __name__ == "__main__":
    main()
