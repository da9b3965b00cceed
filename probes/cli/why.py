"""``python -m probes why``: why a head puts its weight where it does (QK attribution: the numbers of
:mod:`probes.effects.why`, said in the words of :mod:`probes.explain.why`)."""

from __future__ import annotations

import argparse
import json
import sys

from .common import MODEL_HELP, index, load_model, loading_options, positive, text_arg, threads_option


def token_index(model, text: str, pair: str | None, given: str, what: str) -> tuple[int, str | None]:
    """A token named on the command line: a number (ASCII digits) is its index among the text's tokens; anything
    else is a word, the first piece of its first occurrence in ``text``. Returns the index and a note when a word
    has several pieces."""
    from ..errors import BadOption
    from ..tokens import word_positions

    enc = model.encode(text, pair)
    tokens = [t for t, real in zip(enc.tokens[0], enc.attention_mask[0].bool().tolist(), strict=True) if real]
    if given.isascii() and given.isdigit():  # '²' and '٣' are digits to str.isdigit: here they are words
        return int(given), None
    found = word_positions(tokens, text, given)
    if not found:
        shown = " ".join(t.text for t in tokens)
        raise BadOption(f"--{what} {given!r} is not a word of the text (its tokens: {shown}): give a word of the "
                        "text or a token number")
    note = None
    if len(found) > 1:
        pieces = ", ".join(f"{tokens[i].text!r} ({i})" for i in found)
        note = (f"--{what} {given!r} is {len(found)} tokens on {model.name}: {pieces}; the first is used (give a "
                "token number for another)")
    return found[0], note


