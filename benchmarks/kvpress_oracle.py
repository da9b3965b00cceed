"""Oracle: which prompt tokens NVIDIA kvpress keeps, per layer and per key/value head, on a real model.

Runs four kvpress presses on one prompt and dumps the kept token positions, so that another implementation
of the same scoring rules can be checked against kvpress itself:

- ``streaming_llm``      StreamingLLMPress(compression_ratio=r, n_sink=S)
- ``snapkv``             SnapKVPress(compression_ratio=r, window_size=W, kernel_size=5)
- ``tova``               TOVAPress(compression_ratio=r)
- ``observed_attention`` ObservedAttentionPress(compression_ratio=r)
- ``snapkv_sdpa``, ``tova_sdpa``: SnapKV and TOVA again on a model loaded with attn_implementation="sdpa",
  where the layer returns no attention weights and kvpress recomputes the window attention itself.

The other four use attn_implementation="eager" (ObservedAttentionPress needs the layer's attention weights).

Each press is applied exactly as kvpress's own pipeline applies it: ``with press(model):`` around a prefill
``model.model(input_ids, past_key_values=DynamicCache(), use_cache=True)``; kvpress's forward hook calls
``press.compress`` on every attention layer. The script wraps the press instance's ``score`` and ``compress``
(delegating to kvpress's own methods, changing nothing) to record, per layer (``module.layer_idx``),
``scores.topk(n_kept, dim=-1).indices`` as ScorerPress.compress computes it. It then checks that:

- the keys kvpress actually kept are the rows of the full keys at exactly those indices, in that order;
- after the forward, every layer of the cache holds n_kept keys, and they are the ones compress returned;
- the hidden states each layer's press saw equal those of an uncompressed prefill (compressing layer l
  does not change the prefill of layer l+1), and are the input layernorm of the residual stream;
- for the eager presses, a plain re-statement of each scoring rule from the attention weights keeps the
  same sets as kvpress.

Run it in its own venv (kvpress 0.5.5 pins transformers<5.3; keep it away from the project's .venv):

    python3 -m venv /work/kvpress-venv
    /work/kvpress-venv/bin/python -m pip install -c constraints.txt \\
        "torch==2.13.0" "kvpress==0.5.5" "transformers>=4.56,<5.3"

    HF_HUB_OFFLINE=1 /work/kvpress-venv/bin/python benchmarks/kvpress_oracle.py \\
        --model /root/.cache/attention-probes/smollm2/fp32 --text-file benchmarks/kv_prompt.txt \\
        --ratio 0.5 --window-size 64 --n-sink 4 --max-tokens 300 --out benchmarks/results/kvpress_kept.json

Output JSON: kvpress/transformers/torch versions, model, ratio, input_ids, n_kept, and per press its params,
attn_implementation, checks, ``kept``: [layer][kv head] -> sorted kept token positions, and ``cut_gap``:
[layer][kv head] -> score of the last kept minus the first dropped token (a tiny gap is a near-tie that another
float implementation may break the other way).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
import torch.nn.functional as F
import transformers
from kvpress import ObservedAttentionPress, SnapKVPress, StreamingLLMPress, TOVAPress
from kvpress.utils import compute_n_kept
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache


def load_model(model_dir: str, attn_implementation: str):
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=attn_implementation, local_files_only=True
    )
    return model.eval()


def attention_modules(model):
    return [layer.self_attn for layer in model.model.layers]


def row_positions(full: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """For (heads, n, d) full keys and (heads, m, d) kept keys: (heads, m) positions of each kept row in full."""
    equal = (kept[:, :, None, :] == full[:, None, :, :]).all(-1)  # (heads, m, n)
    if not bool((equal.sum(-1) == 1).all()):
        raise AssertionError("a kept key row does not match exactly one row of the full keys")
    return equal.int().argmax(-1)


def baseline_prefill(model, input_ids: torch.Tensor) -> dict:
    """Uncompressed prefill: per layer, the hidden states the attention layer sees (what a press would see)."""
    seen = {}

    def hook(module, args, kwargs, output):
        seen[module.layer_idx] = kwargs["hidden_states"].detach().clone()

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in attention_modules(model)]
    try:
        with torch.no_grad():
            out = model.model(
                input_ids=input_ids, past_key_values=DynamicCache(), use_cache=True, output_hidden_states=True
            )
    finally:
        for handle in handles:
            handle.remove()
    # out.hidden_states[l] is the residual stream entering layer l; the press should see its input layernorm.
    with torch.no_grad():
        ln_err = max(
            (layer.input_layernorm(out.hidden_states[i]) - seen[i]).abs().max().item()
            for i, layer in enumerate(model.model.layers)
        )
    return {"seen": seen, "last_hidden": out.last_hidden_state, "layernorm_max_abs_diff": ln_err}


def run_press(model, press, input_ids: torch.Tensor) -> dict:
    """Prefill under ``press`` the way kvpress's pipeline does; record what ScorerPress.compress keeps."""
    cls = type(press)
    rec: dict[str, Any] = {"topk": {}, "scores": {}, "gathered": {}, "out_keys": {}, "hidden": {}, "attn": {},
                           "had_attentions": set()}

    def score(module, hidden_states, keys, values, attentions, kwargs):
        scores = cls.score(press, module, hidden_states, keys, values, attentions, kwargs)
        n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
        rec["topk"][module.layer_idx] = scores.topk(n_kept, dim=-1).indices[0].clone()
        rec["scores"][module.layer_idx] = scores[0].detach().clone()
        if attentions is not None:
            rec["had_attentions"].add(module.layer_idx)
            rec["attn"][module.layer_idx] = attentions[0].detach().clone()
        return scores

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        out_keys, out_values = cls.compress(press, module, hidden_states, keys, values, attentions, kwargs)
        rec["hidden"][module.layer_idx] = hidden_states.detach().clone()
        rec["gathered"][module.layer_idx] = row_positions(keys[0], out_keys[0])
        rec["out_keys"][module.layer_idx] = out_keys
        return out_keys, out_values

    press.score = score  # instance attributes shadow the class methods kvpress's hook calls via self
    press.compress = compress
    cache = DynamicCache()
    start = time.perf_counter()
    with torch.no_grad(), press(model):
        out = model.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
    rec["seconds"] = time.perf_counter() - start
    rec["cache"] = cache
    rec["last_hidden"] = out.last_hidden_state
    return rec


