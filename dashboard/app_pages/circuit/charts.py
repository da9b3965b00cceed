"""The Circuit page's graph: the earlier heads that write into one head, by composition kind (Q, K, V)."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from dashboard.core.charts import HIGHLIGHT, MAX_WIDTH, MIN_WIDTH, titled

# px: the least a layer's column and a head's row are given, so two heads' names ("16.0" over "16.1", or beside
# "15.1") never touch: a phone's graph of 17 layers scrolls in its own box instead
LAYER_MIN, HEAD_ROW = 40, 28
KIND_COLOURS = {"q": "#08519c", "k": "#e6550d", "v": "#31a354"}  # Q-, K-, V-composition (and the patched input)


def circuit_graph(edges: pd.DataFrame, receiver: tuple[int, int], n_layers: int, n_heads: int,
                  title: str = "") -> alt.Chart:
    """One receiver head and its strongest senders as a small layered graph: every head at (layer, head), senders
    in their layer's column, one edge per (sender, kind) to the receiver, its width the ``value`` (an ``edges`` frame:
    sender_layer, sender_head, kind, value, label), coloured by kind (q, k, v). The layers drawn end at the receiver's
    (a sender is always earlier: no empty columns after it); the receiver's name sits to its right, clear of the
    edges that meet there and of the senders' names above them. A click on a head selects it (the selection
    ``head``: layer and head), so the page can open it on Explore."""
    r_layer, r_head = receiver
    lines = edges.assign(layer2=r_layer, head2=r_head, width=edges["value"].abs())
    reach = float(lines["width"].max()) if len(lines) else 0.0
    reach = reach if reach > 0 and np.isfinite(reach) else 1.0
    shown = min(r_layer + 1, n_layers)  # layers 0 … the receiver's
    x = alt.X("layer:Q", title="layer", scale=alt.Scale(domain=[-0.5, shown - 0.5]),
              axis=alt.Axis(values=list(range(shown)), format="d"))
    y = alt.Y("head:Q", title="head", scale=alt.Scale(domain=[n_heads - 0.5, -0.5]),
              axis=alt.Axis(values=list(range(n_heads)), format="d"))
    kinds = alt.Scale(domain=list(KIND_COLOURS), range=list(KIND_COLOURS.values()))
    edge = alt.Chart(lines.rename(columns={"sender_layer": "layer", "sender_head": "head"})).mark_rule(
        opacity=0.7).encode(x=x, y=y, x2="layer2:Q", y2="head2:Q",
                            strokeWidth=alt.StrokeWidth("width:Q", scale=alt.Scale(domain=[0, reach], range=[0.5, 9]),
                                                        legend=None),
                            color=alt.Color("kind:N", scale=kinds, title="into"),
                            tooltip=[alt.Tooltip("label:N", title="edge"), alt.Tooltip("value:Q", format="+.4f",
                                                                                           title="size")])
    heads = pd.concat([edges[["sender_layer", "sender_head"]].set_axis(["layer", "head"], axis=1),
                       pd.DataFrame({"layer": [r_layer], "head": [r_head]})]).drop_duplicates()
    heads["name"] = [f"{a}.{b}" for a, b in zip(heads["layer"], heads["head"], strict=True)]
    heads["role"] = np.where((heads["layer"] == r_layer) & (heads["head"] == r_head), "receiver", "sender")
    pick = alt.selection_point(name="head", fields=["layer", "head"], on="click", clear=False)
    node = alt.Chart(heads).mark_circle(size=220, cursor="pointer", stroke="white", strokeWidth=1.5).encode(
        x=x, y=y, color=alt.Color("role:N", scale=alt.Scale(domain=["receiver", "sender"],
                                                              range=[HIGHLIGHT, "#444444"]), title="head"),
        tooltip=[alt.Tooltip("name:N", title="head"), alt.Tooltip("role:N")]).add_params(pick)
    senders = alt.Chart(heads[heads.role == "sender"]).mark_text(dy=-14, fontSize=10).encode(x=x, y=y, text="name:N")
    receiving = alt.Chart(heads[heads.role == "receiver"]).mark_text(dx=14, align="left", fontSize=11,
                                                                      fontWeight="bold").encode(x=x, y=y, text="name:N")
    return (alt.layer(edge, node, senders, receiving, title=titled(title)).resolve_scale(color="independent")
            .properties(width="container", height=max(200, HEAD_ROW * n_heads),
                        usermeta={MAX_WIDTH: max(240, 60 * shown) + 200, MIN_WIDTH: LAYER_MIN * shown + 120}))
