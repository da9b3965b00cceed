"""Links written by the app before its pages became folders (stop 59, commit bbffcaf), and what each one drew then:
the record a restructured app is held to (tests/dashboard/test_links.py). ``python tests/links.py OUT``
draws every link with the app of the checkout it runs in and writes what it drew to OUT (JSON): run in a checkout of
bbffcaf, it made ``tests/dashboard/links_bbffcaf.json`` (whose charts' tables named their datasets then: the names,
hashes of numbers that differ in float32 from one CPU to another, were taken out of the record afterwards).

What a view is, here: every element the page and the sidebar drew, in order, as a reader sees it: its kind, its
words (labels, messages, captions, headings), a widget's value and options, a chart's title as drawn and the columns
and rows of its tables, a table's columns and rows. Not pixels (the browser tests look at those) and not the
numbers inside charts (the pages' own tests compare those with the library's)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: apptest, as the tests put it (conftest.py)

# every page, with the parameters of its own part of the link; short texts and small runs, so that the whole set
# draws in a few minutes on two cores (the pages' own tests draw the long and the slow cases)
LINKS: dict[str, dict[str, str]] = {
    "explore-opens-on-the-story": {},
    "explore-a-cell-clicked": {"layer": "1", "head": "2", "query": "3", "key": "7", "hide_first": "1"},
    "explore-norms-by-word": {"layer": "2", "head": "5", "query": "10", "colour": "norms", "words": "1"},
    "explore-rollout": {"layer": "3", "head": "0", "query": "4", "colour": "rollout",
                        "text": "The keys to the cabinet are on the table."},
    "explore-chinese-story-on-smollm2": {"model": "smollm2", "text": "小明把苹果给了小红，因为她很饿"},
    "explore-a-pair": {"text": "The cat sat.", "pair": "It was tired.", "layer": "4", "head": "1", "query": "5",
                       "source": "scratch", "backend": "sdpa"},
    "find-a-question": {"page": "find", "ask_query": "she", "ask_key": "Xiaohong", "ask_against": "Xiaoming",
                        "find_measure": "norm", "count_sink": "1"},
    "qkv": {"page": "qkv", "layer": "2", "head": "3", "query": "4"},
    "generate": {"page": "generate", "model": "smollm2", "prompt": "The cat sat on the", "new_tokens": "3",
                 "step": "1"},
    "generate-sampled": {"page": "generate", "model": "smollm2", "prompt": "Once", "new_tokens": "2", "sample": "1",
                         "seed": "3", "temperature": "0.7", "top_k": "5", "top_p": "0.9"},
    "lens-layers": {"page": "lens", "model": "smollm2", "text": "one two three four five"},
    "lens-heads": {"page": "lens", "model": "smollm2", "text": "one two three four five", "lens_view": "heads",
                   "layer": "3", "lens_from": "0"},
    "parity": {"page": "parity", "text": "The keys to the cabinet are on the table."},
    "heads-not-run": {"page": "heads", "probe": "syntactic", "items": "60"},
    "heads-run-from-the-link": {"page": "heads", "probe": "positional", "items": "6", "label": "self",
                                "ran": "heads"},
    "effects": {"page": "effects", "text": "She sang to him at dawn.", "effects_measure": "loss"},
    "effects-mean-on-a-measure": {"page": "effects", "text": "She waited for him by the door.",
                                  "effects_measure": "top_changed", "effects_how": "zero", "query": "1"},
    "circuit-weights": {"page": "circuit", "layer": "2", "head": "3", "circuit_grid": "weights q",
                        "convention": "transformerlens"},
    "circuit-patched": {"page": "circuit", "layer": "1", "head": "3", "text": "She sang to him.",
                        "patch_text": "He sang to her.", "patch_into": "v", "ran": "patch"},
    "cost": {"page": "cost"},
    "kv": {"page": "kv", "model": "smollm2", "kv_tokens": "40", "kv_policies": "window,h2o", "kv_budgets": "8,16",
           "kv_policy": "h2o", "kv_budget": "8", "layer": "2", "head": "1"},
    "kv-sidebar-text": {"page": "kv", "model": "smollm2", "kv_text": "sidebar", "text": "one two three four five six",
                        "kv_policies": "sinks", "kv_budgets": "4", "kv_sinks": "2", "kv_policy": "sinks",
                        "kv_budget": "4"},
    "a-link-with-problems": {"page": "nowhere", "layer": "99", "head": "-1", "kv_policies": "lru", "items": "x",
                             "colour": "plaid", "ran": "everything", "temperature": "0"},
}


def _words(node: Any) -> dict[str, Any]:
    """One element as a reader sees it (see the module's text)."""
    from apptest import drawn

    kind = node.type
    out: dict[str, Any] = {"kind": kind}
    if kind == "vega_lite_chart":
        from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

        from dashboard.core.charts import title_lines

        spec = drawn(node)
        title = spec.get("title")
        out["title"] = title if isinstance(title, str) or title is None else {
            part: title_lines(title.get(part)) for part in ("text", "subtitle") if title.get(part) is not None}
        # a dataset's name is a hash of its numbers, which move in the last bits of float32 with the CPU's vector
        # kernels: the record keeps each table's columns and its number of rows
        out["tables"] = sorted([list(frame.columns), len(frame)] for frame in (
            convert_arrow_bytes_to_pandas_df(d.data.data) for d in node.proto.datasets))
        return out
    if kind in ("arrow_data_frame", "dataframe", "table"):
        frame = node.value
        out["columns"], out["rows"] = [str(c) for c in frame.columns], len(frame)
        return out
    for name in ("label", "body", "text", "help", "placeholder"):
        value = getattr(node.proto, name, None) if hasattr(node, "proto") and node.proto is not None else None
        if isinstance(value, str) and value:
            out[name] = value
    try:
        value = node.value
    except Exception:  # noqa: BLE001 - an element with no value (a button's is its click, a chart's its spec)
        value = None
    if isinstance(value, (str, int, float, bool)) or value is None:
        if value is not None:
            out["value"] = value
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float, bool)) for v in value):
        out["value"] = list(value)
    options = getattr(node.proto, "options", None) if hasattr(node, "proto") and node.proto is not None else None
    if options is not None and not isinstance(options, str):
        out["options"] = [str(o) for o in options]
    return out


