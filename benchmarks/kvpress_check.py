"""Our prompt compression (:func:`probes.kv.compress.compress`) against NVIDIA kvpress 0.5.5's own kept tokens.

``benchmarks/kvpress_oracle.py`` (run in its own venv with kvpress) wrote ``benchmarks/results/kvpress_kept.json``:
the prompt's input_ids, the ratio, and for each press (streaming_llm, snapkv, tova, observed_attention on an eager
model; snapkv_sdpa, tova_sdpa on an sdpa one, where kvpress recomputes the window's attention itself) the kept
token positions ``kept[layer][kv_head]`` and ``cut_gap[layer][kv_head]``: kvpress's score of the last kept token
minus that of the first dropped one. Here, in the project's venv, the same model (the JSON names its folder; it is
the folder ``load("smollm2")`` resolves to) reads exactly those input_ids, three ways:

* ``hf eager``: the Hugging Face reference (:func:`probes.hf.forward`), every probability;
* ``scratch eager``: the from-scratch pass, every probability;
* ``scratch sdpa``: the from-scratch pass, lazy (probabilities recovered from one logsumexp per row);

and for each press and each Trace, ``compress(trace, press, ratio, n_sink, window)`` is compared with kvpress's
sets: how many of the layers × kv heads sets are identical; where one differs, the size of the symmetric difference
and kvpress's cut gap there (a gap below ``--tie`` is a near-tie: two float implementations may order the two
tokens either way), and our own gap at the cut (from :func:`probes.kv.compress.scores`).

    PYTHONPATH=. .venv/bin/python benchmarks/kvpress_check.py [--json benchmarks/results/kvpress_kept.json] \\
        [--tie 1e-6] [--out DIR]

Writes ``DIR/kvpress_check.txt`` (default DIR: a fresh temporary folder, printed; committed results are written
only when ``--out benchmarks/results`` is given).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import out_folder, publish  # noqa: E402

from probes import hf, scratch  # noqa: E402
from probes.encoding import Encoding  # noqa: E402
from probes.kv.compress import compress, n_kept, scores  # noqa: E402
from probes.models import load  # noqa: E402

SOURCES = ("hf eager", "scratch eager", "scratch sdpa")


def encoding(model, ids: list[int]) -> tuple[Encoding, str]:
    """The Encoding of exactly ``ids``: the model's own encode of the decoded text when it gives the same ids back
    (asserted), else one built from the ids."""
    text = model.tokenizer.decode(ids)
    try:
        enc = model.encode(text)
        if enc.input_ids[0].tolist() == ids:
            return enc, "m.encode(decoded text): ids identical"
    except Exception:  # noqa: BLE001 - fall back to the ids themselves
        pass
    t = torch.tensor([ids])
    return Encoding(t, torch.ones_like(t), None, [[]], [text], [None], [None]), "Encoding built from the ids"


def traces(model, enc: Encoding) -> dict:
    out: dict[str, Any] = {}  # name -> its Trace, name + " seconds" -> its time
    for name, make in (("hf eager", lambda: hf.forward(model, enc, logits=False)),
                       ("scratch eager", lambda: scratch.forward(model, enc, "eager", logits=False)),
                       ("scratch sdpa", lambda: scratch.forward(model, enc, "sdpa", logits=False))):
        t0 = time.perf_counter()
        out[name] = make()
        out[name + " seconds"] = time.perf_counter() - t0
    return out


def our_gap(trace, layer: int, head: int, press: str, keep: int, **kw) -> float:
    """Our score of the last kept minus the first dropped token, in one (layer, head)."""
    s = scores(trace, layer, press, **kw)[head].sort(descending=True).values
    return float(s[keep - 1] - s[keep])


def compare(ours: list, theirs: list, gaps: list, tie: float) -> dict:
    same, diffs = 0, []
    for layer, (la, lb) in enumerate(zip(ours, theirs, strict=True)):
        for head, (a, b) in enumerate(zip(la, lb, strict=True)):
            if a == sorted(b):
                same += 1
            else:
                sym = set(a) ^ set(b)
                diffs.append(dict(layer=layer, head=head, sym=len(sym), gap=gaps[layer][head],
                                  ours_only=sorted(set(a) - set(b)), theirs_only=sorted(set(b) - set(a))))
    total = sum(len(x) for x in theirs)
    near = [d for d in diffs if d["gap"] < tie]
    return dict(same=same, total=total, diffs=diffs, near=len(near), beyond=len(diffs) - len(near))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "kvpress_kept.json")
    parser.add_argument("--tie", type=float, default=1e-6, help="kvpress cut gaps below this are near-ties")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for kvpress_check.txt (default: a new temporary folder, printed)")
    args = parser.parse_args()
    out = out_folder(args.out)
    t_start = time.perf_counter()
    load_before = os.getloadavg()

    data = json.loads(args.json.read_text())
    ratio, ids = data["ratio"], data["input_ids"]
    presses = data["presses"]
    n_sink = presses["streaming_llm"]["params"]["n_sink"]
    window = presses["snapkv"]["params"]["window_size"]
    model = load(data["model"])
    try:
        from probes.models import _smollm2_path  # only to say which folder smollm2 is
        same_folder = Path(_smollm2_path()).resolve() == Path(data["model"]).resolve()
    except Exception:  # noqa: BLE001
        same_folder = None
    enc, how = encoding(model, ids)
    assert enc.input_ids[0].tolist() == ids
    n = len(ids)
    keep = n_kept(n, ratio)
    assert keep == data["n_kept"], (keep, data["n_kept"])
    made = traces(model, enc)

    lines = [f"kvpress {data['kvpress']} (transformers {data['transformers']}, torch {data['torch']}) against "
             f"probes.kv.compress (torch {torch.__version__}); {torch.get_num_threads()} threads, "
             f"{platform.processor() or 'CPU'}",
             f"model {data['model']} (load('smollm2') resolves to this folder: {same_folder}); "
             f"{model.n_layers} layers × {model.n_kv_heads} kv heads",
             f"prompt {n} tokens ({how}); ratio {ratio}, n_kept {keep} per head; n_sink {n_sink}, SnapKV window "
             f"{window}; near-tie: kvpress cut gap < {args.tie:g}",
             "traces: " + ", ".join(f"{s} {made[s + ' seconds']:.2f} s" for s in SOURCES),
             "",
             "| kvpress press | attn | our trace | identical sets | differing | near-ties | beyond ties | "
             "max sym. diff | kvpress gap at differing sets | smallest gap: kvpress / ours |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    worst = 0
    for name, entry in presses.items():
        press = name.removesuffix("_sdpa")
        for source in SOURCES:
            trace = made[source]
            ours = compress(trace, press, ratio, n_sink=n_sink, window=window)
            c = compare(ours, entry["kept"], entry["cut_gap"], args.tie)
            worst += c["beyond"]
            gaps = [d["gap"] for d in c["diffs"]]
            gap_text = f"{min(gaps):.1e} – {max(gaps):.1e}" if gaps else "–"
            theirs_min = min(min(g) for g in entry["cut_gap"])
            ours_min = min(our_gap(trace, layer, head, press, keep, n_sink=n_sink, window=window, ratio=ratio)
                           for layer in range(model.n_layers) for head in range(model.n_kv_heads))
            lines.append(f"| {name} | {entry['attn_implementation']} | {source} | {c['same']}/{c['total']} | "
                         f"{len(c['diffs'])} | {c['near']} | {c['beyond']} | "
                         f"{max((d['sym'] for d in c['diffs']), default=0)} | {gap_text} | "
                         f"{theirs_min:.1e} / {ours_min:.1e} |")
            for d in c["diffs"]:
                ours_gap = our_gap(trace, d["layer"], d["head"], press, keep, n_sink=n_sink, window=window,
                                   ratio=ratio)
                notes.append(f"  {name} vs {source}: layer {d['layer']} head {d['head']}: we keep "
                             f"{d['ours_only']}, kvpress {d['theirs_only']}; kvpress gap {d['gap']:.2e}, ours "
                             f"{ours_gap:.2e}")
    lines.append("")
    if notes:
        lines.append("differing sets (the tokens each side keeps that the other drops):")
        lines.extend(notes)
    lines.append(f"sets differing beyond near-ties, all presses and traces: {worst}")
    control = compare(compress(made["scratch eager"], "snapkv", ratio, n_sink=n_sink, window=window),
                      presses["tova"]["kept"], presses["tova"]["cut_gap"], args.tie)
    lines.append(f"control (the comparison can fail): our snapkv (scratch eager) against kvpress's tova sets: "
                 f"{control['same']}/{control['total']} identical")
    load_after = os.getloadavg()
    lines.append(f"took {time.perf_counter() - t_start:.0f} s; load average {load_before[0]:.2f} at the start, "
                 f"{load_after[0]:.2f} at the end")
    publish("\n".join(lines), out, "kvpress_check.txt")


if __name__ == "__main__":
    main()