def records(frame) -> list[dict]:
    """A table as JSON rows: NaN (a share of a score that is not positive) and inf (an unturned band's wavelength)
    become null, which JSON has; NaN and Infinity are not JSON."""
    import math

    return [{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
            for row in frame.to_dict("records")]


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..effects.why import qk_attribution
    from ..errors import EmptyInput
    from ..explain import why as words
    from ..jobs import check_outputs, write_file

    if not args.text.strip():
        raise EmptyInput("the text is empty: give a sentence (--text)")
    # the files asked for, checked (and claimed) before the model loads: a bad path is one line, not a lost run
    check_outputs({"--csv": args.csv, "--bands-csv": args.bands_csv}, args.force,
                  notify=lambda message: print(f"note: {message}", file=sys.stderr))
    model = load_model(args)
    query, q_note = token_index(model, args.text, args.pair, args.query, "query")
    key, k_note = token_index(model, args.text, args.pair, args.key, "key")
    for note in (q_note, k_note):
        if note:
            print(f"note: {note}", file=sys.stderr)
    why = qk_attribution(model, args.text, args.layer, args.head, query, key, pair=args.pair)
    top = why.top(args.top)
    if args.csv is not None:
        write_file(Path(args.csv), why.frame().to_csv(index=False).encode(), "--csv")
        print(f"wrote {len(why.frame())} terms to {args.csv}", file=sys.stderr)
    if args.bands_csv is not None:
        if why.bands is None:
            print(f"note: {why.model} has no rotary bands (its positions are a learned table: the position "
                  "embedding's terms are in --csv); --bands-csv is not written", file=sys.stderr)
        else:
            bands = why.band_table()
            bands["label"] = bands.group.map(words.labelled_band_groups(why).set_index("group").label)
            write_file(Path(args.bands_csv), bands.to_csv(index=False).encode(), "--bands-csv")
            print(f"wrote {len(bands)} rotary bands to {args.bands_csv}", file=sys.stderr)
    content, position = why.position_split()
    if args.json:
        print(json.dumps(dict(model=why.model, layer=why.layer, head=why.head, query=query, key=key,
                              query_token=why.tokens[query], key_token=why.tokens[key], score=why.score,
                              weight=why.weight, sum_of_parts=why.total, delta=why.delta, bound=why.bound,
                              top=records(top[["query_part", "key_part", "contribution", "share"]]),
                              positions=why.positions, offset=why.offset, reading=words.reading(why),
                              content=content, position=position,
                              band_groups=records(words.labelled_band_groups(why)) if why.bands is not None else None,
                              bands=records(why.band_table()) if why.bands is not None else None,
                              grid=records(why.grid(args.grid)), grid_caption=words.grid_caption(why, args.grid)),
                         ensure_ascii=False))
        return 0
    print(f"{why.model}, head {why.layer}.{why.head}: query {why.tokens[query]!r} (token {query}) on key "
          f"{why.tokens[key]!r} (token {key}): score {why.score:.4g} (scale · q·k, before the softmax), weight "
          f"{why.weight:.3f}")
    print(f"reading: {words.reading(why)}")
    if why.bands is not None:
        print(f"by rotary frequency band ({len(why.bands)} bands; grouped by how far each turns across the text's "
              f"{len(why.tokens)} tokens):")
        for row in words.labelled_band_groups(why).itertuples():
            if row.group == "unrotated":
                waves = "never turned"
            elif row.bands == 1:
                waves = f"wavelength {row.wavelength_min:.3g} tokens"
            else:
                waves = f"wavelength {row.wavelength_min:.3g}–{row.wavelength_max:.3g} tokens"
            print(f"  {row.label}, {waves}: {row.contribution:+.4f} (content {row.content:+.4f}, "
                  f"position {row.position:+.4f}), {words.pushes(row.contribution, why.score, amount=False)}")
    print(f"the {len(top)} largest of {len(why.parts)} × {len(why.parts)} terms (what wrote the query × what wrote "
          "the key):")
    width = max(len(name) for name in why.parts)
    for rank, row in enumerate(top.itertuples(), start=1):
        print(f"  {rank:>2}. query: {row.query_part:<{width}}  × key: {row.key_part:<{width}}  "
              f"{row.contribution:+10.4f}  {words.pushes(row.contribution, why.score, amount=False)}")
    print(f"in buckets: {words.grid_caption(why, args.grid)}")
    print(f"sum of parts = score (|Δ| {why.delta:.2g}, {why.delta / why.bound if why.bound else 0.0:.1g} of the "
          f"score's scale {why.bound:.3g})")
    return 0


def add_parser(sub) -> None:
    """The ``why`` subcommand."""
    from ..models import OFFLINE_DEFAULT

    p = sub.add_parser("why", help="split one attention score into what wrote its query and its key",
                       description="QK attribution: head LAYER.HEAD's pre-softmax score of the query token on the key "
                       "token, split exactly into query part × key part terms (embeddings, every earlier head's and "
                       "MLP's output, biases), the norms frozen at their scale in this pass. Prints position against "
                       "content (rotary models: by frequency band), the largest terms, the bucketed grid in words, "
                       "and checks that the parts sum to the model's own score.")
    p.add_argument("--model", default=OFFLINE_DEFAULT, help=MODEL_HELP)
    p.add_argument("--text", type=text_arg, required=True)
    p.add_argument("--pair", type=text_arg, help="a second sentence (BERT sentence pairs)")
    p.add_argument("--layer", type=index, required=True)
    p.add_argument("--head", type=index, required=True)
    p.add_argument("--query", type=text_arg, required=True,
                   help="the query token: a word of the text (its first piece) or a token number")
    p.add_argument("--key", type=text_arg, required=True,
                   help="the key token: a word of the text (its first piece) or a token number")
    p.add_argument("--top", type=positive, default=10, help="terms to print (default: 10)")
    p.add_argument("--csv", help="write every term to this CSV file (share: of the score, blank when the score is "
                   "not positive)")
    p.add_argument("--bands-csv", help="rotary models: write the score by frequency band to this CSV file (band, "
                   "frequency, wavelength, contribution, content, position, share, group, label)")
    p.add_argument("--grid", type=positive, default=3,
                   help="heads or MLPs named on their own in the bucketed grid, at most (default: 3)")
    p.add_argument("--force", action="store_true", help="replace --csv and --bands-csv if they exist")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    loading_options(p)
    threads_option(p, "batch")
    p.set_defaults(func=main)
