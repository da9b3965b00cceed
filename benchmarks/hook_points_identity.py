"""Before/after identity of the from-scratch pass's users (issue 41, part 5: named hook points replace
``scratch.outputs``'s switches). Runs parity (minilm and tiny random GPT-2, Llama, Mistral, BERT checkpoints),
every single-head ablation, path patching, QK attribution, the logit lens, direct logit attribution, head
importance and generation (generate + prove) on small inputs, and saves every resulting tensor and table.

    .venv/bin/python benchmarks/hook_points_identity.py save /tmp/hooks_before.pt     # on the old code
    .venv/bin/python benchmarks/hook_points_identity.py compare /tmp/hooks_before.pt  # on the new code

``compare`` recomputes everything and prints one row per result: ``what | before == after`` (bit for bit:
``torch.equal``, ``DataFrame.equals``, ``==``; NaN equal to NaN at the same place). It only calls the public
functions of ``probes`` that both versions share, with one thread (a float sum split another way would differ).
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TEXT = "The cat sat on the mat, and the dog watched it."
CORRUPT = "The dog sat on the mat, and the cat watched it."
REFERENCE = ["A small bird sang in the tree.", "The river ran past the old mill."]
SKIP = {"step_seconds"}  # wall-clock: not a computed number


def flatten(obj, prefix: str, out: dict) -> None:
    """Every number, tensor, table and string of a result, by a dotted name."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            if f.name not in SKIP and not callable(getattr(obj, f.name)):
                flatten(getattr(obj, f.name), f"{prefix}.{f.name}", out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            flatten(v, f"{prefix}.{k}", out)
    elif isinstance(obj, (list, tuple)) and obj and isinstance(obj[0], (torch.Tensor, list, tuple, dict)):
        for i, v in enumerate(obj):
            flatten(v, f"{prefix}.{i}", out)
    elif isinstance(obj, torch.Tensor):
        out[prefix] = obj.detach().cpu().clone()
    elif isinstance(obj, np.ndarray):
        out[prefix] = torch.from_numpy(obj.copy())
    elif isinstance(obj, (pd.DataFrame, pd.Series)):
        out[prefix] = obj.copy()
    elif isinstance(obj, (int, float, str, bool, type(None))) or (isinstance(obj, (list, tuple))):
        out[prefix] = obj if not isinstance(obj, (list, tuple)) else [str(x) for x in obj]


def same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            nan = a.isnan()
            return torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])
        return torch.equal(a, b)
    if isinstance(a, (pd.DataFrame, pd.Series)):
        return a.equals(b) and list(getattr(a, "columns", [])) == list(getattr(b, "columns", []))
    if isinstance(a, float) and np.isnan(a):
        return np.isnan(b)
    return a == b


