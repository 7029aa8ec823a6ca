"""NCCL Inspector files -> collective samples."""

import logging
import time
from pathlib import Path

import pytest

from loadlab.collect.nccl import NcclInspectorCollector
from loadlab.store.schema import Sample
from tests.support.nccl_inspector import DUMP_US, inspector_line


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_tails_inspector_files_into_collective_samples(tmp_path, caplog):
    dump_dir = tmp_path / "nccl-inspector-unknown-jobid"
    collector = NcclInspectorCollector(str(dump_dir), interval=0.1)
    got: list[Sample] = []
    with caplog.at_level(logging.WARNING):
        collector.start(got.extend)  # before the plugin has created anything
        time.sleep(0.25)
        dump_dir.mkdir()
        rank0, rank1 = dump_dir / "node0-pid4100.log", dump_dir / "node0-pid4101.log"
        append(rank0, inspector_line(0, 10, 400) + inspector_line(0, 11, 500))
        append(rank1, inspector_line(1, 10, 450))
        wait_for(lambda: collector.records == 3)
        # The sequence jumps 11 -> 14: the record stands for 3 collectives.
        line = inspector_line(0, 14, 300)
        append(rank0, line[:40])  # a line caught half-written
        time.sleep(0.3)
        append(rank0, line[40:] + '{"header": {"id": "0x1"\n' + "not json\n")
        append(rank1, inspector_line(1, 12, 350, kernel_stop_us=DUMP_US + 5_000_000))
        wait_for(lambda: collector.records == 5 and collector.malformed == 2)
        collector.stop()

    times = [s for s in got if s.signal == "collective_time"]
    assert sorted((s.labels["rank"], s.value) for s in times) == [
        ("0", 0.0003),
        ("0", 0.0004),
        ("0", 0.0005),
        ("1", 0.00035),
        ("1", 0.00045),
    ]
    assert all(s.labels["coll"] == "AllReduce" and s.labels["n_ranks"] == "2" and s.source == "nccl" for s in times)
    calls = sorted((s.labels["rank"], s.value) for s in got if s.signal == "collective_calls")
    assert calls == [("0", 1.0), ("0", 1.0), ("0", 3.0), ("1", 1.0), ("1", 2.0)]
    verbose = [s for s in times if s.value == 0.00035][0]
    assert verbose.time == pytest.approx((DUMP_US + 5_000_000) / 1e6)  # the kernel stop time
    plain = [s for s in times if s.value == 0.0004][0]
    assert plain.time == pytest.approx((DUMP_US + 10 * 1000) / 1e6)  # the dump time
    totals = {
        r: sum(s.value for s in got if s.signal == "collective_seconds" and s.labels["rank"] == r) for r in ("0", "1")
    }
    assert totals["0"] == pytest.approx(0.0004 + 0.0005 + 3 * 0.0003)
    assert totals["1"] == pytest.approx(0.00045 + 2 * 0.00035)
    assert [s for s in got if s.signal == "collective_seconds" and s.value == 0.0]  # idle intervals too
    cov = collector.coverage()
    assert cov.enabled and cov.failed_samples == 2 and "malformed" in cov.error
    assert len([r for r in caplog.records if "malformed" in r.getMessage()]) == 1


def test_no_files_at_all_is_recorded_in_coverage(tmp_path):
    collector = NcclInspectorCollector(str(tmp_path / "missing"), interval=0.05)
    collector.start(lambda batch: None)
    time.sleep(0.15)
    collector.stop()
    assert "no NCCL Inspector records" in collector.coverage().error


def test_a_file_gone_since_the_listing_loses_nothing_read_from_the_others(tmp_path, monkeypatch):
    rank0 = tmp_path / "node0-pid4100.log"
    append(rank0, inspector_line(0, 10, 400))
    collector = NcclInspectorCollector(str(tmp_path), interval=0.05)
    # The plugin's process exited and its file was removed between rglob() and open().
    monkeypatch.setattr(collector, "_files", lambda: [tmp_path / "node0-pid4101.log", rank0])
    samples = collector.poll()
    assert [x.value for x in samples if x.signal == "collective_time"] == [0.0004]
    assert "node0-pid4101.log" in collector.coverage().error
