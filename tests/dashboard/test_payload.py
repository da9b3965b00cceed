"""What a view change sends to the browser: the charts' tables go as Arrow at a few bytes a cell (not ~57),
with the same values, and the layer's small multiples travel as twelve small pictures (see
``benchmarks/bytes_per_change.py``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from apptest import open_app
from streamlit.dataframe_util import convert_anything_to_arrow_bytes

from dashboard.app_pages.explore import charts as explore_charts
from dashboard.core import charts, token_charts


def _arrow_bytes(chart) -> int:
    """The bytes of the chart's table as Streamlit ships it."""
    return len(convert_anything_to_arrow_bytes(chart.data))


def _marked_heads(arrow: bytes) -> list[str]:
    """The heads a small multiples' table (as Streamlit ships it) marks for the outline."""
    import pyarrow as pa

    table = pa.ipc.open_stream(arrow).read_all().to_pandas()
    return table.loc[table["marked"], "head"].astype(str).tolist()


def _window(n: int = 64, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.random((n, n)).astype(np.float32)
    tokens = [f"token{i}" for i in range(n)]
    return tokens, (w / w.sum(1, keepdims=True)).astype(np.float32)


def test_a_heatmap_window_ships_under_eleven_bytes_a_cell_not_fifty_seven():
    tokens, w = _window()
    chart = token_charts.attention_heatmap(tokens, w, "Layer 0, head 0", start=40, query=60)
    # 9 bytes a cell (two 1-byte positions, two 1-byte label codes, the float32 weight, the title's 1-byte code, the
    # outlined row's bit), each label once, a schema; it was 254,856 bytes (query and key strings, int64 positions
    # and float64 weights in every cell)
    assert _arrow_bytes(chart) < 11 * 64 * 64


def test_the_small_multiples_ship_as_twelve_small_pictures():
    w = np.random.default_rng(1).random((12, 64, 64)).astype(np.float32)
    w /= w.sum(-1, keepdims=True)
    assert _arrow_bytes(explore_charts.layer_multiples(w, layer=3)) < 12 * 64 * 64  # under a byte a cell: it was 1.7 MB


def test_compact_tables_hold_the_same_values():
    tokens, w = _window(5)
    full = token_charts.attention_frame(tokens, w, causal=True, start=300)  # positions past 255: two bytes
    small = charts.compact(full)
    assert list(small.dtypes.astype(str)) == ["uint16", "uint16", "category", "category", "float32"]
    assert small.astype({"query": object, "key": object}).astype(full.dtypes).equals(full)
    assert small["weight"].tolist() == full["weight"].tolist()  # exactly the fp32 weights: the tooltip's digits
    exact = pd.DataFrame({"weight": [1 / 3, 0.5]})  # a word-level sum float32 cannot hold keeps float64
    assert charts.compact(exact)["weight"].dtype == np.float64
    signed = charts.compact(pd.DataFrame({"offset": [-3, 4]}))
    assert signed["offset"].dtype == np.int8 and signed["offset"].tolist() == [-3, 4]


@pytest.mark.numeric
def test_the_heatmap_spec_still_reads_the_same():
    tokens, w = _window(3)
    spec = token_charts.attention_heatmap(tokens, w, "t", query=1).to_dict()
    rows = [r for rows in spec["datasets"].values() for r in rows]
    assert rows[4] == {"query_pos": 1, "key_pos": 1, "query": "1: token1", "key": "1: token1",
                       "weight": float(w[1, 1]), "marked": True, "title": "t"}  # the fp32 weight exactly
    assert spec["encoding"]["tooltip"][2] == {"field": "weight", "format": ".6f", "type": "quantitative",
                                              "title": "attention weight"}


def test_a_head_change_on_a_long_text_sends_the_heads_cells_and_the_small_pictures():
    at = open_app(text="the cat sat on the mat " * 20)  # 122 tokens: a 64-token window
    before = {c.proto.spec: c.proto.SerializeToString() for c in at.get("vega_lite_chart")}
    at.sidebar.slider(key="w_head").set_value(4)
    at.run()
    assert not at.exception and at.header[0].value == "minilm: layer 0, head 4"
    after = {c.proto.spec: c.proto.SerializeToString() for c in at.get("vega_lite_chart")}
    heatmap = [spec for spec in after if '"cell"' in spec]  # its spec as it was: the browser swaps its table
    assert len(heatmap) == 1 and heatmap[0] in before and before[heatmap[0]] != after[heatmap[0]]
    multiples = [spec for spec in after if '"multiples"' in spec]
    assert len(multiples) == 1
    (chart,) = [c for c in at.get("vega_lite_chart") if c.proto.spec == multiples[0]]
    marked = [d for d in chart.proto.datasets]  # the new head outlined: its row marked in the table
    assert len(marked) == 1 and _marked_heads(marked[0].data.data) == ["0.4"]
    changed = sum(len(b) for spec, b in after.items() if before.get(spec) != b)
    # the heatmap, the bars and the twelve pictures again: 230 KB before (82 KB: since the pictures wrap to the page's
    # width, the spec says how to place them, about 1 KB, and the token axes how to thin their labels; 87 KB since the
    # heatmap's title and outlined row are in its table, a byte and a bit a cell, so that its spec stays the same)
    assert changed < 90_000
