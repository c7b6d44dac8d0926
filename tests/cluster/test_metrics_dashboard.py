"""The Grafana dashboard in ``dashboards/soloist.json`` charts exactly the metrics soloist exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cluster import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "soloist.json"


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def _exported(sample: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix) and sample[: -len(suffix)] in metrics.METRICS:
            return sample[: -len(suffix)]
    return sample


def test_every_query_uses_only_exported_metrics_and_their_labels():
    dashboard = json.loads(DASHBOARD.read_text())
    problems = []
    for expr in _exprs(dashboard):
        for sample in re.findall(r"\bsoloist_[a-z_]+", expr):
            name = _exported(sample)
            if name not in metrics.METRICS:
                problems.append(f"{sample!r} in {expr!r} is not exported")
        for label in re.findall(r"\b([a-z_]+)\s*[=!]~?\"", expr):
            known = {label_name for spec in metrics.METRICS.values() for label_name in spec.labels}
            if label not in known:
                problems.append(f"label {label!r} in {expr!r} is on no soloist metric")
    assert problems == []


def test_every_design_metric_is_charted_and_panels_do_not_overlap():
    dashboard = json.loads(DASHBOARD.read_text())
    charted = {_exported(s) for e in _exprs(dashboard) for s in re.findall(r"\bsoloist_[a-z_]+", e)}
    assert charted == set(metrics.METRICS)
    cells = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {panel['title']!r} overlaps another"
        assert g["x"] + g["w"] <= 24
        cells |= mine
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource", "orchestrator"]
