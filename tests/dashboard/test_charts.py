import numpy as np
import pytest

from dashboard.charts import attention_frame, attention_heatmap


def test_heatmap_spec_carries_exact_weights_and_order():
    tokens = ["[CLS]", "she", "she", "[SEP]"]
    w = np.eye(4) * 0.75 + 0.0625
    spec = attention_heatmap(tokens, w, "L0 H0").to_dict()
    assert spec["mark"]["type"] == "rect"
    assert spec["encoding"]["x"]["sort"] == ["0: [CLS]", "1: she", "2: she", "3: [SEP]"]
    rows = next(iter(spec["datasets"].values()))
    assert len(rows) == 16
    assert {r["weight"] for r in rows if r["query_pos"] == r["key_pos"]} == {0.8125}


def test_causal_future_is_left_blank():
    frame = attention_frame(["a", "b", "c"], np.tril(np.ones((3, 3))) / 3, causal=True)
    assert len(frame) == 6 and (frame["key_pos"] <= frame["query_pos"]).all()


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="expected"):
        attention_frame(["a", "b"], np.ones((3, 3)))
