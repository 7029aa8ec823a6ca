"""Collectors: background samplers that run beside the load test on the run's clock.

`build_collectors(config)` picks the ones a run asks for; each implements the `Collector`
protocol of `loadlab.collect.protocol` and writes `Sample`s (the run folder's, `loadlab.store.schema`)
with canonical names (docs/signals.md).
"""

from __future__ import annotations

from loadlab.collect.protocol import Collector
from loadlab.config import RunConfig


def server_metrics_urls(config: RunConfig) -> list[str]:
    """Where to scrape the server: first URL, then fallbacks tried on a 404 ([] = off).

    `server_metrics` "" means `<server>/metrics` (then TensorRT-LLM's /prometheus/metrics);
    a path such as "/prometheus/metrics" is taken on the server of `url`; a full URL as given.
    """
    from loadlab.collect.server_metrics import TRTLLM_METRICS_PATH, metrics_url

    if config.server_metrics is None:
        return []
    if config.server_metrics == "":
        return [metrics_url(config.parsed_url()), metrics_url(config.parsed_url(), TRTLLM_METRICS_PATH)]
    if config.server_metrics.startswith("/"):
        return [metrics_url(config.parsed_url(), config.server_metrics)]
    return [config.server_metrics]


def _llamacpp_slots(config: RunConfig) -> list[Collector]:
    """The slots collector where the server is llama.cpp's (GET /props answers its slot count)."""
    from loadlab.collect.slots import SlotsCollector, slot_cap

    url = config.parsed_url()
    cap = slot_cap(url)
    return [SlotsCollector(url, cap, config.metrics_interval)] if cap else []


def build_collectors(config: RunConfig) -> list[Collector]:
    """The collectors `config` enables, not yet started. Raises UserError on a bad URL or selector."""
    collectors: list[Collector] = []
    urls = server_metrics_urls(config)
    if urls:
        from loadlab.collect.server_metrics import ServerMetricsCollector

        collectors.append(ServerMetricsCollector(urls[0], config.metrics_interval, fallback_urls=tuple(urls[1:])))
        collectors += _llamacpp_slots(config)
    if config.prometheus:
        from loadlab.collect.prometheus_server import PrometheusCollector

        collectors.append(
            PrometheusCollector(config.prometheus, config.prometheus_selector, step=config.metrics_interval)
        )
    if config.gpu:
        from loadlab.collect.gpu import GpuCollector

        collectors.append(GpuCollector(config.gpu_interval))
    if config.nccl_inspector_dir:
        from loadlab.collect.nccl import NcclInspectorCollector

        collectors.append(NcclInspectorCollector(config.nccl_inspector_dir, config.metrics_interval))
    if config.server_pid:
        from loadlab.collect.host import HostCollector

        collectors.append(HostCollector({"server": config.server_pid}, config.metrics_interval))
    return collectors
