"""Scrape a serving engine's Prometheus /metrics page during the run.

Runs inside `loadlab run`, which gevent patches: plain threading + urllib become greenlets there.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from loadlab.clock import now
from loadlab.collect.poller import PollingCollector
from loadlab.collect.prom_text import parse_metrics_text
from loadlab.offload import off_the_event_loop
from loadlab.store.schema import Sample
from loadlab.urls import HttpUrl, parse_http_url

# trtllm-serve serves its metrics here instead of /metrics.
TRTLLM_METRICS_PATH = "/prometheus/metrics"


def metrics_url(endpoint: HttpUrl, path: str = "/metrics") -> str:
    """The metrics URL of the server behind an API URL (`http://h:8000/v1` -> `http://h:8000/metrics`),
    with the API URL's credentials, if any: the same server, the same login."""
    return endpoint.on_path(path)


class MetricsNotFound(Exception):
    """The server answers, but not with metrics at this path."""


class ServerMetricsCollector(PollingCollector):
    """Scrapes `url` every `interval` seconds; samples carry canonical signal names (source "server").

    `fallback_urls` are tried, in order, when the current URL answers 404 (e.g. TensorRT-LLM's
    /prometheus/metrics). Credentials in a URL are sent as HTTP Basic auth. Coverage counts
    scrapes: ok = parsed, failed = unreachable, HTTP error, timeout or malformed text; the first
    error is logged once.
    """

    source = "server"

    def __init__(self, url: str, interval: float = 1.0, fallback_urls: tuple[str, ...] = ()) -> None:
        super().__init__(interval)
        self._urls: list[HttpUrl] = [parse_http_url(u, "--server-metrics") for u in (url, *fallback_urls)]
        # A scrape slower than the interval is late data; but give a loaded server one second.
        self.timeout = max(1.0, interval)

    @property
    def urls(self) -> list[str]:
        """The URL being scraped, then its fallbacks, without credentials."""
        return [str(u) for u in self._urls]

    @property
    def url(self) -> str:
        """The URL being scraped, without credentials (it moves to a fallback after a 404)."""
        return str(self._urls[0])

    def poll(self) -> list[Sample]:
        """One scrape, stamped with the middle of the request on the run's clock."""
        sent = now()
        text = self._fetch()
        received = now()
        # Parsing a few hundred lines takes ms (tens on a busy host): not on the load generator's loop.
        return off_the_event_loop(lambda: parse_metrics_text(text, (sent + received) / 2, self.source))

    def _fetch(self) -> str:
        while True:
            try:
                request = urllib.request.Request(self.url)
                authorization = self._urls[0].authorization()
                if authorization:
                    request.add_header("Authorization", authorization)
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return response.read().decode("utf-8", errors="replace")
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    raise
                if len(self._urls) > 1:
                    missing = str(self._urls.pop(0))
                    self._notes.append(f"server metrics: {missing} answered 404; scraped {self.url} instead")
                    continue
                raise MetricsNotFound(
                    f"{self.url} answered 404: no metrics there (SGLang needs --enable-metrics; "
                    "or set --server-metrics URL / --no-server-metrics)"
                ) from None
