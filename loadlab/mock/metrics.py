"""The mock's Prometheus metrics under vLLM's names and buckets, in a private registry."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vLLM's bucket boundaries (v1 engine).
TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
REQUEST_LATENCY_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
LABELS = ("model_name", "engine")


class MockMetrics:
    """Series a vLLM server exports; gauges are read from the live request table when scraped."""

    def __init__(self, model: str, running: Callable[[], int], kv_usage: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model, "engine": "0"}

        def gauge(name: str, doc: str, read: Callable[[], float]) -> None:
            g = Gauge(name, doc, LABELS, registry=self.registry)
            g.labels(**labels).set_function(read)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=self.registry).labels(**labels)

        def histogram(name: str, doc: str, buckets: list[float]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=self.registry).labels(**labels)

        gauge("vllm:num_requests_running", "Requests generating tokens.", running)
        gauge("vllm:num_requests_waiting", "Requests waiting to start (the mock never queues).", lambda: 0)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 0..1 (tokens held / capacity).", kv_usage)
        self.preemptions = counter("vllm:num_preemptions", "Preemptions (the mock never preempts).")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Inter-token latency.", ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", REQUEST_LATENCY_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds", "Time spent waiting.", REQUEST_LATENCY_BUCKETS)
        self._success = Counter(
            "vllm:request_success", "Finished requests.", (*LABELS, "finished_reason"), registry=self.registry
        )
        self._labels = labels

    def finished(self, reason: str) -> None:
        """Count one request that ran to its end ("length", "stop" or "abort")."""
        self._success.labels(**self._labels, finished_reason=reason).inc()

    def exposition(self) -> bytes:
        """The Prometheus text format of every series."""
        return generate_latest(self.registry)
