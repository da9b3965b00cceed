"""``python -m probes generate``: write with the from-scratch KV cache and prove it against full passes."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..generation import GENERATE_BACKENDS
from .common import (
    index,
    load_model,
    loading_options,
    positive,
    seed,
    temperature,
    text_arg,
    threads_option,
    top_k,
    top_p,
)


def main(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from .. import generation as g
    from ..errors import BadOption
    from ..head_index import check_index, check_layer

    if not args.prompt.strip():  # before loading a model: one line, at once
        raise BadOption("the prompt is empty: give the start of a text for the model to continue (--prompt)")
    model = load_model(args)
    g.check_decoder(model)
    layer = args.layer if args.layer is not None else model.n_layers - 1
    check_layer(layer, model.n_layers, model.name, "--layer")
    check_index(args.head, model.n_heads, "--head", f"{model.name}'s heads")
    sampling = g.Sampling(args.sample, args.seed, args.temperature, args.top_k, args.top_p)
    gen = g.generate(model, args.prompt, args.max_new_tokens, sampling, stop_at_eos=not args.no_eos,
                     backend=args.backend)
    if gen.note:
        print(f"note: {gen.note}", file=sys.stderr)
    proof = g.prove(model, gen, "hf")
    hf_ids = None if sampling.sample else g.hf_generate(model, args.prompt, gen.n_steps)
    same = None if hf_ids is None else hf_ids == gen.new_ids
    steps: list[dict[str, Any]]
    steps = [dict(step=s, query=gen.tokens[gen.query_position(s)].text,
                  wrote=gen.tokens[gen.query_position(s) + 1].text,
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


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="write text with the from-scratch KV cache and prove its attention equals "
                       "a full forward pass", description="Write text one token at a time with our KV cache (prefill "
                       "the prompt, then one token per step), show where a head looks at each step and what the "
                       "cache holds, and prove every step's attention row and logits equal one full forward pass "
                       "(and, greedy, that Hugging Face's generate writes the same tokens). Decoders only.")
    p.add_argument("--model", default="smollm2", help="a decoder: short name, hub id or local directory "
                   "(default: smollm2)")
    p.add_argument("--prompt", type=text_arg, required=True, help="the start of the text")
    p.add_argument("--max-new-tokens", type=positive, default=20)
    p.add_argument("--layer", type=index, help="layer whose head is shown per step (default: the last)")
    p.add_argument("--head", type=index, default=0)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy (seeded)")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--temperature", type=temperature, default=1.0)
    p.add_argument("--top-k", type=top_k, default=0, help="sample among the k most likely tokens (0: all)")
    p.add_argument("--top-p", type=top_p, default=1.0, help="sample within the smallest set reaching this mass")
    p.add_argument("--no-eos", action="store_true", help="keep writing past the end-of-text token")
    p.add_argument("--backend", choices=GENERATE_BACKENDS, default="eager",
                   help="attention of each step: eager (the formula) or flash (our Triton kernel; needs CUDA, "
                   "else eager runs and a note says so)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    loading_options(p)
    threads_option(p, "stream")  # a token at a time
    p.set_defaults(func=main)
