"""The Circuit page's graph (dashboard/app_pages/circuit/charts.py)."""

import pandas as pd

from dashboard.app_pages.circuit import charts


def test_the_circuit_graph_ends_at_the_receivers_layer_and_names_it_clear_of_the_senders():
    """SmolLM2's head 15.7 reads only layers 0–14: the graph's columns end at layer 15 (not the model's 30, which
    left half the width empty), and the receiver's name is to the right of its node, the senders' above theirs."""
    edges = pd.DataFrame({"sender_layer": [14, 14, 3], "sender_head": [7, 6, 7], "kind": ["k", "q", "v"],
                          "value": [0.3, -0.2, 0.1], "label": ["a", "b", "c"]})
    spec = charts.circuit_graph(edges, (15, 7), 30, 9, "Head 15.7").to_dict()
    xs = [layer["encoding"]["x"] for layer in spec["layer"]]
    assert all(x["scale"]["domain"] == [-0.5, 15.5] and x["axis"]["values"] == list(range(16)) for x in xs)
    texts = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    receiver = next(t["mark"] for t in texts if spec["datasets"][t["data"]["name"]] == [
        {"layer": 15, "head": 7, "name": "15.7", "role": "receiver"}])
    assert receiver.get("dx", 0) > 0 and receiver.get("align") == "left" and "dy" not in receiver
    senders = [t["mark"] for t in texts if t["mark"] is not receiver]
    assert len(senders) == 1 and senders[0]["dy"] < 0
