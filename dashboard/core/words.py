"""Words for people: every identifier the app shows (a measure, a probe or one of its labels, a source or a
backend, a table's column) said in words, and numbers as people read them. One dictionary, :data:`WORDS`, and
one function, :func:`said`, that every page's menus, chart titles, legends, tooltips and table headers go through;
an identifier it does not know is shown as it is. No Streamlit here: the charts use it too.

Downloads (CSV, JSON) keep the raw identifiers: they are for programs, and match the CLI's tables."""

from __future__ import annotations

import math
import re

import pandas as pd

WORDS: dict[str, str] = {
    # what taking a head out changes (probes.effects.measures.ABOUT has each in a sentence)
    "loss": "loss on the text",
    "top_changed": "share of top predictions changed",
    "logit_diff": "change of the logit difference",
    "hidden_change": "change of the hidden states",
    "token_change": "change of the query token",
    "embedding_change": "change of the sentence embedding",
    # numbers per head or per cell
    "weight": "attention weight",
    "norm": "value-weighted norm",
    "rollout": "rollout",
    "rescaled": "weight without the first token",
    "true_weight": "true weight",
    "ablation": "ablation effect",
    "share": "share",
    "diff": "second text − first",
    "a": "first text",
    "b": "second text",
    "above_random": "above random",
    "contribution": "term",
    "cells": "cells",
    "peak": "largest weight",
    "tokens": "tokens",
    "gain": "gain over the baseline",
    # the probes' tables
    "probe": "probe",
    "label": "label",
    "score": "score",
    "baseline": "baseline",
    "n": "examples",
    "mean_attention": "mean attention",
    "control_attention": "attention on controls",
    "importance": "importance",
    "offset": "most attended offset",
    "positional": "positional",
    "direction": "direction",
    "model": "model",
    "n_layers": "layers",
    "n_heads": "heads",
    "rank": "rank",
    "query_token": "query",
    "key_token": "key",
    "snippet": "snippet",
    # positional labels (probes.heads.positional)
    "previous": "previous token",
    "next": "next token",
    "self": "the token itself",
    "first": "first token",
    "fixed offset": "one fixed offset (Voita et al.)",
    "sink": "attention sink (first token)",
    # Find heads' margin grid (dashboard/app_pages/find/)
    "margin": "margin over the other word",
    # Generate's settings (dashboard/app_pages/generate/)
    "new_tokens": "new tokens",
    "top_k": "top-k",
    "top_p": "top-p",
    "against": "weight on the other word",
    "entropy": "entropy",
    "distance": "mean distance",
    "special": "special tokens",
    "punctuation": "punctuation",
    # induction labels (probes.heads.induction)
    "previous_token": "previous token",
    "next_token": "next token",
    "duplicate_token": "duplicate token",
    "duplicate_token_bidirectional": "duplicate token (either side)",
    "induction": "induction",
    "induction_bidirectional": "induction (either side)",
    # pattern classes (probes.heads.patterns)
    "vertical": "vertical",
    "diagonal": "diagonal",
    "vertical+diagonal": "vertical and diagonal",
    "block": "block",
    "heterogeneous": "heterogeneous",
    # lexical relations (probes.heads.semantic)
    "same-lexname": "same WordNet category",
    # held-out verdicts (probes.evidence.probes)
    "selection_score": "score on the half heads are chosen on",
    "heldout_score": "held-out score",
    "heldout_n": "held-out examples",
    "heldout_low": "held-out low",
    "heldout_high": "held-out high",
    "baseline_heldout": "baseline, held out",
    "verdict": "verdict",
    "said": "verdict in words",
    "chosen": "chosen",
    "split_seed": "split seed",
    "unrelated": "unrelated (controls)",
    # sources and backends
    "hf": "Hugging Face",
    "scratch": "ours",
    # the Parity page's per-head table and massive activations
    "layer": "layer",
    "head": "head",
    "attention_max_abs_diff": "attention max |Δ|",
    "hidden_max_abs_diff": "hidden states max |Δ|",
    "hidden_max_rel_diff": "hidden states max |Δ| ÷ scale",
    "dimension": "dimension",
    "value": "value",
    "token": "token",
    "position": "position",
    "times_median": "× median",
    # the Circuit page's tables
    "sender_layer": "sender layer",
    "sender_head": "sender head",
    "receiver_layer": "receiver layer",
    "receiver_head": "receiver head",
    "kind": "into",
    "baseline_mean": "random mean",
    "baseline_sd": "random sd",
    "above": "sd above random",
    "pattern_shift": "shift of the attention pattern",
    "pattern_change": "largest change of one weight",
    "cells_change": "change of the cells' weight",
    # the Cost page's tables
    "path": "path",
    "seconds": "seconds",
    "seconds_per_token": "seconds per token",
    "attention_bytes": "attention held",
    "peak_bytes": "peak memory",
    "cache_bytes": "cache",
    "formula_bytes": "cache by the formula",
    "peak_GiB": "peak memory (GiB)",
    "attention_MiB": "attention held (MiB)",
    "MiB": "size (MiB)",
    "context": "context (tokens)",
    "steps": "steps",
    # What if it attended less? (dashboard/app_pages/kv/)
    "policy": "policy",
    "policies": "policies",
    "budget": "budget (keys)",
    "perplexity": "perplexity",
    "kv_bytes": "KV cache held",
    "full_kv_bytes": "full KV cache",
    "saved": "memory saved",
    "seen_fraction": "keys read",
    "loss_change": "loss change (nats)",
    "mass": "attention on the kept keys",
    "kv_head": "key/value head",
    "query_heads": "query heads",
    # composition's noise floor (probes.evidence.edges.composition_floors)
    "random_low": "random matrices, low (95 %)",
    "random_high": "random matrices, high (95 %)",
}

