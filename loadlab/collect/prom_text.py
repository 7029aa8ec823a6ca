"""Prometheus series -> canonical Samples: the text format of a /metrics page, or one series value."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from loadlab.collect.samples import Sample
from loadlab.collect.signals import canonical_name


class MalformedMetrics(ValueError):
    """The text is not the Prometheus exposition format."""


def series_sample(name: str, labels: dict[str, str], value: float, time: float, source: str) -> Sample | None:
    """One raw series value as a Sample under its canonical name; None when it carries no data.

    `_created` series (a counter's creation timestamp) and NaN values are dropped.
    """
    if name.endswith("_created") or math.isnan(value):
        return None
    canonical = canonical_name(name)
    return Sample(time=time, source=source, signal=canonical.signal,
                  value=value * canonical.scale, labels=dict(labels))


def parse_metrics_text(text: str, time: float, source: str) -> list[Sample]:
    """Every series of one scrape, all stamped `time`. Raises MalformedMetrics on bad text."""
    try:
        series = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, TypeError, IndexError) as e:  # the parser's ways of saying "not metrics"
        raise MalformedMetrics(f"not Prometheus text: {e}") from None
    samples = [series_sample(s.name, s.labels, float(s.value), time, source) for s in series]
    kept = first_of_each_series([s for s in samples if s is not None])
    if not kept:
        raise MalformedMetrics("no metrics in the response")
    return kept


def first_of_each_series(samples: list[Sample]) -> list[Sample]:
    """Drop samples repeating an earlier one's signal, labels and time.

    Two raw names can map to one signal on the same server: vLLM exposed the old and the new KV
    name side by side for a while, and the reference server has both `vllm:iteration_tokens_total`
    and `loadlab_server_tokens_per_step`. Counting both would double the series.
    """
    seen: set[tuple] = set()
    unique = []
    for s in samples:
        key = (s.signal, s.time, tuple(sorted(s.labels.items())))
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique
