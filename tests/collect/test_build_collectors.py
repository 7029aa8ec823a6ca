"""build_collectors: the run's config decides which collectors run and where they look."""

from __future__ import annotations

import os

import pytest

from loadlab.collect import build_collectors, server_metrics_urls
from loadlab.collect.gpu import GpuCollector
from loadlab.collect.host import HostCollector
from loadlab.collect.nccl import NcclInspectorCollector
from loadlab.collect.prometheus_server import PrometheusCollector
from loadlab.collect.server_metrics import ServerMetricsCollector
from loadlab.config import RunConfig
from loadlab.errors import UserError


def config(**overrides) -> RunConfig:
    return RunConfig(url="http://127.0.0.1:8000/v1", gpu=False, **overrides)


def test_default_scrapes_the_servers_metrics_then_the_tensorrt_llm_path():
    [server] = build_collectors(config())
    assert isinstance(server, ServerMetricsCollector)
    assert server.urls == ["http://127.0.0.1:8000/metrics", "http://127.0.0.1:8000/prometheus/metrics"]
    assert server.interval == 1.0


@pytest.mark.parametrize(
    "given, expected",
    [
        (None, []),
        ("/prometheus/metrics", ["http://127.0.0.1:8000/prometheus/metrics"]),
        ("http://10.0.0.5:9400/metrics", ["http://10.0.0.5:9400/metrics"]),
    ],
)
def test_server_metrics_setting(given, expected):
    assert server_metrics_urls(config(server_metrics=given)) == expected


def test_every_collector_when_everything_is_asked_for(tmp_path):
    collectors = build_collectors(
        RunConfig(
            url="http://127.0.0.1:8000",
            metrics_interval=0.5,
            prometheus="http://127.0.0.1:9090",
            prometheus_selector='{job="vllm"}',
            gpu=True,
            gpu_interval=0.1,
            nccl_inspector_dir=str(tmp_path),
            server_pid=os.getpid(),
        )
    )
    kinds = [type(c) for c in collectors]
    assert kinds == [ServerMetricsCollector, PrometheusCollector, GpuCollector, NcclInspectorCollector, HostCollector]
    server, prom, gpu, nccl, host = collectors
    assert server.interval == 0.5 and prom.step == 0.5 and 'job="vllm"' in prom.query
    assert gpu.interval == 0.1
    assert nccl.interval == 0.5 and host.interval == 0.5 and host.pids == {"server": os.getpid()}
    assert {c.source for c in collectors} == {"server", "prometheus", "gpu", "nccl", "host"}


def test_nothing_when_everything_is_off():
    assert build_collectors(config(server_metrics=None)) == []


@pytest.mark.parametrize(
    "bad",
    [
        dict(prometheus="localhost:9090"),
        dict(server_metrics="ftp://x/metrics"),
        dict(prometheus="http://p:9090", prometheus_selector="up{job"),
    ],
)
def test_bad_urls_and_selectors_are_user_errors_before_the_run(bad):
    with pytest.raises(UserError):
        build_collectors(config(**bad))
