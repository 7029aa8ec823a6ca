"""The "LLM" tab of Locust's web UI and its JSON route, fed by LiveStats.

GET /loadlab/stats answers LiveStats.snapshot() as JSON. The tab uses Locust's extension points:
`template_args["extended_tabs"/"extended_tables"]` declare it, and each /stats/requests answer
(which the UI polls) carries its rows under `extended_stats`. Locust's own --html report does
not include extended tabs; the run folder (--loadlab-out) keeps everything.
"""

from __future__ import annotations

import json

from flask import Response, jsonify, request
from locust.env import Environment

from loadlab.conductor.livestats import LiveStats

TAB_KEY = "llm"
ROUTE = "/loadlab/stats"
# The label column is not called "name": Locust's tables sort rows by "name" unless told otherwise.
_COLUMNS = [("metric", "Metric"), ("value", "Value"), ("p50", "p50"), ("p90", "p90"),
            ("p99", "p99"), ("mean", "Mean"), ("count", "Count")]
_LATENCIES = [("ttft", "TTFT (ms)"), ("itl", "ITL (ms)"), ("tpot", "TPOT (ms)"), ("e2e", "E2E (ms)")]


def install_llm_tab(environment: Environment, live: LiveStats) -> None:
    """Add the JSON route and the LLM tab to `environment.web_ui` (call when it exists)."""
    web_ui = environment.web_ui
    assert web_ui is not None, "install_llm_tab needs Locust's web UI"

    @web_ui.app.route(ROUTE)
    @web_ui.auth_required_if_enabled
    def loadlab_stats() -> Response:
        return jsonify(live.snapshot())

    @web_ui.app.after_request
    def add_llm_rows(response: Response) -> Response:
        if not request.path.endswith("/stats/requests") or response.status_code != 200:
            return response
        report = json.loads(response.get_data())
        report["extended_stats"] = [{"key": TAB_KEY, "data": tab_rows(live.snapshot())}]
        response.set_data(json.dumps(report))
        return response

    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": key, "title": title} for key, title in _COLUMNS]}]
    environment.events.reset_stats.add_listener(live.reset)


def tab_rows(snapshot: dict) -> list[dict]:
    """The LLM tab's table: one row per latency, then throughput, in-flight and error rows."""
    rows = []
    for key, title in _LATENCIES:
        d = snapshot["latency_ms"][key]
        rows.append({"metric": title, "value": "", **{k: _fmt(d[k]) for k in ("p50", "p90", "p99", "mean")},
                     "count": d["count"]})
    window = f"last {snapshot['window_s']:.0f} s"
    rows += [
        {"metric": f"Output tokens/s ({window})", "value": _fmt(snapshot["output_tokens_per_s"])},
        {"metric": f"Requests/s ({window})", "value": _fmt(snapshot["requests_per_s"])},
        {"metric": "Requests in flight", "value": snapshot["in_flight"]},
        {"metric": "Requests OK", "value": snapshot["requests_ok"]},
        {"metric": "Requests failed", "value": snapshot["requests_failed"]},
        {"metric": "Requests aborted by a stop", "value": snapshot["requests_aborted"]},
    ]
    rows += [{"metric": f"Errors: {category}", "value": n} for category, n in sorted(snapshot["errors"].items())]
    blank = {key: "" for key, _ in _COLUMNS}
    return [{**blank, **row} for row in rows]


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"