def snapshot(at: Any) -> dict[str, Any]:
    """What the app drew after a run: the sidebar's and the page's elements in order (see :func:`_words`), and the
    link it wrote back."""
    from streamlit.testing.v1.element_tree import Block

    from dashboard.core.ui import WIDE

    def walk(block: Any) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        for child in block.children.values():
            if isinstance(child, Block):
                label = getattr(getattr(child.proto, child.type, None), "label", "") if child.proto else ""
                inner = walk(child)
                if (child.key or "").startswith(WIDE):  # a box that only scrolls its chart sideways
                    got.extend(inner)  # on a phone (ui.chart): no element a reader sees, its chart is where it is
                elif label or inner:
                    got.append({"block": child.type, **({"label": label} if label else {}), "children": inner})
            else:
                got.append(_words(child))
        return got

    link = {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}
    return {"sidebar": walk(at.sidebar), "main": walk(at.main), "link": dict(sorted(link.items()))}


def normalised(view: Any) -> Any:
    """A view with what changes from run to run taken out: times a message says, and memory addresses."""
    if isinstance(view, dict):
        return {k: normalised(v) for k, v in view.items()}
    if isinstance(view, list):
        return [normalised(v) for v in view]
    if isinstance(view, str):
        view = re.sub(r"\d+(?:\.\d+)? ?(?:ms|s)\b", "<time>", view)
        return re.sub(r"0x[0-9a-f]+", "<address>", view)
    return view


def visible(view: Any) -> Any:
    """A view less the placeholders that draw nothing (``st.empty``: where a progress bar stood while work ran, which
    depends on what an earlier run left in the cache), and the blocks left with nothing in them."""
    if isinstance(view, list):
        kept = [visible(v) for v in view if not (isinstance(v, dict) and v.get("kind") == "empty")]
        return [v for v in kept if not (isinstance(v, dict) and "block" in v and not v["children"]
                                        and "label" not in v)]
    if isinstance(view, dict):
        return {k: visible(v) for k, v in view.items()}
    return view


# a figure in a sentence: an integer, a decimal, or a number in e-notation (how the app writes residuals)
RESIDUAL = 1e-4  # a residual printed in e-notation under this is rounding noise (float32's last bits, float64's 1e-15)
RELATIVE = 1e-5  # float32's relative error over a model's few hundred roundings (a few hundred × 1.2e-7)
_FIGURE = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w.])")


def _same_figure(then: str, now: str) -> bool:
    """Two figures a sentence printed agree as float32 on two CPUs would: an integer (a count, a step, a layer) is
    the same integer; a residual in e-notation under 1e-4 is rounding noise whatever its digits (the last bits of
    float32, or float64's ~1e-15); a decimal is within one unit of its last printed digit, or 1e-5 of its size
    (float32's relative error over a model's few hundred roundings, which a figure of 10,000 shows in its second
    decimal)."""
    if then == now:
        return True
    if "." not in then + now and "e" not in then + now:
        return False
    a, b = float(then), float(now)
    if "e" in then and "e" in now and max(abs(a), abs(b)) < RESIDUAL:
        return True
    return abs(a - b) <= max(_unit(then), _unit(now)) + RELATIVE * max(abs(a), abs(b))


def _unit(figure: str) -> float:
    """One unit of a figure's last printed digit: 0.01 for ``0.72``, 1e-7 for ``4e-07``, 1e-7 for ``2.5e-06``."""
    mantissa, _, exponent = figure.partition("e")
    return float(10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])))


def _same_words(then: str, now: str) -> bool:
    """The same sentence: the same words around figures that agree (:func:`_same_figure`)."""
    a, b = _FIGURE.split(then), _FIGURE.split(now)
    if len(a) != len(b):
        return False
    return all(x == y if i % 2 == 0 else _same_figure(x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)))


def same_view(then: Any, now: Any) -> bool:
    """``now`` shows what ``then`` showed: the same elements, widgets, tables and link, and the same words, whose
    figures may differ as float32 differs between two CPUs (:func:`_same_figure`); the app's float64 figures are
    the ones that prove, and its own tests hold those to 1e-10."""
    if isinstance(then, dict) and isinstance(now, dict):
        return then.keys() == now.keys() and all(same_view(then[k], now[k]) for k in then)
    if isinstance(then, list) and isinstance(now, list):
        return len(then) == len(now) and all(same_view(a, b) for a, b in zip(then, now, strict=True))
    if isinstance(then, str) and isinstance(now, str):
        return _same_words(then, now)
    return bool(then == now) and type(then) is type(now)


def draw(params: dict[str, str]) -> dict[str, Any]:
    """What the app draws when ``params`` opens it (a new session)."""
    from apptest import open_app

    return json.loads(json.dumps(normalised(snapshot(open_app(**params)))))  # as the record holds it: lists, not tuples


if __name__ == "__main__":
    out = {name: draw(params) for name, params in LINKS.items()}
    Path(sys.argv[1]).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
