"""Cost's chart (dashboard/app_pages/cost/charts.py)."""

import pandas as pd
import specs

from dashboard.app_pages.cost import charts


def test_cost_chart_draws_the_quadratic_curve():
    frame = pd.DataFrame({"tokens": [16, 32, 64], "path": "HF", "bytes": [256.0, 1024.0, 4096.0]})
    spec = charts.cost_chart(frame, "bytes", "memory", quadratic=1.0).to_dict()
    curve = [r for r in specs.rows(spec) if r["path"] == "c·L² (quadratic)"]
    assert curve[0]["tokens"] == 16 and curve[-1]["tokens"] == 64
    assert all(r["bytes"] == r["tokens"] ** 2 for r in curve)
    assert spec["encoding"]["x"]["scale"]["type"] == "log"
