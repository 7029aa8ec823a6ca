"""RunWriter: what a run folder holds while a run goes on, after it ends, and after a kill -9."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loadlab.clock import ClockAnchor, now, process_anchor
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import FORMAT, Coverage, Sample, StepInfo
from tests.support.disk import fill, small_tmpfs
from tests.support.procs import REPO
from tests.support.records import record


def parts(folder: Path, table: str) -> list[Path]:
    return sorted((folder / table).glob("part-*.parquet"))


def test_round_trip_keeps_every_field_and_the_token_times_list(tmp_path: Path) -> None:
    t = now()
    records = [
        record(0, t),
        record(1, t, warmup=True, token_times=[], conversation="c1", turn=2, error_detail="ünïcode ✓"),
        record(
            2,
            t,
            first_token_time=math.nan,
            token_times=[],
            completion_tokens=-1,
            client_tokens=0,
            status=503,
            error="http_5xx",
            error_detail="Service Unavailable",
            step=1,
        ),
    ]
    samples = [
        Sample(t, "server", "requests_running", 4.0, {"model": "m", "instance": "a"}),
        Sample(t + 1, "client", "client_cpu", 0.25),
    ]
    writer = RunWriter(tmp_path / "run", RunConfig(url="http://x", api_key="secret"), process_anchor())
    writer.add_requests(records)
    writer.add_samples(samples)
    writer.close()

    run = load_run(tmp_path / "run")
    assert len(run.requests) == 3
    for rec, (_, row) in zip(records, run.requests.iterrows(), strict=True):
        for name, value in vars(rec).items():
            got = row[name]
            if name == "token_times":
                assert list(got) == value
            elif isinstance(value, float) and math.isnan(value):
                assert math.isnan(got)
            else:
                assert got == value, name
    assert run.samples[["time", "source", "signal", "value"]].values.tolist() == [
        [t, "server", "requests_running", 4.0],
        [t + 1, "client", "client_cpu", 0.25],
    ]
    assert [json.loads(x) for x in run.samples["labels"]] == [{"instance": "a", "model": "m"}, {}]
    assert "secret" not in (tmp_path / "run" / "run.json").read_text()
    assert run.meta.config == RunConfig(url="http://x")  # read back typed, the key left out


def test_run_json_is_written_at_once_and_follows_steps_anchors_and_the_end(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    # The run's clock reads ~1005 now: the steps below (1001, 1002) begin before the run ends.
    anchor = ClockAnchor(wall=1000.0, monotonic=time.perf_counter() - 5)
    writer = RunWriter(folder, RunConfig(url="http://x", concurrency=[1, 2]), anchor)
    meta = json.loads((folder / "run.json").read_text())
    assert meta["format"] == FORMAT and meta["status"] == "running"
    assert meta["config"]["concurrency"] == [1, 2] and "api_key" not in meta["config"]
    assert meta["anchors"] == {"wall": 1000.0, "monotonic": anchor.monotonic}
    assert set(meta["versions"]) >= {"loadlab", "python", "locust", "platform"}
    assert meta["host"]["pid"] == os.getpid()
    assert 1000.0 <= meta["started_at"] < 1010.0  # on the given anchor's clock

    writer.begin_step(StepInfo(0, "concurrency=1", "closed", 1, 1001.0))
    writer.end_step(0, 1002.0)
    writer.begin_step(StepInfo(1, "concurrency=2", "closed", 2, 1002.0))
    writer.set_worker_anchor("host:7", ClockAnchor(wall=1000.5, monotonic=3.0))
    meta = json.loads((folder / "run.json").read_text())
    assert [(s["index"], s["end_time"]) for s in meta["steps"]] == [(0, 1002.0), (1, None)]
    assert meta["worker_anchors"] == {"host:7": {"wall": 1000.5, "monotonic": 3.0}}

    writer.close(status="interrupted", coverage=[Coverage("gpu", False, error="no NVML")])
    run = load_run(folder)
    assert run.meta.status == "interrupted" and not run.meta.cut_off
    assert run.meta.ended_at >= run.meta.started_at
    assert run.meta.steps[1].end_time == run.meta.ended_at  # a step still open ends with the run
    assert run.meta.coverage == [Coverage("gpu", False, error="no NVML")]
    assert not (folder / "summary.json").exists()  # the writer stops at the run folder; analyze/ summarizes
    assert not list(folder.rglob(".*.tmp"))


def test_a_warning_is_written_at_once_and_read_back(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    writer = RunWriter(folder, RunConfig(url="http://x", concurrency=[1]), process_anchor())
    writer.add_warning("load-generator process host:7 died")
    assert json.loads((folder / "run.json").read_text())["warnings"] == ["load-generator process host:7 died"]
    writer.close(status="degraded")
    assert load_run(folder).meta.warnings == ["load-generator process host:7 died"]


def test_each_flush_adds_a_part_and_an_empty_flush_adds_none(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", RunConfig(), process_anchor())
    writer.flush()
    assert parts(tmp_path / "run", "requests") == [] and parts(tmp_path / "run", "samples") == []
    writer.add_requests([record(0, now())])
    writer.flush()
    writer.add_requests([record(1, now()), record(2, now())])
    writer.flush()
    writer.flush()
    assert len(parts(tmp_path / "run", "requests")) == 2
    assert parts(tmp_path / "run", "samples") == []
    assert list(load_run(tmp_path / "run").requests["request_id"]) == ["r0", "r1", "r2"]
    writer.close()
    writer.close()  # a second close changes nothing


def test_close_compacts_the_parts_into_one_that_holds_every_row(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", RunConfig(), process_anchor())
    for i in range(3):
        writer.add_requests([record(i, now())])
        writer.add_samples([Sample(now(), "host", "cpu", float(i))])
        writer.flush()
    writer.add_requests([record(3, now())])
    writer.close()
    assert [p.name for p in parts(tmp_path / "run", "requests")] == ["part-000001-000007.parquet"]
    assert [p.name for p in parts(tmp_path / "run", "samples")] == ["part-000002-000006.parquet"]
    run = load_run(tmp_path / "run")
    assert list(run.requests["request_id"]) == ["r0", "r1", "r2", "r3"]
    assert list(run.samples["value"]) == [0.0, 1.0, 2.0]


def test_autoflush_writes_parts_without_being_asked(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", RunConfig(), process_anchor())
    writer.start_autoflush(interval=0.2)
    writer.add_requests([record(0, now())])
    writer.add_samples([Sample(now(), "client", "client_cpu", 0.1)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not parts(tmp_path / "run", "samples"):
        time.sleep(0.05)
    assert len(parts(tmp_path / "run", "requests")) == 1
    assert len(parts(tmp_path / "run", "samples")) == 1
    writer.close()


def test_a_full_disk_keeps_the_rows_in_memory_and_closes_as_failed_with_what_fit(tmp_path: Path) -> None:
    """A real tmpfs fills up: the flush fails without losing a row, close() writes what fits
    in small parts (the reserve makes room for run.json and summary.json) and counts the rest."""
    with small_tmpfs(tmp_path / "disk", size="2m") as disk:
        t = now()
        writer = RunWriter(disk / "run", RunConfig(url="http://x"), process_anchor())
        writer.add_requests([record(i, t) for i in range(100)])
        writer.flush()
        fill(disk)
        writer.add_requests([record(i, t + 1) for i in range(100, 20100)])
        with pytest.raises(OSError):
            writer.flush()
        writer.add_requests([record(20100, t + 2)])  # still buffered after the failure
        ballast = disk / "ballast"
        os.truncate(ballast, ballast.stat().st_size - 100 * 1024)  # room for some of them
        writer.close()
        assert writer.failure == "No space left on device" and writer.unsaved > 0
        run = load_run(disk / "run")
        assert run.meta.status == "failed" and f"{writer.unsaved} finished requests" in run.meta.reason
        assert len(run.requests) + writer.unsaved == 20101
        assert len(run.requests) > 100  # in small parts, what fitted was written
        assert run.requests["request_id"].is_unique
        assert not (disk / "run" / ".reserve").exists()


def test_refuses_a_folder_that_already_holds_a_run(tmp_path: Path) -> None:
    RunWriter(tmp_path / "run", RunConfig(), process_anchor()).close()
    with pytest.raises(UserError, match="already holds a run"):
        RunWriter(tmp_path / "run", RunConfig(), process_anchor())


def test_an_empty_existing_folder_is_accepted(tmp_path: Path) -> None:
    RunWriter(tmp_path, RunConfig(), process_anchor()).close()
    assert load_run(tmp_path).meta.status == "finished"


# The child writes one record every 5 ms with end_time = now, through autoflush at its default
# interval, until it is killed. It is gevent-patched, as the writer is inside `loadlab run`.
_CHILD = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()
    import sys, time
    from pathlib import Path
    from loadlab.clock import now, process_anchor
    from loadlab.config import RunConfig
    from loadlab.store.run_folder import RunWriter
    from loadlab.store.schema import RequestRecord, StepInfo

    writer = RunWriter(Path(sys.argv[1]), RunConfig(concurrency=[1]), process_anchor())
    writer.begin_step(StepInfo(0, "concurrency=1", "closed", 1, now()))
    writer.start_autoflush()
    print("ready", flush=True)
    for i in range(100_000):            # bounded: ~10 minutes at most, killed long before
        t = now()
        writer.add_requests([RequestRecord(str(i), "child", 0, False, "chat", t, t, t, t, [t, t])])
        time.sleep(0.005)
""")


def test_kill_9_mid_run_keeps_everything_older_than_the_flush_interval(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(folder)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(3.5)
    finally:
        killed_at = time.time()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL

    run = load_run(folder)
    assert run.meta.cut_off and run.warnings  # still "running": the reader says so
    assert len(run.meta.steps) == 1
    ids = sorted(int(i) for i in run.requests["request_id"])
    assert ids == list(range(len(ids)))  # whole parts only: no gaps, no duplicates
    # autoflush runs every second; 1.5 s more margin for a loaded 2-core machine
    older = run.requests["end_time"].max()
    assert older >= killed_at - 2.5, "records older than the flush interval (+ margin) were lost"
    assert not (folder / "summary.json").exists()


def test_a_folder_holding_its_run_as_run_stands_for_it(tmp_path: Path) -> None:
    from loadlab.store.run_folder import run_folder_in

    (tmp_path / "config" / "run").mkdir(parents=True)
    assert run_folder_in(tmp_path / "config") == tmp_path / "config"  # no run.json inside: itself
    (tmp_path / "config" / "run" / "run.json").write_text("{}")
    assert run_folder_in(tmp_path / "config") == tmp_path / "config" / "run"
    assert run_folder_in(tmp_path / "config" / "run") == tmp_path / "config" / "run"
