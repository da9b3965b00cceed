"""``python -m probes kv``: what a text's perplexity becomes when the KV cache forgets (:mod:`probes.kv`): each policy
over one text, a layer at a time by default (``--method layers``: :func:`probes.kv.stream.run_masked`, the same
numbers as token by token, many times faster) or streamed token by token through the evicting cache (``--method
stream``: :func:`probes.kv.stream.run_stream`), and with ``--per-head`` each key/value head cut alone."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from ..kv.policies import syntax
from .common import Count, glibc_threshold, load_model, loading_options, positive, text_arg, threads_option

DEFAULT_POLICIES = "full,window:256,sinks:4+window:252,h2o:256,snapkv:256"
DEFAULT_EWT = 512  # tokens of the shipped EWT text when no text is given
# the command line's names of the library's methods (probes.kv.stream.METHODS); the first is the default. Every
# policy runs by either (tests/kv/test_stream.py holds them to 1e-10 in float64), so there is no fallback to make.
METHODS = {"layers": "masked", "stream": "streamed"}
HOW = {"layers": "read a layer at a time (the same numbers as token by token)", "stream": "read one at a time"}
ewt_tokens = Count(2, why="no model reads that many tokens")


def work(args: argparse.Namespace) -> str:
    """The kind of work (:mod:`probes.threads`): token by token is ``stream``, a layer at a time ``batch``."""
    return "stream" if args.method == "stream" else "batch"


class Bar:
    """A progress bar on stderr (tqdm, drawn only once a run has taken a second: a short run prints nothing), one
    bar over every policy's run; stdout stays the table's or the JSON's."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc = total, desc
        self.bar: Any = None  # made at the first step: a refusal before it stays one line

    def part(self, base: int, desc: str | None = None) -> Callable[[int, int], None]:
        """The ``progress(done, total)`` of one run that starts ``base`` steps into the bar."""
        def progress(done: int, total: int) -> None:
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=self.total, desc=self.desc, unit="step", file=sys.stderr, leave=False, delay=1.0)
            if desc is not None and self.bar.desc != f"{desc}: ":
                self.bar.set_description(desc, refresh=False)
            self.bar.update(base + done - self.bar.n)  # drawn as tqdm paces it (never before its delay)
        return progress

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _size(n: int) -> str:
    """Bytes as people read them (1.5 MiB, 4.8 KiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} B"


def _room(model) -> int:
    """The most tokens of plain text that fit the model's context, less the special tokens its tokenizer adds (a
    BOS)."""
    plain = len(model.tokenizer("a", add_special_tokens=False)["input_ids"])
    return model.max_tokens - max(0, model.encode("a").input_ids.shape[1] - plain)


def _text(args: argparse.Namespace) -> tuple[str | None, str]:
    """The text typed or read before any model loads (None: the EWT text, made with the model's tokenizer) and
    where it comes from, as the JSON says it."""
    from ..errors import EmptyInput

    if args.text_file is not None:
        from ..datasets.utf8 import read_text

        text = read_text(args.text_file)
        if not text.strip():
            raise EmptyInput(f"{args.text_file} is empty: give a file with some text in it")
        return text, f"file:{args.text_file}"
    if args.text is not None:
        if not args.text.strip():
            raise EmptyInput("the text is empty: give a text (--text), a UTF-8 file (--text-file) or --ewt N")
        return args.text, "text"
    return None, "ewt-dev"


def _table(streamed: list, full) -> None:
    rows = [("policy", "tokens", "perplexity", "Δ vs full", "KV cache", "of full", "seen", "seconds")]
    for s in streamed:
        delta = "" if full is None else "—" if s is full else (f"{s.perplexity - full.perplexity:+,.2f} "
                                         f"({(s.perplexity / full.perplexity - 1) * 100:+.1f} %)")
        rows.append((s.policy, str(s.tokens), f"{s.perplexity:,.3f}", delta, _size(s.kv_bytes),
                     f"{s.kept_fraction * 100:.1f} %", f"{s.seen_fraction * 100:.1f} %", f"{s.seconds:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
              .rstrip())


def _float64(model):
    """``model`` in float64 (``--dtype float64``: the proof's precision), or a refusal for a served model."""
    import torch

    from ..errors import BadOption

    if not hasattr(model, "cast"):
        raise BadOption("--dtype float64 needs a model held here: leave out --ray, or leave out --dtype")
    return model.cast(torch.float64)


def _worst(rows: list[dict]) -> list[dict]:
    """Rows by loss change, most hurt first (layer, head: the order of equal changes)."""
    return sorted(rows, key=lambda r: (-r["loss_change"], r["layer"], r["kv_head"]))


def main(args: argparse.Namespace) -> int:
    from ..errors import BadOption
    from ..kv.policies import parse_list
    from ..kv.stream import check_decoder, head_effects, stream
    from ..kv.texts import ewt_text

    policies = parse_list(args.policies)  # before loading a model: one line, at once
    if args.per_head and not any(p.cuts for p in policies):
        raise BadOption("--per-head cuts each head with a policy: give one besides full (e.g. --policies "
                        "full,window:256)")
    text, source = _text(args)
    model = load_model(args)
    check_decoder(model)  # the model's facts: a served model's too
    if args.dtype == "float64":
        model = _float64(model)
    if text is None:
        room = _room(model)
        if args.ewt is not None and args.ewt > room:
            raise BadOption(f"--ewt {args.ewt} is more than {model.name}'s context holds ({room} tokens of text): "
                            f"give --ewt {room} or fewer")
        n = args.ewt if args.ewt is not None else min(DEFAULT_EWT, room)
        text, source = ewt_text(model, n), f"ewt-dev:{n}"

    n_tokens = model.encode(text, truncate=True).input_ids.shape[1]  # the bar's length (the runs refuse a long text)
    cut = [p for p in policies if p.cuts]
    steps = n_tokens if args.method == "stream" else model.n_layers  # a run's progress: its tokens, or its layers
    bar = Bar(len(policies) * steps + (n_tokens + len(cut) * model.n_layers * model.n_kv_heads
                                       if args.per_head else 0), "kv")
    try:
        streamed = []
        for i, policy in enumerate(policies):
            streamed.append(stream(model, text, policy, method=METHODS[args.method],
                                   progress=bar.part(i * steps, policy.name)))
        effects = None
        if args.per_head:
            effects = head_effects(model, text, policies, progress=bar.part(len(policies) * steps, "per head"))
    finally:
        bar.close()

    full = next((s for s, p in zip(streamed, policies, strict=True) if not p.cuts), None)
    by_policy = {p.name: _worst([r for r in effects.rows if r["policy"] == p.name]) for p in policies} \
        if effects is not None else {}
    if args.json:
        out: dict = dict(model=model.name, tokens=streamed[0].tokens, text_source=source, method=args.method,
                         policies=[])
        for s in streamed:
            entry = dict(policy=s.policy, tokens=s.tokens, perplexity=float(s.perplexity), kv_bytes=int(s.kv_bytes),
                         full_kv_bytes=int(s.full_kv_bytes), kept_fraction=float(s.kept_fraction),
                         seen_fraction=float(s.seen_fraction), seconds=float(s.seconds))
            if effects is not None:
                entry["per_head"] = by_policy[s.policy]
            out["policies"].append(entry)
        if effects is not None:
            out["full_loss"] = float(effects.full_loss)
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"{model.name}: {streamed[0].tokens} tokens ({source}) {HOW[args.method]}, the KV cache kept by each policy")
    _table(streamed, full)
    print("\nKV cache: the most the cache held at once (keys and values, every layer), against the full cache; seen: "
          "the share of past keys each query read")
    if effects is not None:
        print(f"\nper head: each key/value head cut alone (every other head keeps its full cache); the full pass's "
              f"loss {effects.full_loss:.4f} nats; the {args.top} most hurt of {model.n_layers * model.n_kv_heads} "
              "per policy")
        for policy in cut:
            print(f"{policy.name}:")
            print(f"  {'head':>6}  {'query heads':<14} {'Δ loss':>9}  {'mass kept':>9}  {'seen':>6}")
            for r in by_policy[policy.name][:args.top]:
                heads = ",".join(str(h) for h in r["query_heads"])
                print(f"  {r['layer']:>3}.{r['kv_head']:<2}  {heads:<14} {r['loss_change']:>+9.4f}  "
                      f"{r['mass'] * 100:>7.1f} %  {r['seen_fraction'] * 100:>4.1f} %")
        print("\nΔ loss: the mean next-token loss with only that head cut, less the full pass's (nats); mass kept: "
              "the share of its query heads' attention on the keys the policy keeps")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("kv", help="perplexity when the KV cache forgets: cache policies (window, sinks, H2O, "
                       "SnapKV, ...) over a text, and each head cut alone",
                       description="Read one text through a KV cache that evicts as each policy says (probes.kv), and "
                       "print per policy the streamed perplexity, its change from full, the most the cache held "
                       "against the full cache, the share of past keys each query saw, and the time; with "
                       "--per-head, each key/value head cut alone and the heads that hurt most. By default each "
                       "layer reads the whole text at once with the keys the policy leaves each query (--method "
                       "layers); --method stream reads it token by token through the evicting cache, as StreamingLLM "
                       "evaluates: the same numbers, many times slower. Decoders only; the text must fit the model's "
                       "context (each token keeps its own position).")
    p.add_argument("--model", default="smollm2", help="a decoder: short name, hub id or local directory "
                   "(default: smollm2)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--text", type=text_arg, help="the text")
    source.add_argument("--text-file", metavar="FILE", help="a UTF-8 text file, read whole")
    source.add_argument("--ewt", type=ewt_tokens, metavar="N", help="the shipped text (UD English-EWT's dev "
                        f"sentences, whole ones up to N tokens); the default when no text is given, with N = "
                        f"{DEFAULT_EWT} or the model's context if that is shorter")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated: {syntax()} (default: "
                   f"{DEFAULT_POLICIES})")
    p.add_argument("--per-head", action="store_true", help="also cut each key/value head alone with each policy "
                   "(but full) and rank the heads by the loss change: one pass per head and policy")
    p.add_argument("--top", type=positive, default=10, help="heads to print per policy with --per-head (default: 10; "
                   "--json lists every head)")
    p.add_argument("--method", choices=tuple(METHODS), default="layers", help="layers (default): each layer over the "
                   "whole text with the keys each policy leaves each query; stream: token by token through the "
                   "evicting cache (the same numbers, within 1e-10 in float64)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="the model's precision (float64: the proof's, slower)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    loading_options(p)
    threads_option(p, work)
    glibc_threshold(p, "one text's layers and policies, start to end, in a process that ends with the run: a fixed "
                    "threshold's page faults cost a long text more time than the memory it hands back mid-run is "
                    "worth (benchmarks/kv_cli.py --threshold measures both)")
    p.set_defaults(func=main)