def reference_kept(name: str, attn: torch.Tensor, n_kv: int, n_kept: int, params: dict) -> list[list[int]]:
    """Each scoring rule restated plainly from one layer's (heads, n, n) attention weights."""
    heads, n, _ = attn.shape
    group = heads // n_kv
    if name == "streaming_llm":
        sink = params["n_sink"]
        keep = list(range(sink)) + list(range(n - (n_kept - sink), n))
        return [keep] * n_kv
    if name == "snapkv":
        w, k = params["window_size"], params["kernel_size"]
        s = attn[:, n - w :, : n - w].mean(1)  # (heads, n - w): mean over the last w queries
        padded = F.pad(s, (k // 2, k // 2))  # zero padding, always divided by k
        s = torch.stack([padded[:, j : j + n - w] for j in range(k)]).sum(0) / k
        s = s.view(n_kv, group, n - w).mean(1)
        return [sorted(s[h].topk(n_kept - w).indices.tolist() + list(range(n - w, n))) for h in range(n_kv)]
    if name == "tova":
        s = attn[:, n - 1, : n - 1].mean(0)  # last query, mean over every query head of the layer
        return [sorted(s.topk(n_kept - 1).indices.tolist() + [n - 1])] * n_kv
    if name == "observed_attention":
        s = attn.sum(1) / torch.arange(n, 0, -1, dtype=attn.dtype)  # key i is seen by n - i queries
        s = s.view(n_kv, group, n).mean(1)
        return [sorted(s[h].topk(n_kept).indices.tolist()) for h in range(n_kv)]
    raise ValueError(name)


def check_run(name: str, rec: dict, base: dict, n_layers: int, n_kv: int, n_kept: int, params: dict) -> dict:
    kept, order_ok, cache_ok, ref_diff = [], True, True, 0
    for layer in range(n_layers):
        topk = rec["topk"][layer]
        order_ok &= torch.equal(topk, rec["gathered"][layer])
        keys = rec["cache"].layers[layer].keys
        cache_ok &= keys.shape[2] == n_kept and torch.equal(keys, rec["out_keys"][layer])
        layer_kept = [sorted(topk[h].tolist()) for h in range(n_kv)]
        kept.append(layer_kept)
        if layer in rec["attn"]:
            ref = reference_kept(name, rec["attn"][layer], n_kv, n_kept, params)
            ref_diff += sum(a != b for a, b in zip(layer_kept, ref, strict=True))
    # Per layer and kv head, the score of the last kept minus the first dropped token: how close a set is to a
    # tie that another float implementation could legitimately break the other way.
    cut_gap = []
    for layer in range(n_layers):
        ranked = rec["scores"][layer].sort(dim=-1, descending=True).values
        cut_gap.append((ranked[:, n_kept - 1] - ranked[:, n_kept]).tolist())
    gap = min(min(g) for g in cut_gap)
    hidden_diff = max((rec["hidden"][i] - base["seen"][i]).abs().max().item() for i in range(n_layers))
    if not (order_ok and cache_ok):
        raise AssertionError(f"{name}: kept keys/cache do not match topk indices (order {order_ok}, cache {cache_ok})")
    checks = {
        "layer_got_attention_weights": len(rec["had_attentions"]) == n_layers,
        "cache_keys_are_topk_rows_in_topk_order": order_ok,
        "cache_len_equals_n_kept_every_layer": cache_ok,
        "press_hidden_vs_uncompressed_prefill_max_abs_diff": hidden_diff,
        "last_hidden_vs_uncompressed_max_abs_diff": (rec["last_hidden"] - base["last_hidden"]).abs().max().item(),
        "press_hidden_is_input_layernorm_max_abs_diff": base["layernorm_max_abs_diff"],
        "reference_rule_sets_differing": ref_diff if rec["attn"] else None,
        "min_score_gap_at_cut": gap,
        "prefill_seconds": round(rec["seconds"], 3),
    }
    return {"kept": kept, "cut_gap": cut_gap, "checks": checks, "scores": rec["scores"]}


def make_presses(ratio: float, window: int, n_sink: int) -> dict:
    return {
        "streaming_llm": ("eager", StreamingLLMPress(compression_ratio=ratio, n_sink=n_sink)),
        "snapkv": ("eager", SnapKVPress(compression_ratio=ratio, window_size=window, kernel_size=5)),
        "tova": ("eager", TOVAPress(compression_ratio=ratio)),
        "observed_attention": ("eager", ObservedAttentionPress(compression_ratio=ratio)),
        "snapkv_sdpa": ("sdpa", SnapKVPress(compression_ratio=ratio, window_size=window, kernel_size=5)),
        "tova_sdpa": ("sdpa", TOVAPress(compression_ratio=ratio)),
    }


def differing_sets(a: list, b: list) -> tuple[int, int]:
    pairs = [(x, y) for la, lb in zip(a, b, strict=True) for x, y in zip(la, lb, strict=True)]
    return sum(x != y for x, y in pairs), len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model directory (local files only)")
    parser.add_argument("--text-file", required=True)
    parser.add_argument("--ratio", type=float, required=True, help="compression_ratio: fraction of KV pairs pruned")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--window-size", type=int, default=64, help="SnapKV observation window")
    parser.add_argument("--n-sink", type=int, default=4, help="StreamingLLM sink tokens")
    parser.add_argument("--max-tokens", type=int, default=300)
    args = parser.parse_args()

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    t0 = time.perf_counter()

    tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    text = Path(args.text_file).read_text(encoding="utf-8")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][: args.max_tokens]
    input_ids = torch.tensor([ids], dtype=torch.long)
    n_tokens = len(ids)
    n_kept = compute_n_kept(n_tokens, args.ratio)

    presses = make_presses(args.ratio, args.window_size, args.n_sink)
    result = {
        "kvpress": version("kvpress"),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "model": args.model,
        "ratio": args.ratio,
        "input_ids": ids,
        "n_tokens": n_tokens,
        "n_kept": n_kept,
        "presses": {},
    }
    scores: dict[str, dict[int, torch.Tensor]] = {}
    for impl in ("eager", "sdpa"):
        model = load_model(args.model, impl)
        n_layers = model.config.num_hidden_layers
        n_kv = model.config.num_key_value_heads
        base = baseline_prefill(model, input_ids)
        for name, (press_impl, press) in presses.items():
            if press_impl != impl:
                continue
            params = dataclasses.asdict(press)
            rec = run_press(model, press, input_ids)
            entry = check_run(name.removesuffix("_sdpa"), rec, base, n_layers, n_kv, n_kept, params)
            scores[name] = entry.pop("scores")
            if name.endswith("_sdpa"):
                eager_scores = scores[name.removesuffix("_sdpa")]
                entry["checks"]["scores_vs_eager_max_abs_diff"] = max(
                    (scores[name][i] - eager_scores[i]).abs().max().item() for i in range(n_layers)
                )
            result["presses"][name] = {"params": params, "attn_implementation": impl, **entry}
        del model
    result["seconds_total"] = round(time.perf_counter() - t0, 2)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result) + "\n", encoding="utf-8")

    print(f"kvpress {result['kvpress']}  transformers {result['transformers']}  torch {result['torch']}")
    print(f"model {args.model}  tokens {n_tokens}  ratio {args.ratio}  n_kept {n_kept}")
    header = (
        f"{'press':<20} {'attn':<6} {'layers':>6} {'kv heads':>8} {'n_kept':>6} {'ref diff':>8} {'hid diff':>9}"
        f" {'min gap':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, entry in result["presses"].items():
        kept, checks = entry["kept"], entry["checks"]
        ref = checks["reference_rule_sets_differing"]
        print(
            f"{name:<20} {entry['attn_implementation']:<6} {len(kept):>6} {len(kept[0]):>8} "
            f"{len(kept[0][0]):>6} {'-' if ref is None else ref:>8} "
            f"{checks['press_hidden_vs_uncompressed_prefill_max_abs_diff']:>9.1e} "
            f"{checks['min_score_gap_at_cut']:>9.1e}"
        )
    for eager, sdpa in (("snapkv", "snapkv_sdpa"), ("tova", "tova_sdpa")):
        diff, total = differing_sets(result["presses"][eager]["kept"], result["presses"][sdpa]["kept"])
        score_diff = result["presses"][sdpa]["checks"]["scores_vs_eager_max_abs_diff"]
        print(f"{eager} vs {sdpa}: {diff} of {total} kept sets differ; scores max abs diff {score_diff:.1e}")
    print(f"total {result['seconds_total']} s; wrote {out}")


if __name__ == "__main__":
    main()