# The terms a student meets first, each in one line: shown beside the term (a widget's help, a caption) where a page
# first uses it
GLOSSARY: dict[str, str] = {
    "perplexity": "perplexity: exp of the mean next-token loss, about how many tokens the model hesitates between at "
                  "each step (1 is certain; lower is better)",
    "H2O": "H2O (Heavy-Hitter Oracle, Zhang et al. 2023): keeps the newest keys and the older ones that have "
           "received the most attention so far",
    "held-out": "held-out: items kept aside while a head is chosen, then used only to judge it, so the verdict is "
                "not the choice's own luck",
    "floor": "noise floor: the largest effect that chance alone gives (random weights, or a corruption that should "
             "change nothing); an effect counts only above it",
}


def gloss(term: str) -> str:
    """The one line of :data:`GLOSSARY` that says ``term`` (``KeyError`` for a term it does not hold: a page asks
    only for these)."""
    return GLOSSARY[term]

# Universal Dependencies relations (the syntactic probe's labels: "nsubj (dep→head)")
RELATIONS = {
    "acl": "clause modifying a noun", "advcl": "adverbial clause", "advmod": "adverb modifier",
    "amod": "adjective modifier", "appos": "apposition", "aux": "auxiliary", "case": "case marker",
    "cc": "coordinating conjunction", "ccomp": "clausal complement", "compound": "compound", "conj": "conjunct",
    "cop": "copula", "csubj": "clausal subject", "dep": "unspecified", "det": "determiner",
    "discourse": "discourse element", "dobj": "direct object", "expl": "expletive", "iobj": "indirect object",
    "mark": "subordinating marker", "mwe": "multiword expression", "neg": "negation", "nmod": "noun modifier",
    "nsubj": "nominal subject", "nsubjpass": "passive nominal subject", "nummod": "numeric modifier",
    "obj": "object", "obl": "oblique nominal", "parataxis": "clauses side by side", "poss": "possessive",
    "punct": "punctuation", "xcomp": "open clausal complement",
    # subtypes, each its own label (and counted in its base relation too): Clark et al.'s poss is nmod:poss
    "nmod:poss": "possessive (Clark et al.'s poss)", "nmod:tmod": "temporal modifier", "nmod:npmod": "noun phrase as "
    "adverb", "obl:tmod": "temporal oblique", "obl:npmod": "noun phrase as oblique", "acl:relcl": "relative clause",
    "compound:prt": "phrasal verb particle", "det:predet": "predeterminer", "cc:preconj": "preconjunct",
    "nsubj:pass": "passive nominal subject", "aux:pass": "passive auxiliary", "csubj:pass": "passive clausal subject",
}
_RELATION = re.compile(r"^(?P<rel>[a-z]+(?::[a-z]+)?) \((?P<way>dep→head|head→dep)\)$")
_OFFSET = re.compile(r"^offset(?P<n>[+-]\d+)$")
_VERSUS = re.compile(r"^(?P<a>\S+) vs (?P<b>\S+)$")


