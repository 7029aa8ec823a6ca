"""PrometheusCollector: pulls the run window from a real Prometheus server."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from loadlab.collect.prometheus_server import PrometheusCollector, series_query
from loadlab.collect.server_metrics import ServerMetricsCollector
from loadlab.collect.signals import ALL_MAPPINGS
from loadlab.errors import UserError
from loadlab.store.schema import Sample
from tests.support.mock_load import mock_server, stream_requests
from tests.support.procs import BIN, Proc, free_port
from tests.support.prometheus import prometheus_server

CANONICAL = {m.signal for m in ALL_MAPPINGS.values()}


def is_canonical(signal: str) -> bool:
    return signal in CANONICAL or signal.removesuffix("_sum").removesuffix("_count") in CANONICAL


def test_selector_is_merged_into_the_query():
    query = series_query('{job="vllm", instance=~"node-.*"}')
    assert query.startswith('{__name__=~"(')
    assert query.endswith(', job="vllm", instance=~"node-.*"}')
    assert "vllm:num_requests_running" in query and "DCGM_FI_.+" in query
    assert "DCGM_FI_DEV_GPU_UTIL|" not in query  # DCGM comes in by prefix, not by list
    assert series_query("") == series_query("{}")
    assert series_query('job="vllm"') == series_query('{job="vllm"}')  # braces optional


@pytest.mark.parametrize("bad", ["{job='x'", 'up{job="x"}', "{job=\"x\"", "vllm", "{{}}"])
def test_a_selector_that_is_not_one_brace_block_is_a_user_error(bad):
    with pytest.raises(UserError):
        PrometheusCollector("http://127.0.0.1:9090", bad)


def test_unreachable_prometheus_is_reported_once_and_the_run_goes_on(caplog):
    collector = PrometheusCollector(f"http://127.0.0.1:{free_port()}", timeout=2)
    got: list[Sample] = []
    with caplog.at_level(logging.WARNING):
        collector.start(got.extend)
        collector.stop()
        collector.stop()  # a second stop is harmless
    cov = collector.coverage()
    assert got == [] and cov.ok_samples == 0 and cov.failed_samples == 1
    assert "ConnectionError" in cov.error
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def by_signal(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in sorted(samples, key=lambda s: s.time):
        out.setdefault(s.signal, []).append(s)
    return out


@contextmanager
def serving(kind: str) -> Iterator[tuple[str, str]]:
    """A running server of `kind` ("mock" or "reference"); yields (base URL, model name)."""
    if kind == "mock":
        with mock_server("--itl", "0.01") as (url, _):
            yield url, "mock"
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc(
        [str(BIN / "python"), "-m", "reference_server", "--port", str(port), "--preset", "tiny"],
        ready_url=f"{url}/metrics",
        timeout=120,
    ):
        yield url, "loadlab-reference"


@pytest.mark.parametrize("kind", ["mock", "reference"])
def test_series_pulled_from_a_real_prometheus_match_the_direct_scrape(tmp_path, kind):
    with serving(kind) as (url, model):
        target = url.removeprefix("http://")
        with prometheus_server([target], tmp_path / "prom") as prom:
            prom.wait_for_scrapes(2)
            direct = ServerMetricsCollector(f"{url}/metrics", interval=0.5)
            pulled = PrometheusCollector(prom.url, selector=f'{{job="{prom.job}"}}', step=0.5)
            direct_samples: list[Sample] = []
            pulled_samples: list[Sample] = []
            start = time.time()
            direct.start(direct_samples.extend)
            pulled.start(pulled_samples.extend)
            stream_requests(url, users=3, per_user=2, max_tokens=20, model=model)
            # Let Prometheus scrape the settled values at least twice more.
            prom.wait_for_scrapes(int(prom.query(f'sum_over_time(up{{job="{prom.job}"}}[5m])')[0]["value"][1]) + 2)
            direct.stop()
            pulled.stop()
            end = time.time()

    assert pulled.coverage().error == "" and pulled.coverage().ok_samples == len(pulled_samples) > 0
    direct_by, pulled_by = by_signal(direct_samples), by_signal(pulled_samples)
    # Same canonical signals (raw extras such as python_gc_* are not queried from Prometheus).
    assert {s for s in direct_by if is_canonical(s)} == set(pulled_by)
    assert {s.source for s in pulled_samples} == {"prometheus"}
    # Prometheus adds its own target labels and keeps the server's.
    first = pulled_by["generation_tokens"][0]
    assert first.labels["job"] == prom.job and first.labels["model_name"] == model
    # Timestamps are Prometheus evaluation times inside the window, step apart.
    times = sorted({s.time for s in pulled_by["generation_tokens"]})
    assert start - 1 <= times[0] and times[-1] <= end + 1
    assert len(times) >= 4 and all(abs((b - a) - 0.5) < 1e-6 for a, b in itertools.pairwise(times))
    # Counters agree once the load has settled, and only grow in between.
    for signal in ("generation_tokens", "prompt_tokens", "ttft_count", "itl_sum", "e2e_count"):
        values = [s.value for s in pulled_by[signal]]
        assert values == sorted(values), signal
        assert values[-1] == pytest.approx(direct_by[signal][-1].value), signal
    assert pulled_by["ttft_count"][-1].value == 6
    assert max(s.value for s in pulled_by["generation_tokens"]) > min(s.value for s in pulled_by["generation_tokens"])
    # Histogram buckets come through with the same bounds.
    last = direct_by["ttft"][-1].time
    direct_le = {s.labels["le"] for s in direct_by["ttft"] if s.time == last}
    assert {s.labels["le"] for s in pulled_by["ttft"]} == direct_le
    assert pulled_by["requests_running"][-1].value == 0
    if kind == "reference":
        assert {"step_time", "batch_size", "tokens_per_step", "collective_time"} <= set(pulled_by)
        assert pulled_by["step_time_count"][-1].value > 0
