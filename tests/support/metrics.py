"""The metric families of the chart's Grafana dashboard, and those a ``/metrics`` page serves,
for the tests that compare them (on processes started by the test, or on the live cluster)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "charts" / "troupe" / "files" / "dashboard.json"
#: A metric name inside a PromQL expression (labels, functions and keywords are not ``troupe_``).
METRIC = re.compile(r"\btroupe_[a-z0-9_]+\b")
SUFFIXES = ("_bucket", "_sum", "_count")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queried() -> set[str]:
    """Every metric family the dashboard's queries read (histogram series as their family)."""
    names = set()
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            for name in METRIC.findall(target["expr"]):
                names.add(next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name))
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            names.update(METRIC.findall(query["query"]))
    return names


def families(text: str) -> set[str]:
    out = set()
    for family in text_string_to_metric_families(text):
        out.add(family.name)
        if family.type == "counter":
            out.add(family.name + "_total")
    return out
