"""load_run: reads finished and cut-off runs, skips damaged parts, rejects what is not a run folder."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadlab.clock import now, process_anchor
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.store.reader import RunFolderError, labels_of, load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.tables import REQUEST_SCHEMA, SAMPLE_SCHEMA
from tests.support.records import record
from tests.support.runs import as_killed, edit_run_json, fill_run


def test_a_run_without_parts_loads_as_empty_tables_with_all_columns(tmp_path: Path) -> None:
    RunWriter(tmp_path, RunConfig(), process_anchor())  # never closed: cut off at once
    run = load_run(as_killed(tmp_path))
    assert list(run.requests.columns) == REQUEST_SCHEMA.names and len(run.requests) == 0
    assert list(run.samples.columns) == SAMPLE_SCHEMA.names and len(run.samples) == 0
    assert run.meta.cut_off
    assert any("cut off" in w for w in run.warnings)


def test_a_damaged_part_is_skipped_with_a_warning_and_the_rest_is_kept(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, RunConfig(), process_anchor())
    writer.add_requests([record(0, now())])
    writer.flush()
    writer.add_requests([record(1, now())])
    writer.flush()
    (tmp_path / "requests" / "part-999999.parquet").write_bytes(b"PAR1 not really")
    (tmp_path / "requests" / ".part-000003.parquet.tmp").write_bytes(b"half written")
    run = load_run(tmp_path)
    assert list(run.requests["request_id"]) == ["r0", "r1"]
    assert [w for w in run.warnings if "part-999999.parquet" in w]
    assert not [w for w in run.warnings if ".tmp" in w]  # temporary files are not parts


def test_a_compacted_part_replaces_the_single_parts_it_covers(tmp_path: Path) -> None:
    """As a writer killed while deleting the single parts after compacting leaves the folder."""
    writer = RunWriter(tmp_path, RunConfig(), process_anchor())
    for i in range(3):
        writer.add_requests([record(i, now())])
        writer.flush()
    requests = tmp_path / "requests"
    kept = {p.name: p.read_bytes() for p in requests.glob("part-*.parquet")}
    writer.add_requests([record(3, now())])
    writer.close()  # compacts parts 1..4
    for name, data in kept.items():  # singles 1..3 back, as if never deleted
        (requests / name).write_bytes(data)
    assert list(load_run(tmp_path).requests["request_id"]) == ["r0", "r1", "r2", "r3"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "does not exist"),
        (lambda p: p.mkdir(), "has no run.json"),
        (lambda p: (p.mkdir(), (p / "run.json").write_text("{not json")), "unreadable"),
        (lambda p: (p.mkdir(), (p / "run.json").write_text(json.dumps({"format": "x"}))), 'format "x"'),
        (lambda p: (p.mkdir(), (p / "run.json").write_text("[]")), "a JSON array, not an object"),
        (lambda p: _valid_run_json_with(p, worker_anchors=[1]), "worker_anchors is an array, not an object"),
        (lambda p: _valid_run_json_with(p, config=[1]), "config"),
        (lambda p: _valid_run_json_with(p, status=5), "status"),
        (lambda p: _valid_run_json_with(p, status="done"), "status is 'done', not one of running, finished"),
        (
            lambda p: _valid_run_json_with(
                p, steps=[{"index": 0, "label": "x", "mode": "closed-loop", "target": 1, "start_time": 0}]
            ),
            r"steps\[0\]\.mode is 'closed-loop', not one of closed, open",
        ),
        (
            lambda p: _valid_run_json_with(
                p, steps=[{"index": 0, "label": "x", "mode": 7, "target": 1, "start_time": 0}]
            ),
            r"steps\[0\]\.mode",
        ),
    ],
)
def test_not_a_run_folder_is_a_one_line_user_error(tmp_path: Path, make, message: str) -> None:
    folder = tmp_path / "x"
    make(folder)
    with pytest.raises(UserError, match=message) as e:
        load_run(folder)
    assert "\n" not in str(e.value)


def _valid_run_json_with(folder: Path, **fields: object) -> None:
    """A run.json as a writer leaves it, with `fields` replaced by values of the wrong JSON type."""
    RunWriter(folder, RunConfig(), process_anchor())
    data = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**data, **fields}))


def test_a_part_with_columns_of_another_table_or_type_is_skipped_with_a_warning(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, RunConfig(), process_anchor())
    writer.add_requests([record(0, now())])
    writer.flush()
    pq.write_table(pa.table({"step": ["a"], "request_id": ["r9"]}), tmp_path / "requests" / "part-000100.parquet")
    pq.write_table(pa.table({"colour": [1.0]}), tmp_path / "requests" / "part-000101.parquet")
    run = load_run(tmp_path)
    assert list(run.requests["request_id"]) == ["r0"]
    assert [w for w in run.warnings if "part-000100" in w] and [w for w in run.warnings if "part-000101" in w]


def test_columns_left_out_come_back_as_nulls(tmp_path: Path) -> None:
    fill_run(tmp_path)
    full, lean = load_run(tmp_path), load_run(tmp_path, without=("token_times",))
    assert list(lean.requests.columns) == list(full.requests.columns)
    assert full.requests["token_times"].map(len).sum() == 8
    assert lean.requests["token_times"].isna().all()
    assert lean.requests["end_time"].tolist() == full.requests["end_time"].tolist()


def test_token_times_stay_one_arrow_list_column(tmp_path: Path) -> None:
    # Not a numpy array per request: a large run's token times stay one buffer (TokenTimes flattens it).
    fill_run(tmp_path / "full")
    RunWriter(tmp_path / "empty", RunConfig(), process_anchor()).close()
    for folder in ("full", "empty"):
        assert load_run(tmp_path / folder).requests["token_times"].dtype == pd.ArrowDtype(pa.list_(pa.float64()))


def _step0(meta: dict, **fields: object) -> None:
    meta["steps"][0].update(fields)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m.update(format="loadlab-run/99"), r"format loadlab-run/99 .*newer loadlab"),
        (lambda m: m.pop("format"), "no format"),
        (lambda m: m.update(format=3), "format 3"),
        (lambda m: _step0(m, target=float("nan")), r"steps\[0\]\.target is NaN"),
        (lambda m: _step0(m, target=10**400), r"steps\[0\]\.target is out of range"),
        (lambda m: _step0(m, start_time=float("inf")), r"steps\[0\]\.start_time is infinite"),
        (lambda m: m.update(started_at=float("-inf")), r"started_at is infinite"),
        (lambda m: m["config"].update(concurrency=[10**400]), r"config\.concurrency\[0\] is out of range"),
        (lambda m: m["anchors"].update(wall=float("nan")), r"anchors\.wall is NaN"),
        # Out of range, or null where loadlab writes an empty list: read as meant, they would mislead.
        (lambda m: _step0(m, target=-2.0), r"steps\[0\]\.target is -2, not a load"),
        (lambda m: _step0(m, target=0), r"steps\[0\]\.target is 0, not a load"),
        (lambda m: _step0(m, index=-1), r"steps\[0\]\.index is -1"),
        (lambda m: m.update(steps=None), r"steps is null, not an array \(loadlab writes \[\] for none\)"),
        (lambda m: m.update(config=[]), r"config is an array, not an object"),
        (lambda m: m.update(cache_resets="none"), r"cache_resets is a string, not an array"),
    ],
)
def test_a_run_json_whose_numbers_would_mean_nothing_is_one_run_folder_error(tmp_path: Path, edit, message) -> None:
    fill_run(tmp_path)
    edit_run_json(tmp_path, edit)
    with pytest.raises(RunFolderError, match=message) as e:
        load_run(tmp_path)
    assert "\n" not in str(e.value) and str(tmp_path / "run.json") in str(e.value)


def test_a_part_every_loadlab_writes_that_is_missing_is_read_as_empty_and_named(tmp_path: Path) -> None:
    fill_run(tmp_path)
    edit_run_json(tmp_path, lambda m: (m.pop("steps"), m.pop("coverage")))
    run = load_run(tmp_path)
    assert run.meta.steps == [] and len(run.requests) == 3
    assert [w for w in run.warnings if w.startswith("run.json has no steps (every loadlab writes it)")]
    assert [w for w in run.warnings if w.startswith("run.json has no coverage")]
    # A part a later format added is simply absent from an earlier run.json: no warning.
    edit_run_json(tmp_path, lambda m: (m.pop("cache_resets"), m.update(steps=[], coverage=[])))
    assert load_run(tmp_path).warnings == []


def test_the_formats_of_earlier_versions_are_read(tmp_path: Path) -> None:
    fill_run(tmp_path)
    edit_run_json(tmp_path, lambda m: m.update(format="loadlab-run/1"))
    assert len(load_run(tmp_path).requests) == 3


def test_a_step_that_ends_before_it_starts_is_read_with_a_warning_and_no_end(tmp_path: Path) -> None:
    fill_run(tmp_path)
    start = json.loads((tmp_path / "run.json").read_text())["steps"][0]["start_time"]
    edit_run_json(tmp_path, lambda m: _step0(m, end_time=start - 5))
    run = load_run(tmp_path)
    assert [w for w in run.warnings if "step x ends before it starts" in w]
    assert math.isnan(run.meta.steps[0].end_time) and len(run.requests) == 3


def test_requests_and_samples_with_infinite_times_are_left_out_with_a_warning(tmp_path: Path) -> None:
    fill_run(tmp_path)
    requests = tmp_path / "requests" / "part-900000.parquet"
    bad = pq.read_table(next((tmp_path / "requests").glob("part-*.parquet"))).slice(0, 1)
    bad = bad.set_column(bad.schema.get_field_index("end_time"), "end_time", pa.array([math.inf]))
    pq.write_table(bad, requests)
    run = load_run(tmp_path)
    assert len(run.requests) == 3 and np.isfinite(run.requests["end_time"]).all()
    assert [w for w in run.warnings if "left out 1 request with an infinite time" in w]


def test_rows_far_outside_the_run_are_left_out_with_a_warning(tmp_path: Path) -> None:
    # One send time 10^12 s before the run stretched the analysis's time grid over 10^12 intervals.
    fill_run(tmp_path)
    part = next((tmp_path / "requests").glob("part-*.parquet"))
    table = pq.read_table(part)
    send = table["send_time"].to_pylist()
    table = table.set_column(table.schema.get_field_index("send_time"), "send_time", pa.array([-1e12, *send[1:]]))
    pq.write_table(table, part)
    run = load_run(tmp_path)
    assert len(run.requests) == 2 and [w for w in run.warnings if "far outside the run" in w]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: _step0(m, start_time=-1e12), r"steps\[0\]\.start_time lies far outside the run"),
        (lambda m: m.update(ended_at=m["started_at"] - 10), "ended_at is before started_at"),
    ],
)
def test_run_times_far_outside_the_run_are_a_run_folder_error(tmp_path: Path, edit, message: str) -> None:
    fill_run(tmp_path)
    edit_run_json(tmp_path, edit)
    with pytest.raises(RunFolderError, match=message):
        load_run(tmp_path)


def test_the_reader_leaves_its_warnings_to_the_caller(tmp_path: Path, caplog) -> None:
    # Each command prints a run's warnings once; the reader logging them too printed them twice.
    RunWriter(tmp_path, RunConfig(), process_anchor())
    with caplog.at_level(logging.DEBUG):
        assert load_run(as_killed(tmp_path)).warnings
    assert not caplog.records


def test_a_run_its_live_writer_is_still_writing_is_not_called_cut_off(tmp_path: Path) -> None:
    RunWriter(tmp_path / "live", RunConfig(), process_anchor())  # the writer is this process: alive
    live = load_run(tmp_path / "live")
    assert not live.cut_off and live.meta.status == "running"
    assert [w for w in live.warnings if "still being written" in w] and not [w for w in live.warnings if "cut off" in w]
    RunWriter(tmp_path / "killed", RunConfig(), process_anchor())
    killed = load_run(as_killed(tmp_path / "killed"))
    assert killed.cut_off and [w for w in killed.warnings if "cut off" in w]


def test_a_samples_labels_are_parsed_once_into_a_mapping_no_reader_can_change(monkeypatch) -> None:
    parsed: list[str] = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda text: parsed.append(text) or loads(text))
    text = '{"role": "server", "cores": "8", "test": "parsed once"}'
    labels = labels_of(text)
    assert labels == {"role": "server", "cores": "8", "test": "parsed once"} and labels_of("") == {}
    assert labels_of(text)["role"] == "server" and parsed == [text]  # read twice, parsed once
    with pytest.raises(TypeError):
        labels["role"] = "client"  # type: ignore[index]
    assert labels_of(text)["role"] == "server"
