"""PollingCollector: a steady loop that survives failing polls and stops cleanly."""

import logging
import time

import pytest

from loadlab.collect.poller import PollingCollector
from loadlab.store.schema import Sample


class Flaky(PollingCollector):
    source = "flaky"

    def __init__(self, interval: float, fail_every: int = 0, available: bool = True) -> None:
        super().__init__(interval)
        self.fail_every, self.available, self.polls, self.closed = fail_every, available, 0, False

    def open(self) -> bool:
        if not self.available:
            self.disable("flaky source unavailable")
        return self.available

    def poll(self) -> list[Sample]:
        self.polls += 1
        if self.fail_every and self.polls % self.fail_every == 0:
            raise RuntimeError(f"boom {self.polls}")
        return [Sample(time.time(), self.source, "n", float(self.polls))]

    def close(self) -> None:
        self.closed = True


def test_failing_polls_are_counted_logged_once_and_the_loop_goes_on(caplog):
    c = Flaky(0.03, fail_every=2)
    got = []
    with caplog.at_level(logging.WARNING):
        c.start(got.extend)
        time.sleep(0.4)
        c.stop()
    cov = c.coverage()
    assert cov.failed_samples >= 3 and cov.ok_samples >= 3
    assert cov.error == "RuntimeError: boom 2"
    assert len([r for r in caplog.records if "boom" in r.getMessage()]) == 1
    assert [s.value for s in got] == [float(n) for n in range(1, c.polls + 1) if n % 2]
    assert c.closed


def test_unavailable_source_never_polls_and_stop_is_harmless():
    c = Flaky(0.01, available=False)
    c.start(lambda batch: None)
    time.sleep(0.05)
    c.stop()
    c.stop()
    assert c.polls == 0 and not c.coverage().enabled and not c.closed


def test_stop_returns_promptly_even_with_a_long_interval():
    c = Flaky(30.0)
    c.start(lambda batch: None)
    t0 = time.monotonic()
    c.stop()
    assert time.monotonic() - t0 < 5.0
    assert c.polls in (1, 2)  # the last tick at stop (the first may not have run yet)


def test_interval_must_be_positive():
    with pytest.raises(ValueError):
        Flaky(0.0)
