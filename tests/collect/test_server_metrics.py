"""ServerMetricsCollector: scrapes /metrics in the background, maps names, survives bad sources."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loadlab.clock import now
from loadlab.collect.server_metrics import ServerMetricsCollector, metrics_url
from loadlab.errors import UserError
from loadlab.store.schema import Sample
from loadlab.urls import parse_http_url

FIXTURES = Path(__file__).parent / "fixtures"


class MetricsPages:
    """What the test server answers, per path: (status, body). Changeable while it runs."""

    def __init__(self, pages: dict[str, tuple[int, str]]) -> None:
        self.pages = pages
        self.hits: dict[str, int] = {}
        self.authorization = ""  # the last request's Authorization header


@contextmanager
def metrics_server(pages: dict[str, tuple[int, str]]) -> Iterator[tuple[str, MetricsPages]]:
    """A real HTTP server on a free loopback port serving `pages`; yields its base URL."""
    state = MetricsPages(pages)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits[self.path] = state.hits.get(self.path, 0) + 1
            state.authorization = self.headers.get("Authorization", "")
            status, body = state.pages.get(self.path, (404, "not found"))
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


class Collected:
    """A sink that keeps every batch."""

    def __init__(self) -> None:
        self.batches: list[list[Sample]] = []

    def __call__(self, samples: list[Sample]) -> None:
        self.batches.append(samples)

    @property
    def samples(self) -> list[Sample]:
        return [s for b in self.batches for s in b]


def run_collector(collector: ServerMetricsCollector, seconds: float) -> Collected:
    sink = Collected()
    collector.start(sink)
    time.sleep(seconds)
    collector.stop()
    return sink


VLLM_TEXT = (FIXTURES / "vllm.txt").read_text()


def test_scrapes_periodically_with_canonical_names_and_run_clock_times():
    with metrics_server({"/metrics": (200, VLLM_TEXT)}) as (url, state):
        t0 = now()
        sink = run_collector(ServerMetricsCollector(f"{url}/metrics", interval=0.2), 1.1)
        t1 = now()
    # One scrape at start, about one per 0.2 s, one at stop; wide bounds for a loaded CI box.
    assert 3 <= len(sink.batches) <= 9
    times = sorted({s.time for s in sink.samples})
    assert len(times) == len(sink.batches)
    assert t0 <= times[0] and times[-1] <= t1
    batch = sink.batches[0]
    assert {s.source for s in batch} == {"server"}
    running = [s for s in batch if s.signal == "requests_running"]
    assert [s.value for s in running] == [12.0]
    assert state.hits["/metrics"] == len(sink.batches)


def test_histograms_are_kept_as_buckets_sum_and_count():
    with metrics_server({"/metrics": (200, VLLM_TEXT)}) as (url, _):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=10)
        batch = collector.poll()
    ttft = {s.labels["le"]: s.value for s in batch if s.signal == "ttft"}
    assert ttft == {"0.001": 0, "0.1": 60, "0.5": 110, "+Inf": 120}
    assert all("le" not in s.labels for s in batch if s.signal in ("ttft_sum", "ttft_count"))
    assert [s.value for s in batch if s.signal == "ttft_count"] == [120]
    assert [s.value for s in batch if s.signal == "ttft_sum"] == [12.5]


def test_coverage_counts_scrapes():
    with metrics_server({"/metrics": (200, VLLM_TEXT)}) as (url, _):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=0.2)
        sink = run_collector(collector, 0.5)
    cov = collector.coverage()
    assert cov.source == "server" and cov.enabled
    assert cov.ok_samples == len(sink.batches) and cov.failed_samples == 0 and cov.error == ""


def test_unreachable_source_is_reported_once_and_counted(caplog):
    with metrics_server({}) as (url, _):
        pass  # the server is gone: its port refuses connections now
    collector = ServerMetricsCollector(f"{url}/metrics", interval=0.1)
    with caplog.at_level(logging.WARNING):
        sink = run_collector(collector, 0.6)
    cov = collector.coverage()
    assert sink.samples == []
    assert cov.ok_samples == 0 and cov.failed_samples >= 3
    assert "refused" in cov.error.lower() or "urlerror" in cov.error.lower()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1


def test_malformed_text_is_a_failed_scrape_and_the_collector_goes_on(caplog):
    with metrics_server({"/metrics": (200, "<html>this is not metrics</html>")}) as (url, state):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=0.1)
        sink = Collected()
        with caplog.at_level(logging.WARNING):
            collector.start(sink)
            time.sleep(0.35)
            state.pages["/metrics"] = (200, VLLM_TEXT)  # the server recovers
            time.sleep(0.35)
            collector.stop()
    cov = collector.coverage()
    assert cov.failed_samples >= 1 and cov.ok_samples >= 1
    assert "not Prometheus text" in cov.error
    assert any(s.signal == "kv_usage" for s in sink.samples)
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_http_error_is_a_failed_scrape():
    with metrics_server({"/metrics": (500, "boom")}) as (url, _):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=0.1)
        run_collector(collector, 0.25)
    assert collector.coverage().failed_samples >= 1
    assert "500" in collector.coverage().error


def test_falls_back_to_tensorrt_llm_path_on_404():
    trt = (FIXTURES / "trtllm.txt").read_text()
    with metrics_server({"/prometheus/metrics": (200, trt)}) as (url, _):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=10, fallback_urls=(f"{url}/prometheus/metrics",))
        batch = collector.poll()
        collector.poll()
    assert collector.url.endswith("/prometheus/metrics")
    assert any(s.signal == "kv_usage" and s.value == 0.97 for s in batch)
    # The fallback is said (the run puts it in run.json's warnings), once, not taken silently.
    assert collector.notes() == [
        f"server metrics: {url}/metrics answered 404; scraped {url}/prometheus/metrics instead"
    ]


def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_shown():
    with metrics_server({"/metrics": (200, "vllm:num_requests_running 3\n")}) as (url, pages):
        collector = ServerMetricsCollector(
            metrics_url(parse_http_url(url.replace("http://", "http://bob:pw@") + "/v1"))
        )
        batch = collector.poll()
    assert pages.authorization == "Basic Ym9iOnB3" and batch  # base64("bob:pw")
    assert collector.url == url + "/metrics" and collector.urls == [url + "/metrics"]


def test_metrics_url_from_api_url():
    assert metrics_url(parse_http_url("http://h:8000/v1")) == "http://h:8000/metrics"
    assert metrics_url(parse_http_url("https://h/v1/"), "/prometheus/metrics") == "https://h/prometheus/metrics"
    with pytest.raises(UserError):
        ServerMetricsCollector("ftp://h/metrics")


def test_against_a_running_loadlab_mock_signals_follow_the_load():
    from tests.support.mock_load import mock_server, stream_requests

    with mock_server("--itl", "0.01") as (url, _):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=0.1)
        sink = Collected()
        collector.start(sink)
        stream_requests(url, users=3, per_user=2, max_tokens=40)
        time.sleep(0.3)
        collector.stop()
    assert collector.coverage().failed_samples == 0
    by_signal: dict[str, list[Sample]] = {}
    for s in sink.samples:
        by_signal.setdefault(s.signal, []).append(s)
    generated = [s.value for s in sorted(by_signal["generation_tokens"], key=lambda s: s.time)]
    assert generated == sorted(generated)  # a counter only grows
    assert generated[0] < generated[-1] and generated[-1] >= 6 * 39
    assert max(s.value for s in by_signal["requests_running"]) >= 1
    assert by_signal["requests_running"][-1].value == 0  # all done by the last scrape
    last_time = max(s.time for s in sink.samples)
    ttft_count = [s.value for s in by_signal["ttft_count"] if s.time == last_time]
    assert ttft_count == [6]
    assert {s.labels["model_name"] for s in by_signal["kv_usage"]} == {"mock"}


def test_against_the_reference_server_engine_histograms_are_canonical():
    from tests.support.mock_load import stream_one
    from tests.support.procs import BIN, Proc, free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc(
        [str(BIN / "python"), "-m", "reference_server", "--port", str(port), "--preset", "tiny", "--max-num-seqs", "3"],
        ready_url=f"{url}/metrics",
        timeout=120,
    ):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=10)
        before = collector.poll()
        for _ in range(2):
            stream_one(url, max_tokens=8, model="loadlab-reference")
        after = collector.poll()
    assert collector.coverage().failed_samples == 0

    def total(samples: list[Sample], signal: str, **labels: str) -> float:
        return sum(
            s.value for s in samples if s.signal == signal and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert total(before, "step_time_count") == 0
    assert total(after, "step_time_count", phase="prefill") >= 1
    assert total(after, "step_time_count") >= 8  # a prefill and a decode step per token
    assert total(after, "step_time_sum") > 0
    assert total(after, "batch_size_count") == total(after, "step_time_count")
    # By phase too: the analyzer's step-time fit reads a decode step's sequences as its tokens.
    assert total(after, "batch_size_count", phase="decode") == total(after, "step_time_count", phase="decode") >= 1
    assert total(after, "collective_time_count") >= 1  # tensor parallel 1: zero-length collectives
    assert total(after, "generation_tokens") == 16
    assert total(after, "running_cap") == 3  # the configured --max-num-seqs, for the scheduling rule
    assert total(after, "ttft_count") == 2
    # Tokens per step: one series (the reference server once exported it under two names).
    assert len([s for s in after if s.signal == "tokens_per_step" and s.labels["le"] == "+Inf"]) == 1


def test_a_server_without_metrics_gets_a_hint_not_just_a_404():
    with metrics_server({}) as (url, state):
        collector = ServerMetricsCollector(f"{url}/metrics", interval=10, fallback_urls=(f"{url}/prometheus/metrics",))
        run_collector(collector, 0.05)
    assert state.hits == {"/metrics": 1, "/prometheus/metrics": 2}  # start and stop; fallback kept
    assert "404" in collector.coverage().error and "--enable-metrics" in collector.coverage().error


PARSED_WHERE = """
from gevent import monkey; monkey.patch_all()
import sys
from gevent.monkey import get_original
from loadlab.collect import server_metrics
native = get_original("threading", "get_native_id")
where = []
parse = server_metrics.parse_metrics_text
server_metrics.parse_metrics_text = lambda *a: where.append(native()) or parse(*a)
collector = server_metrics.ServerMetricsCollector(sys.argv[1])
collector.poll()
print("loop" if where == [native()] else "thread")
"""


def test_a_scrape_is_parsed_off_the_gevent_event_loop():
    # Inside `loadlab run` (gevent-patched) parsing a large page on the loop delays token timestamps.
    page = (FIXTURES / "reference.txt").read_text()
    with metrics_server({"/metrics": (200, page)}) as (url, _):
        done = subprocess.run(
            [sys.executable, "-c", PARSED_WHERE, url + "/metrics"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.stdout.strip() == "thread", done.stderr[-2000:]
