"""Pull the run window's series from a Prometheus server, once, when the run ends.

Useful when the serving fleet is already scraped (many replicas, dcgm-exporter on every node):
loadlab asks Prometheus for the known engine metrics and every DCGM series over the run window
and stores them under their canonical names (source "prometheus"), timestamped by Prometheus.
"""

from __future__ import annotations

import logging
import math
import re
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from loadlab.clock import now
from loadlab.collect.prom_text import first_of_each_series, series_sample
from loadlab.collect.protocol import SampleSink
from loadlab.collect.signals import ALL_MAPPINGS, DCGM
from loadlab.errors import UserError
from loadlab.store.schema import Coverage, Sample
from loadlab.urls import parse_http_url, without_credentials

if TYPE_CHECKING:  # imported in pull() only: it imports requests
    from prometheus_api_client import PrometheusConnect

log = logging.getLogger(__name__)

# Prometheus refuses range queries of more than 11,000 points per series.
MAX_POINTS_PER_QUERY = 10_000
# The pull happens once, at the end of the run: worth one quiet retry.
ATTEMPTS = 2
RETRY_PAUSE = 0.5

# Label matchers, with or without their braces: '{job="vllm"}' or 'job="vllm", instance=~"n.*"'.
_SELECTOR = re.compile(r"^\{?(?P<matchers>[^{}]*?)\}?$", re.DOTALL)
_MATCHER = re.compile(r"""^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*["'`]""")


def series_query(selector: str = "") -> str:
    """The PromQL selector for every known engine metric (any suffix) and every DCGM series.

    `selector` adds its label matchers to the query: '{job="vllm"}' or 'job="vllm"'.
    """
    text = selector.strip()
    match = _SELECTOR.match(text)
    matchers = match.group("matchers").strip().rstrip(",").strip() if match else None
    balanced = text.startswith("{") == text.endswith("}")
    if matchers is None or not balanced or (matchers and not _MATCHER.match(matchers)):
        raise UserError(f"Prometheus selector must be label matchers such as '{{job=\"vllm\"}}', got {selector!r}")
    engine_names = sorted(name for name in ALL_MAPPINGS if name not in DCGM)
    # Metric names hold only [a-zA-Z0-9_:], none of them special in a regex.
    name_regex = f"({'|'.join(engine_names)})(_bucket|_sum|_count|_total)?|DCGM_FI_.+"
    return "{" + ", ".join([f'__name__=~"{name_regex}"', *([matchers] if matchers else [])]) + "}"


class PrometheusCollector:
    """Records the run window on start(); on stop() queries Prometheus over it and sinks the samples.

    Coverage: ok = samples pulled, failed = 1 when the query failed (its error kept, logged once).
    """

    source = "prometheus"

    def __init__(self, url: str, selector: str = "", step: float = 1.0, timeout: float = 30.0) -> None:
        if not step > 0:
            raise UserError(f"Prometheus query step must be > 0, got {step}")
        parsed = parse_http_url(url, "--prometheus")
        self.url = str(parsed).rstrip("/")  # without credentials: it is logged
        self._auth = (parsed.username, parsed.password) if parsed.has_credentials else None
        self.query = series_query(selector)
        self.step = step
        self.timeout = timeout
        self._coverage = Coverage(source=self.source, enabled=True)
        self._sink: SampleSink | None = None
        self._start = math.nan

    def start(self, sink: SampleSink) -> None:
        """Remember where the samples go and when the window begins."""
        self._sink = sink
        self._start = now()

    def stop(self) -> None:
        """Pull the window [start, now] and hand the samples to the sink; never raises."""
        if self._sink is None:
            return
        sink, self._sink = self._sink, None
        end = now()
        for attempt in range(ATTEMPTS):
            try:
                samples = self.pull(self._start, end)
                break
            except Exception as e:  # Prometheus down or refusing: the run keeps what it has
                error = f"{type(e).__name__}: {e}"
                if attempt + 1 < ATTEMPTS:
                    time.sleep(RETRY_PAUSE)
        else:
            self._coverage.failed_samples += 1
            # requests' messages repeat the whole query URL, credentials included
            self._coverage.error = without_credentials(error)[:300]
            log.warning("prometheus collector: query to %s failed: %s", self.url, self._coverage.error)
            return
        self._coverage.ok_samples += len(samples)
        if samples:
            sink(samples)

    def coverage(self) -> Coverage:
        """Samples pulled, or the error that prevented it."""
        return self._coverage

    def notes(self) -> list[str]:
        """No fallback to tell of: one query over the run's window, or its error in the coverage."""
        return []

    def pull(self, start: float, end: float) -> list[Sample]:
        """Every matching series over [start, end] at `step`, as canonical samples."""
        from prometheus_api_client import PrometheusConnect  # imports requests: only when used
        from urllib3.util.retry import Retry

        # No retries inside urllib3: each one logs a warning line; stop() retries quietly.
        client = PrometheusConnect(
            url=self.url, disable_ssl=True, timeout=self.timeout, retry=Retry(total=0), auth=self._auth
        )
        samples: list[Sample] = []
        try:
            chunk = self.step * MAX_POINTS_PER_QUERY
            t = start
            while t <= end:
                chunk_end = min(end, t + chunk - self.step)
                samples += self._query(client, t, chunk_end)
                t = chunk_end + self.step
        finally:
            client.close()
        return samples

    def _query(self, client: PrometheusConnect, start: float, end: float) -> list[Sample]:
        # The library rounds start/end to whole seconds; exact floats go in through params.
        result = client.custom_query_range(
            self.query,
            start_time=_utc(start),
            end_time=_utc(end),
            step=str(self.step),
            params={"start": f"{start:.3f}", "end": f"{end:.3f}"},
        )
        samples: list[Sample] = []
        for series in result:
            labels = dict(series["metric"])
            name = labels.pop("__name__", "")
            for timestamp, value in series.get("values", []):
                sample = series_sample(name, labels, float(value), float(timestamp), self.source)
                if sample is not None:
                    samples.append(sample)
        return first_of_each_series(samples)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)
