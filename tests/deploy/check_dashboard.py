#!/usr/bin/env python3
"""Checks deploy/grafana/hetps-dashboard.json against a Prometheus that scrapes hetps.

Usage: check_dashboard.py SOURCE_DIR PROMETHEUS_URL

The dashboard must be well formed (unique panel ids, panels inside Grafana's 24-column grid,
every panel with a query), every query must evaluate (PromQL that Prometheus accepts), and
every metric a query names must be one that Prometheus has scraped, or one that the source
defines but this run does not export (replication and checkpoint figures need --replicas 2 or
--checkpoint_dir). Exits 1 with what is wrong.
"""

import json
import os
import re
import sys
import urllib.parse
import urllib.request


def get(url):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def main():
    source_dir, prometheus = sys.argv[1], sys.argv[2].rstrip("/")
    path = os.path.join(source_dir, "deploy", "grafana", "hetps-dashboard.json")
    with open(path) as f:
        dashboard = json.load(f)
    problems = []
    ids = [panel["id"] for panel in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        problems.append("panel ids repeat")
    queries = []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        if grid["x"] < 0 or grid["x"] + grid["w"] > 24:
            problems.append(f"panel {panel['title']!r} is outside the grid")
        if panel["type"] == "row":
            continue
        if not panel.get("targets"):
            problems.append(f"panel {panel['title']!r} has no query")
        queries += [(panel["title"], target["expr"]) for target in panel.get("targets", [])]

    scraped = set(get(prometheus + "/api/v1/label/__name__/values")["data"])
    sources = ""
    for name in ("server/shard_metrics.cc", "worker/internal/client_metrics.cc",
                 "common/prometheus.cc"):
        with open(os.path.join(source_dir, name)) as f:
            sources += f.read()
    for title, expr in queries:
        answer = get(prometheus + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        if answer.get("status") != "success":
            problems.append(f"{title!r}: {expr!r} does not evaluate: {answer}")
        for metric in re.findall(r"\b((?:hetps|process)_[a-z_]+)", expr):
            family = re.sub(r"_(bucket|sum|count)$", "", metric)
            if metric not in scraped and f'"{family}"' not in sources:
                problems.append(f"{title!r}: {metric} is neither scraped nor defined")
    for problem in problems:
        print("dashboard:", problem)
    print(f"dashboard: {len(queries)} queries in {len(ids)} panels checked")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