def said(identifier: object) -> str:
    """``identifier`` in words (``"token_change"`` -> ``"change of the query token"``, ``"offset-1"`` ->
    ``"previous token"``, ``"hf vs scratch/eager"`` -> ``"Hugging Face vs ours (eager)"``), or as it is when the
    dictionary does not know it (a relation keeps its name, with its meaning beside it)."""
    name = str(identifier)
    if name in WORDS:
        return WORDS[name]
    offset = _OFFSET.match(name)
    if offset:
        n = int(offset["n"])
        steps = f"{abs(n)} token{'s' if abs(n) > 1 else ''} {'back' if n < 0 else 'ahead'}"
        if abs(n) == 1:  # beside the "previous"/"next" labels in one menu: the same words, told apart
            return f"{'previous' if n < 0 else 'next'} token ({steps})"
        return steps
    relation = _RELATION.match(name)
    if relation:
        base, _, subtype = relation["rel"].partition(":")
        meaning = RELATIONS.get(relation["rel"]) or (f"{RELATIONS[base]}, {subtype}" if subtype and base in RELATIONS
                                                     else None)
        way = "dependent → head" if relation["way"] == "dep→head" else "head → dependent"
        return f"{relation['rel']}{', ' + meaning if meaning and meaning != relation['rel'] else ''} ({way})"
    versus = _VERSUS.match(name)
    if versus:
        return f"{said(versus['a'])} vs {said(versus['b'])}"
    kind, _, what = name.partition(": ")
    if what in WORDS:  # an importance table's label: "ablation: hidden_change"
        return f"{kind}: {WORDS[what]}"
    if name.startswith("scratch/"):  # a Trace's source: our pass, with its backend
        return f"ours ({name.split('/', 1)[1]})"
    if name.startswith("unrelated|"):
        return f"unrelated (controls of {said(name.split('|', 1)[1])})"
    return name


def opening(identifier: object) -> str:
    """:func:`said` at the start of a sentence: its first letter a capital (the rest as it is: "Hugging Face")."""
    words = said(identifier)
    return words[:1].upper() + words[1:]


def versus(reference: str, candidate: str) -> str:
    """What a parity check compared (two Traces' sources), in words: ``"Hugging Face vs ours (eager)"``."""
    return f"{said(reference)} vs {said(candidate)}"


def difference(x: float | None, digits: int = 1) -> str:
    """A difference (max |Δ|) as people read it: "0 (identical)" when it is exactly 0, "n/a" when there is
    nothing to compare, else its value in scientific notation (``digits`` after the point)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return "0 (identical)" if x == 0 else f"{x:.{digits}e}"


UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")
BLANK = "—"  # a cell with no value (None, NaN) in a table people read


def size(n_bytes: float | None) -> str:
    """A number of bytes in the largest binary unit that keeps it at 1 or more: "512 bytes", "585 KiB",
    "1.71 MiB" (three significant figures)."""
    if n_bytes is None or (isinstance(n_bytes, float) and math.isnan(n_bytes)):
        return BLANK
    value, unit = float(n_bytes), 0
    while abs(value) >= 1024 and unit < len(UNITS) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{int(value):,} bytes"
    return f"{value:.3g} {UNITS[unit]}" if value < 1000 else f"{value:,.0f} {UNITS[unit]}"



def readable(frame: pd.DataFrame, keep: tuple[str, ...] = ()) -> tuple[pd.DataFrame, dict[str, object]]:
    """A table as people read it, and the columns left out of it: columns whose value is the same in every row
    (of a table of two rows or more: probe, model, layers…; not those in ``keep``) are dropped and returned as
    ``{column: value}`` (said once above the table), columns with no value at all are dropped, byte counts
    (``*_bytes``) become sizes ("585 KiB"), a missing value in a column that has some is :data:`BLANK`, and every
    column is renamed to its words (:func:`said`). The frame given is not changed (its CSV keeps the raw names)."""
    shown = frame.dropna(axis="columns", how="all")
    constant = {}
    if len(shown) > 1:
        for name in shown.columns:
            column = shown[name]
            if name not in keep and column.notna().all() and column.astype(str).nunique() == 1:
                constant[name] = column.iloc[0]
        shown = shown.drop(columns=list(constant))
    out = {}
    for name, column in shown.items():
        if str(name).endswith("_bytes"):
            column = column.map(size)
        elif column.isna().any():
            if column.dtype.kind == "f":
                column = column.map(lambda x: BLANK if pd.isna(x) else f"{x:.4g}")
            else:
                column = column.astype(object).where(column.notna(), BLANK)
        words = said(name)
        out[words if words not in out else str(name)] = column.to_numpy()
    return pd.DataFrame(out, index=shown.index), constant
