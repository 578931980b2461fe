"""The metrics weft exports, the table of them in docs/operations.md (Metrics) and the Grafana
dashboard deploy/grafana/weft.json agree:

- every metric the code records (`counter!`/`gauge!`/`histogram!` with a `weft_` name, and the
  gateway's per-route pair) has a row in the table, and every row names a metric the code
  records;
- every metric a dashboard query refers to has a row in the table;
- after some traffic (a chat completion through a provider, a run), a running weft's `/metrics`
  exposes every series the dashboard queries. This one runs against `weft up` only, whose one
  process serves every service's metrics at the gateway's `/metrics` (in the split arrangement
  each process has its own).
"""

import json
import os
import re
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import run_finished

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "operations.md"
DASHBOARD = ROOT / "deploy" / "grafana" / "weft.json"
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
METRICS_DEADLINE = 60.0


def documented():
    """name -> type, from the table under docs/operations.md's `## Metrics`."""
    text = DOCS.read_text()
    section = text.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(weft_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", section, re.M)
    assert rows, "no metrics table under docs/operations.md ## Metrics"
    return dict(rows)


def recorded_in_code():
    """Every metric name the Rust sources record."""
    names = set()
    for path in [*ROOT.glob("services/*/src/**/*.rs"), *ROOT.glob("shared/*/src/**/*.rs")]:
        text = path.read_text()
        names |= set(re.findall(r'(?:counter|gauge|histogram)!\(\s*"(weft_[a-z0-9_]+)"', text))
        for pair in re.findall(r'RouteMetrics::new\(\s*"(weft_[a-z0-9_]+)",\s*"(weft_[a-z0-9_]+)"',
                               text):
            names |= set(pair)
    return names


def dashboard_queries():
    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                yield node["expr"]
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)

    exprs = list(walk(json.loads(DASHBOARD.read_text())))
    assert exprs, f"no queries in {DASHBOARD}"
    return exprs


def dashboard_series():
    """Every series name the dashboard's PromQL refers to (a histogram's `_bucket` included)."""
    return {m for e in dashboard_queries() for m in re.findall(r"\bweft_[a-z0-9_]+\b", e)}


def base(name, table):
    for suffix in HISTOGRAM_SERIES:
        stem = name.removesuffix(suffix)
        if stem != name and table.get(stem) == "histogram":
            return stem
    return name


def test_the_table_lists_every_metric_the_code_records_and_nothing_else():
    table, code = documented(), recorded_in_code()
    assert not code - set(table), (
        f"metrics recorded in the code but missing from docs/operations.md: {sorted(code - set(table))}")
    assert not set(table) - code, (
        f"metrics in docs/operations.md that the code never records: {sorted(set(table) - code)}")


def test_the_dashboard_refers_only_to_documented_metrics():
    table = documented()
    unknown = sorted(s for s in dashboard_series() if base(s, table) not in table)
    assert not unknown, f"deploy/grafana/weft.json queries undocumented metrics: {unknown}"
    # A histogram is queried through its buckets, sum or count; a counter or gauge by its name.
    for s in dashboard_series():
        if table.get(base(s, table)) == "histogram":
            assert s != base(s, table), f"{s} is a histogram: query {s}_bucket, _sum or _count"


def exposed(root_url):
    text = httpx.get(f"{root_url}/metrics", timeout=30).text
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{| )", text, re.M)}


@pytest.mark.skipif(os.environ.get("WEFT_ARRANGEMENT") != "weft-up",
                    reason="one process serves every service's metrics only under `weft up`")
def test_a_fleet_exposes_every_series_the_dashboard_queries(root_url, token, fake_upstream):
    auth = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{root_url}/v1/", headers=auth, timeout=60) as http:
        r = http.post("chat/completions", json={
            "model": "via-openai", "messages": [{"role": "user", "content": "Say hello."}]})
        assert r.status_code == 200, r.text
        agent = f"metrics-{uuid.uuid4().hex[:8]}"
        r = http.put(f"agents/{agent}", json={"model": "mock-1"})
        assert r.status_code == 201, r.text
        r = http.post("runs", json={"agent": agent,
                                    "input": "#mock " + json.dumps({"turns": [], "reply": "ok"})})
        assert r.status_code == 201, r.text
        run_id = r.json()["run_id"]
        run_finished(http, run_id)
    want = dashboard_series()
    deadline = time.monotonic() + METRICS_DEADLINE
    while missing := sorted(want - exposed(root_url)):
        # Usage records reach the writer, and the dispatch backlog its first sample, a little
        # after the traffic.
        assert time.monotonic() < deadline, (
            f"/metrics lacks series deploy/grafana/weft.json queries: {missing}")
        time.sleep(0.5)
