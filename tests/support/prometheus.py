"""A real Prometheus server for tests: scrapes given loopback targets every second.

    with prometheus_server(["127.0.0.1:8000"], tmp_path) as prom:
        prom.wait_for_scrapes(3)
        ... PrometheusCollector(prom.url) ...

The Debian package `prometheus` provides the binary (`make system-deps` installs it). Without it
the test fails with a message saying so: this integration is not optional.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import Proc, free_port

CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: {job}
    metrics_path: {metrics_path}
    static_configs:
      - targets: [{targets}]
"""


def prometheus_binary() -> str:
    """Path of the prometheus binary, or fail the test with how to install it."""
    path = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    if path is None:
        pytest.fail(
            "the `prometheus` binary is missing: install it with `make system-deps` (Debian package `prometheus`)",
            pytrace=False,
        )
    return path


@dataclass
class PrometheusServer:
    """A running Prometheus: its base URL and process."""

    url: str
    proc: Proc
    job: str

    def query(self, promql: str) -> list[dict]:
        """Instant query; the `result` list of the answer."""
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=5) as r:
            return json.loads(r.read())["data"]["result"]

    def wait_for_scrapes(self, count: int, timeout: float = 30.0) -> None:
        """Wait until every target has been scraped successfully at least `count` times."""
        deadline = time.monotonic() + timeout
        # up is 1 for each successful scrape: its sum over time counts them.
        promql = f'min(sum_over_time(up{{job="{self.job}"}}[5m]))'
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result and float(result[0]["value"][1]) >= count:
                return
            time.sleep(0.25)
        raise TimeoutError(f"Prometheus did not scrape {self.job} {count} times in {timeout}s: {self.query('up')}")


@contextmanager
def prometheus_server(
    targets: list[str], workdir: Path, metrics_path: str = "/metrics", job: str = "loadlab-test"
) -> Iterator[PrometheusServer]:
    """Start Prometheus scraping `targets` ("host:port") each second; stopped by PID on exit."""
    binary = prometheus_binary()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(CONFIG.format(job=job, metrics_path=metrics_path, targets=", ".join(f'"{t}"' for t in targets)))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with Proc(args, ready_url=f"{url}/-/ready", timeout=60, log=workdir / "prometheus.log") as proc:
        yield PrometheusServer(url=url, proc=proc, job=job)
