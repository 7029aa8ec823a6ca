"""The "LLM" tab of Locust's web UI: a table of exact live numbers, live charts and the live verdict.

GET /loadlab/stats answers LiveStats.snapshot() as JSON, plus `verdict` (the live verdict's line)
and `history` (a point every HISTORY_EVERY_S seconds: output tokens/s, TTFT and ITL p50/p99 of the
requests that ended in the last 10 s,
requests in flight, and the server's running/waiting requests and KV usage when scraped). The
tab uses Locust's extension points: `template_args["extended_tabs"/"extended_tables"]` declare it,
each /stats/requests answer (which the UI polls) carries its rows under `extended_stats`, and the
charts are an inline script and style added to the page (webui_charts.js: SVG drawn by hand, so
the page needs nothing from outside the local server). Locust's own --html report does not
include extended tabs; the run folder (--loadlab-out) keeps everything.
"""

from __future__ import annotations

from locust.env import Environment

import json
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import gevent
from flask import Response, jsonify, request

from loadlab.client.context import add_loadlab_events
from loadlab.collect import signals as sig
from loadlab.conductor.livestats import LiveStats
from loadlab.conductor.liveverdict import LiveVerdict
from loadlab.numbers import format_number, format_value
from loadlab.store.schema import Sample

TAB_KEY = "llm"
ROUTE = "/loadlab/stats"
HISTORY_EVERY_S = 2.0
HISTORY_POINTS = 900  # 30 minutes of points; older ones scroll out
# The label column is not called "name": Locust's tables sort rows by "name" unless told otherwise.
_COLUMNS = [
    ("metric", "Metric"),
    ("value", "Value"),
    ("p50", "p50"),
    ("p90", "p90"),
    ("p99", "p99"),
    ("mean", "Mean"),
    ("count", "Count"),
]
_LATENCIES = [("ttft", "TTFT (ms)"), ("itl", "ITL (ms)"), ("tpot", "TPOT (ms)"), ("e2e", "E2E (ms)")]
_CHARTS = Path(__file__).with_name("webui_charts.js")


class ServerGauges:
    """The server's last scraped running/waiting requests and KV usage (all engines)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], float] = {}

    def add(self, samples: Iterable[Sample]) -> None:
        """Keep the last value of each engine's gauges."""
        for s in samples:
            if s.source == "server" and s.signal in (sig.REQUESTS_RUNNING, sig.REQUESTS_WAITING, sig.KV_USAGE):
                self._last[(s.signal, json.dumps(s.labels, sort_keys=True))] = s.value

    def values(self) -> dict[str, float | None]:
        """running and waiting summed over engines, KV usage averaged; None before any scrape."""

        def of(signal: str) -> list[float]:
            return [v for (name, _), v in self._last.items() if name == signal]

        running, waiting, kv = of(sig.REQUESTS_RUNNING), of(sig.REQUESTS_WAITING), of(sig.KV_USAGE)
        return {
            "running": sum(running) if running else None,
            "waiting": sum(waiting) if waiting else None,
            "kv_usage": sum(kv) / len(kv) if kv else None,
        }


def install_llm_tab(environment: Environment, live: LiveStats, verdict: LiveVerdict | None = None) -> None:
    """Add the JSON route, the LLM tab and its charts to `environment.web_ui` (call when it exists).

    `verdict`: the live verdict, polled with each point of the history (it never waits)."""
    web_ui = environment.web_ui
    assert web_ui is not None, "install_llm_tab needs Locust's web UI"
    gauges = ServerGauges()
    history: deque[dict] = deque(maxlen=HISTORY_POINTS)
    add_loadlab_events(environment.events).llm_samples.add_listener(lambda samples, **_: gauges.add(samples))

    def line() -> str:
        return verdict.line if verdict is not None else ""

    def record_history() -> None:
        while True:
            if verdict is not None:
                verdict.poll()
            history.append(history_point(live.snapshot(), live.recent_latencies(), gauges.values()))
            gevent.sleep(HISTORY_EVERY_S)

    app = web_ui.app
    assert app is not None, "Locust's web UI has its Flask app once it exists"

    @app.route(ROUTE)
    @web_ui.auth_required_if_enabled
    def loadlab_stats() -> Response:
        return jsonify({**live.snapshot(), "verdict": line(), "history": list(history)})

    @app.after_request
    def extend_pages(response: Response) -> Response:
        if response.status_code != 200:
            return response
        if request.path.endswith("/stats/requests"):
            report = json.loads(response.get_data())
            report["extended_stats"] = [{"key": TAB_KEY, "data": tab_rows(live.snapshot(), line())}]
            response.set_data(json.dumps(report))
        elif request.path == "/" and response.mimetype == "text/html":
            page = response.get_data(as_text=True)
            response.set_data(page.replace("</body>", charts_html() + "</body>", 1))
        return response

    web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": key, "title": title} for key, title in _COLUMNS]}
    ]
    environment.events.reset_stats.add_listener(live.reset)
    environment.events.reset_stats.add_listener(history.clear)
    gevent.spawn(record_history)


def history_point(snapshot: dict, latency: dict[str, dict], server: dict[str, float | None]) -> dict:
    """One point of the charts: the time (epoch s) and each series' value (None: not measured);
    `latency`: the recent TTFT and ITL percentiles (LiveStats.recent_latencies)."""
    return {
        "t": time.time(),
        "tokens_per_s": snapshot["output_tokens_per_s"],
        "ttft_p50": latency["ttft"]["p50"],
        "ttft_p99": latency["ttft"]["p99"],
        "itl_p50": latency["itl"]["p50"],
        "itl_p99": latency["itl"]["p99"],
        "in_flight": snapshot["in_flight"],
        **server,
    }


def charts_html() -> str:
    """The charts' style and script, inline (the page loads nothing from elsewhere)."""
    return f"<script>{_CHARTS.read_text()}</script>"


def tab_rows(snapshot: dict, verdict: str = "") -> list[dict]:
    """The LLM tab's table: the live verdict, one row per latency, then throughput, in-flight and error rows."""
    rows = [{"metric": "Live verdict (last 30 s)", "value": verdict}] if verdict else []
    for key, title in _LATENCIES:
        d = snapshot["latency_ms"][key]
        rows.append(
            {
                "metric": title,
                "value": "",
                **{k: format_number(d[k]) for k in ("p50", "p90", "p99", "mean")},
                "count": d["count"],
            }
        )
    window = f"last {format_value(snapshot['window_s'], 's')}"
    rows += [
        {"metric": f"Output tokens/s ({window})", "value": format_number(snapshot["output_tokens_per_s"])},
        {"metric": f"Requests/s ({window})", "value": format_number(snapshot["requests_per_s"])},
        {"metric": "Requests in flight", "value": snapshot["in_flight"]},
        {"metric": "Requests OK", "value": snapshot["requests_ok"]},
        {"metric": "Requests failed", "value": snapshot["requests_failed"]},
        {"metric": "Requests aborted by a stop", "value": snapshot["requests_aborted"]},
    ]
    rows += [{"metric": f"Errors: {category}", "value": n} for category, n in sorted(snapshot["errors"].items())]
    blank = {key: "" for key, _ in _COLUMNS}
    return [{**blank, **row} for row in rows]
