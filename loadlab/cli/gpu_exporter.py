"""`loadlab gpu-exporter`: serve this host's GPU samples as Prometheus metrics for remote runs.

Each `gpu_<x>` signal of `GpuCollector` is served as the gauge `loadlab_gpu_<x>{gpu, uuid}`
(e.g. `gpu_sm_active` -> `loadlab_gpu_sm_active`), always the latest sample. The server-metrics
collector of a run maps them back by dropping the `loadlab_` prefix. No gevent here: a plain
sampling thread and prometheus_client's HTTP server thread.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import typer

from loadlab.collect.signals import GPU_EXPORTER_PREFIX
from loadlab.errors import UserError

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

    from loadlab.collect.gpu import GpuCollector


def metric_name(signal_name: str) -> str:
    """Prometheus name of a GPU signal: `gpu_util` -> `loadlab_gpu_util`."""
    return GPU_EXPORTER_PREFIX + signal_name


class LatestGpuSamples:
    """A prometheus_client collector that reports the collector's latest tick on every scrape."""

    def __init__(self, collector: GpuCollector) -> None:
        self.collector = collector

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from prometheus_client.core import GaugeMetricFamily

        families: dict[str, GaugeMetricFamily] = {}
        for s in list(self.collector.latest):
            name = metric_name(s.signal)
            if name not in families:
                families[name] = GaugeMetricFamily(name, f"loadlab GPU signal {s.signal}", labels=["gpu", "uuid"])
            families[name].add_metric([s.labels.get("gpu", ""), s.labels.get("uuid", "")], s.value)
        yield from families.values()


def serve(host: str, port: int, interval: float, replay: str) -> None:
    """Sample GPUs and serve /metrics until SIGTERM/SIGINT (call it from the main thread)."""
    from prometheus_client import CollectorRegistry, start_http_server

    from loadlab.collect.gpu import GpuBackend, GpuCollector, NvmlBackend, ReplayBackend

    if not 0 < port < 65536:
        raise UserError(f"--port must be 1..65535, got {port}")
    if not (interval > 0 and math.isfinite(interval)):
        raise UserError(f"--interval must be a finite number > 0 seconds, got {interval}")
    backend: GpuBackend = ReplayBackend(replay) if replay else NvmlBackend()
    try:  # opened here so a machine without GPUs gets one clear line (the collector's open is then a no-op)
        backend.open()
    except Exception as e:
        raise UserError(
            f"GPU signals unavailable: {type(e).__name__}: {e} (use --replay FILE to serve a recording)"
        ) from None
    collector = GpuCollector(interval=interval, backend=backend)
    collector.start(lambda samples: None)  # the collector keeps its latest tick itself
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LatestGpuSamples(collector))
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        collector.stop()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(
        f"loadlab gpu-exporter: http://{host}:{port}/metrics ({collector.backend.name}, every {interval}s)", flush=True
    )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        collector.stop()


def register(app: typer.Typer) -> None:
    """Add `gpu-exporter` to the CLI."""

    @app.command("gpu-exporter")
    def gpu_exporter(
        host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for remote scrapes)."),
        port: int = typer.Option(9400, help="Port to listen on."),
        interval: float = typer.Option(0.25, help="Seconds between GPU samples."),
        replay: str = typer.Option("", help="Serve a recorded trace (JSON lines of GPU readings) instead of NVML."),
    ) -> None:
        """Serve this host's GPU signals (NVML, GPM) as Prometheus metrics `loadlab_gpu_*`."""
        serve(host, port, interval, replay)
