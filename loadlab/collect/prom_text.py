"""Prometheus series -> canonical Samples: the text format of a /metrics page, or one series value.

The parser is a small regex one: prometheus_client's reference parser spends ~30 us per line
(12 ms for the reference server's 400-line page, every second), this one ~4 us on a series first
seen and ~1.5 us on one seen before. A server lists the same series on every scrape with new
values, so what a series line's name and labels resolve to (its canonical signal, scale and label
set) is parsed once and remembered; each scrape then reads only the values. It reads the sample
lines of the text exposition format (comments and TYPE/HELP lines are skipped: the mapping works
from names alone) and rejects anything else as malformed.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from loadlab.collect.signals import canonical_name
from loadlab.store.schema import Sample

# name, optional {labels}, value, optional timestamp (ms, ignored: we stamp the scrape ourselves)
_SAMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_VALUE = re.compile(r"[ \t]+(\S+)(?:[ \t]+-?\d+)?")  # what follows the name and labels
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPE = re.compile(r"\\(.)")
_REMEMBERED_SERIES = 65_536  # series whose parse is kept (a page holds hundreds); then it starts over


class MalformedMetrics(ValueError):
    """The text is not the Prometheus exposition format."""


class Series(NamedTuple):
    """Where a raw series (name and labels) lands: its canonical signal and scale, its labels, and
    the key that tells it apart from other series."""

    signal: str
    scale: float
    labels: dict[str, str]
    key: tuple

    def sample(self, value: float, time: float, source: str) -> Sample:
        """Its value at `time` as a Sample (with a label set of its own)."""
        return Sample(time=time, source=source, signal=self.signal, value=value * self.scale, labels=dict(self.labels))


_known: dict[str, Series | None] = {}  # a line's `name{labels}` part -> its series (None: no data)
_UNREAD = Series("", 1.0, {}, ())  # (not in _known)


def series_of(name: str, labels: dict[str, str]) -> Series | None:
    """A raw series under its canonical name; None for a `_created` series (a counter's creation
    timestamp), which carries no data."""
    if name.endswith("_created"):
        return None
    canonical = canonical_name(name)
    return Series(canonical.signal, canonical.scale, labels, (canonical.signal, tuple(sorted(labels.items()))))


def series_sample(name: str, labels: dict[str, str], value: float, time: float, source: str) -> Sample | None:
    """One raw series value as a Sample under its canonical name; None when it carries no data.

    `_created` series (a counter's creation timestamp) and NaN values are dropped.
    """
    series = series_of(name, labels)
    if series is None or math.isnan(value):
        return None
    return series.sample(value, time, source)


def parse_metrics_text(text: str, time: float, source: str) -> list[Sample]:
    """Every series of one scrape, all stamped `time`; a series repeated under one signal and
    label set is kept once (`first_of_each_series`). Raises MalformedMetrics on bad text."""
    samples = []
    seen: set[tuple] = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        series, value = _read_line(line, number)
        if series is None or math.isnan(value) or series.key in seen:
            continue
        seen.add(series.key)
        samples.append(series.sample(value, time, source))
    if not samples:
        raise MalformedMetrics("no metrics in the response")
    return samples


def _read_line(line: str, number: int) -> tuple[Series | None, float]:
    """A sample line's series and value: from memory when its `name{labels}` part was read before."""
    # That part ends at the line's last `}` (a valid value or timestamp holds none), or with the name.
    end = line.rfind("}") + 1
    if not end:
        named = _NAME.match(line)
        end = named.end() if named else 0
    rest = _VALUE.fullmatch(line, end) if end else None
    head = line[:end]
    if rest is not None and (known := _known.get(head, _UNREAD)) is not _UNREAD:
        try:
            return known, float(rest.group(1))
        except ValueError:
            pass  # the full parse below says what is wrong
    name, labels, value = _parse_line(line, number)
    series = series_of(name, labels)
    if rest is not None:  # (a line that parses splits where the full pattern does)
        if len(_known) >= _REMEMBERED_SERIES:
            _known.clear()
        _known[head] = series
    return series, value


def _parse_line(line: str, number: int) -> tuple[str, dict[str, str], float]:
    match = _SAMPLE_LINE.fullmatch(line)
    if match is None:
        raise MalformedMetrics(f"not Prometheus text, line {number}: {line[:80]!r}")
    name, body, value = match.groups()
    labels: dict[str, str] = {}
    position = 0
    while body and position < len(body):
        label = _LABEL.match(body, position)
        if label is None or label.end() == position:
            raise MalformedMetrics(f"not Prometheus text, bad labels on line {number}: {line[:80]!r}")
        raw = label.group(2)
        labels[label.group(1)] = _ESCAPE.sub(_unescape, raw) if "\\" in raw else raw
        position = label.end()
    try:
        return name, labels, float(value)
    except ValueError:
        raise MalformedMetrics(f"not Prometheus text, bad value on line {number}: {line[:80]!r}") from None


def _unescape(match: re.Match) -> str:
    return "\n" if match.group(1) == "n" else match.group(1)


def first_of_each_series(samples: list[Sample]) -> list[Sample]:
    """Drop samples repeating an earlier one's signal, labels and time.

    Two raw names can map to one signal on the same server: vLLM exposed the old and the new KV
    name side by side for a while. Counting both would double the series.
    """
    seen: set[tuple] = set()
    unique = []
    for s in samples:
        key = (s.signal, s.time, tuple(sorted(s.labels.items())))
        if key not in seen:
            seen.add(key)
            unique.append(s)
    return unique