def compute() -> dict:
    torch.set_num_threads(1)
    from checkpoints import make_bert, make_gpt2, make_llama

    import probes
    from probes import generation, parity, scratch
    from probes.effects import ablation, attribution, importance, lens, path_patching, why

    out: dict = {}
    tmp = Path(tempfile.gettempdir()) / "hook-identity-checkpoints"  # one path: the models' names hold it
    shutil.rmtree(tmp, ignore_errors=True)
    models = {
        "minilm": probes.load("minilm"),
        "gpt2": probes.load(str(make_gpt2(tmp / "gpt2", n_layer=3))),
        "llama": probes.load(str(make_llama(tmp / "llama", num_hidden_layers=3))),
        "mistral": probes.load(str(make_llama(tmp / "mistral", family="mistral", sliding_window=4))),
        "bert": probes.load(str(make_bert(tmp / "bert-mlm", masked_lm=True))),
    }
    decoders = ("gpt2", "llama", "mistral")
    for name, model in models.items():
        enc = model.encode(TEXT)
        for backend in ("eager", "sdpa"):
            trace = scratch.forward(model, enc, backend=backend)
            flatten({k: getattr(trace, k) for k in ("hidden_states", "attn", "lse", "logits")},
                    f"{name}.forward[{backend}]", out)
            flatten(trace.attention(trace.n_layers - 1, None), f"{name}.forward[{backend}].last_layer", out)
            flatten(parity.check(model, TEXT, backend=backend), f"{name}.parity[{backend}]", out)
        flatten(parity.check(model, TEXT, dtype="float64"), f"{name}.parity[float64]", out)

        flatten(ablation.ablate_each(model, TEXT), f"{name}.ablate_each[zero]", out)
        flatten(ablation.ablate_each(model, TEXT, how="mean", reference=REFERENCE), f"{name}.ablate_each[mean]", out)
        flatten(ablation.ablate_each(model, TEXT, how="patch", other=CORRUPT), f"{name}.ablate_each[patch]", out)
        flatten(ablation.ablate_each(model, TEXT, batched=False), f"{name}.ablate_each[unbatched]", out)
        flatten(ablation.ablate(model, TEXT, [(0, 1), (1, 2)]), f"{name}.ablate[two heads]", out)
        flatten(ablation.head_means(model, REFERENCE), f"{name}.head_means", out)
        if name in decoders:
            flatten(ablation.ablate_each(model, TEXT, measures=["token_change"], position=3),
                    f"{name}.ablate_each[token_change@3]", out)

        last = model.n_layers - 1
        for into in ("q", "k", "v"):
            patched = path_patching.path_patch(model, TEXT, CORRUPT, (last, 1), into=into, cells=[(5, 2), (6, 1)],
                                               keep_patterns=True)
            flatten(patched, f"{name}.path_patch[{into}]", out)

        n = int(model.encode(TEXT).attention_mask.sum())
        got = why.qk_attribution(model, TEXT, last, 1, n - 2, n - 4 if name == "mistral" else 1)  # inside the window
        flatten(got, f"{name}.qk_attribution", out)
        flatten(got.frame(), f"{name}.qk_attribution.frame", out)
        flatten(why.senders_on_text(model, TEXT, last, 2, cells=4), f"{name}.senders_on_text", out)

        flatten(importance.gate_gradients(model, [TEXT, CORRUPT], projections=2), f"{name}.gate_gradients", out)
        flatten(importance.importance(model, [TEXT], projections=2), f"{name}.importance", out)

        if name in decoders:
            flatten(lens.logit_lens(model, TEXT, k=3), f"{name}.logit_lens", out)
            target = model.encode(" mat").input_ids[0, -1].item()
            other = model.encode(" dog").input_ids[0, -1].item()
            flatten(attribution.logit_attribution(model, TEXT, target, other), f"{name}.logit_attribution", out)
            gen = generation.generate(model, "The cat sat", 6)
            flatten(gen, f"{name}.generate", out)
            flatten(generation.prove(model, gen), f"{name}.prove", out)
            flatten(generation.prove(model, gen, reference="scratch"), f"{name}.prove[scratch]", out)
            sampled = generation.generate(model, "The dog", 5, generation.Sampling(sample=True, seed=3, top_k=20))
            flatten(sampled, f"{name}.generate[sampled]", out)
    return out


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "compare"):
        sys.exit(__doc__)
    results = compute()
    if sys.argv[1] == "save":
        torch.save(results, sys.argv[2])
        print(f"saved {len(results)} results to {sys.argv[2]}")
        return
    before = torch.load(sys.argv[2], weights_only=False)
    rows = [(what, what in results and same(value, results[what])) for what, value in before.items()]
    rows += [(what, False) for what in results if what not in before]
    width = max(len(w) for w, _ in rows)
    print(f"{'what':<{width}} | before == after")
    for what, equal in rows:
        print(f"{what:<{width}} | {'yes' if equal else 'NO'}")
    bad = [w for w, ok in rows if not ok]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} identical" + (f"; DIFFERENT: {', '.join(bad)}" if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
