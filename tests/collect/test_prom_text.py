"""The Prometheus text parser reads what prometheus_client's reference parser reads, and rejects junk."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadlab.collect.prom_text import MalformedMetrics, parse_metrics_text
from loadlab.collect.signals import canonical_name

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.txt")))
def test_same_series_and_values_as_the_reference_parser(fixture):
    assert_same_as_the_reference_parser((FIXTURES / fixture).read_text())


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.txt")))
def test_series_read_before_take_each_scrapes_own_values(fixture):
    """A page's series are remembered from one scrape to the next: only their values are new."""
    text = (FIXTURES / fixture).read_text()
    parse_metrics_text(text, time=0.0, source="server")
    counter = itertools.count(1)
    lines = [
        f"{line.rstrip().rpartition(' ')[0]} {next(counter)}" if line.strip() and not line.startswith("#") else line
        for line in text.splitlines()
    ]  # every sample line's value (or timestamp) another number
    later = "\n".join(lines)
    assert later != text
    assert_same_as_the_reference_parser(later)


def test_a_series_read_before_with_a_bad_value_is_still_malformed():
    parse_metrics_text('a{x="1"} 1\n', time=0.0, source="server")
    for junk, message in [('a{x="1"} one', "bad value"), ('a{x="1"}1', "line 1"), ('a{x="1"} 1 2 3', "line 1")]:
        with pytest.raises(MalformedMetrics, match=message):
            parse_metrics_text(junk, time=0.0, source="server")


def assert_same_as_the_reference_parser(text: str) -> None:
    ours = {
        (s.signal, tuple(sorted(s.labels.items()))): s.value
        for s in parse_metrics_text(text, time=0.0, source="server")
    }
    reference = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created") or math.isnan(s.value):
                continue
            c = canonical_name(s.name)
            key = (c.signal, tuple(sorted(s.labels.items())))
            reference.setdefault(key, s.value * c.scale)
    # The reference parser renames an untyped-looking counter (tgi_request_count -> _total).
    ours = {(k[0].removesuffix("_total"), k[1]): v for k, v in ours.items()}
    reference = {(k[0].removesuffix("_total"), k[1]): v for k, v in reference.items()}
    assert ours == reference


def test_escapes_timestamps_special_values_and_blank_lines():
    text = (
        '\n# a comment\n'
        'a{path="C:\\\\dir",quote="say \\"hi\\"",nl="x\\ny",} 1 1700000000000\n'
        '  b 2.5e-3  \n'
        'c{} +Inf\n'
        'd NaN\n'
    )
    samples = {s.signal: s for s in parse_metrics_text(text, time=5.0, source="server")}
    assert samples["a"].labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "x\ny"}
    assert samples["a"].value == 1 and samples["a"].time == 5.0  # the scrape's time, not the server's
    assert samples["b"].value == 0.0025
    assert samples["c"].value == math.inf
    assert "d" not in samples  # NaN carries no data


@pytest.mark.parametrize(
    "junk",
    [
        "<html><body>502 Bad Gateway</body></html>",
        '{"object": "error"}',
        'vllm:num_requests_running{model_name="m" 1',
        'vllm:num_requests_running{model_name=m} 1',
        "vllm:num_requests_running one",
        "Not Found",
        "",
        "# only comments\n",
    ],
)
def test_text_that_is_not_metrics_is_malformed(junk):
    with pytest.raises(MalformedMetrics):
        parse_metrics_text(junk, time=0.0, source="server")
