"""Prometheus metrics with vLLM's names, labels and buckets, plus loadlab's per-step histograms (each
value exported once: tokens per step is vLLM's `vllm:iteration_tokens_total`)."""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from reference_server.accounting import StepWork
from reference_server.engine.sequence import Sequence

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
# vLLM's buckets, with finer ones added below vLLM's smallest (ITL, request phases): a CPU model's
# steps take milliseconds, and quantiles need resolution there.
ITL_BUCKETS = [
    0.001,
    0.0025,
    0.005,
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
REQUEST_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
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
ITERATION_TOKEN_BUCKETS: list[float] = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
STEP_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]
COLLECTIVE_BUCKETS = [0.0, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5]
BATCH_BUCKETS: list[float] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
PHASES = ("prefill", "decode", "mixed")  # label `phase` of the per-step histograms


def one_two_five(limit: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to limit (vLLM's buckets for token counts)."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > limit:
                return out
            out.append(float(m * scale))
        scale *= 10


class CountedHistogram(Collector):
    """A histogram exported as prometheus_client's are, whose observations may carry a count: the
    tokens of one step share few inter-token gaps, each observed once (the per-token hot path)."""

    def __init__(
        self, name: str, doc: str, labels: dict[str, str], buckets: list[float], registry: CollectorRegistry
    ) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.bounds = [*buckets, math.inf]
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self._lock = threading.Lock()  # the engine thread observes, a scrape reads
        registry.register(self)

    def observe(self, value: float, count: int = 1) -> None:
        """Observe `value`, `count` times."""
        bucket = bisect.bisect_left(self.bounds, value)  # the first bound >= value, as `le` means
        with self._lock:
            self.counts[bucket] += count
            self.sum += value * count

    def collect(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total = list(self.counts), self.sum
        family = HistogramMetricFamily(self.name, self.doc, labels=list(self.labels))
        cumulative = itertools.accumulate(counts)
        buckets = [(floatToGoString(b), float(c)) for b, c in zip(self.bounds, cumulative, strict=True)]
        family.add_metric(list(self.labels.values()), buckets, total)
        yield family


class EngineMetrics:
    """Every series the engine exports, all labelled with model_name and engine."""

    def __init__(self, model_name: str, max_model_len: int, max_num_seqs: int) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        values = {"model_name": model_name, "engine": "0"}
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r).labels(**values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r).labels(**values)

        def histogram(name: str, doc: str, buckets: list[float]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(**values)

        self.running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        # The configured cap of `running` (vLLM exports no such series: its `vllm:cache_config_info`
        # holds the cache's settings, not the scheduler's), so an analyzer can tell running pinned
        # at the cap from running that merely peaked.
        gauge("loadlab_server_max_num_seqs", "Most sequences running at once (--max-num-seqs).").set(max_num_seqs)
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0..1).")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions by recompute.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens computed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Tokens generated.")
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in tokens of the requests admitted."
        )
        self.prefix_cache_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens whose KV was reused.")
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Tokens per engine step.", ITERATION_TOKEN_BUCKETS
        )
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Arrival to first token.", TTFT_BUCKETS)
        self.itl = CountedHistogram(
            "vllm:inter_token_latency_seconds", "Gap between output tokens.", values, ITL_BUCKETS, r
        )
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Arrival to finish.", REQUEST_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds", "Arrival to first scheduled.", REQUEST_BUCKETS)
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds", "First scheduled to first token.", REQUEST_BUCKETS
        )
        self.decode_time = histogram("vllm:request_decode_time_seconds", "First token to last token.", REQUEST_BUCKETS)
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds", "First scheduled to last token.", REQUEST_BUCKETS
        )
        token_buckets = one_two_five(max_model_len)
        self.prompt_tokens_per_request = histogram(
            "vllm:request_prompt_tokens", "Prompt length per request.", token_buckets
        )
        self.generation_tokens_per_request = histogram(
            "vllm:request_generation_tokens", "Output length per request.", token_buckets
        )
        self._success = Counter("vllm:request_success", "Finished requests.", labels + ["finished_reason"], registry=r)
        self._values = values
        step = Histogram(
            "loadlab_server_step_seconds",
            "Wall time of one engine step.",
            labels + ["phase"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.step_seconds = {ph: step.labels(**values, phase=ph) for ph in PHASES}
        # By phase too: a decode step carries one token per sequence, so its batch is its tokens,
        # and the analyzer's step-time fit can set decode steps apart from prefill ones.
        batch = Histogram(
            "loadlab_server_batch_size",
            "Sequences per engine step.",
            labels + ["phase"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_size = {ph: batch.labels(**values, phase=ph) for ph in PHASES}
        self.collective_seconds = histogram(
            "loadlab_server_collective_seconds", "Tensor-parallel collective time per engine step.", COLLECTIVE_BUCKETS
        )
        # vLLM's --enable-mfu-metrics counters, from reference_server.accounting (on here by default).
        self.estimated_flops = counter("vllm:estimated_flops_per_gpu", "Estimated FLOPs per GPU of the steps run.")
        self.estimated_read_bytes = counter(
            "vllm:estimated_read_bytes_per_gpu", "Estimated HBM bytes read per GPU by the steps run."
        )
        self.estimated_write_bytes = counter(
            "vllm:estimated_write_bytes_per_gpu", "Estimated HBM bytes written per GPU by the steps run."
        )
        for reason in ("stop", "length", "abort", "error"):
            self._success.labels(**values, finished_reason=reason)  # export zeros from the start

    def record_work(self, work: StepWork) -> None:
        """Count a step's estimated FLOPs and bytes."""
        self.estimated_flops.inc(work.flops)
        self.estimated_read_bytes.inc(work.read_bytes)
        self.estimated_write_bytes.inc(work.write_bytes)

    def request_finished(self, seq: Sequence, reason: str, now: float) -> None:
        """Count a finished request and observe its phases (those it reached)."""
        self._success.labels(**self._values, finished_reason=reason).inc()
        self.e2e.observe(now - seq.arrival)
        self.prompt_tokens_per_request.observe(len(seq.prompt_ids))
        self.generation_tokens_per_request.observe(len(seq.output_ids))
        if seq.first_scheduled is not None:
            self.queue_time.observe(seq.first_scheduled - seq.arrival)
            if seq.first_token_time is not None and seq.last_token_time is not None:
                self.prefill_time.observe(seq.first_token_time - seq.first_scheduled)
                self.decode_time.observe(seq.last_token_time - seq.first_token_time)
                self.inference_time.observe(seq.last_token_time - seq.first_scheduled)
