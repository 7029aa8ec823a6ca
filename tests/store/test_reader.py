"""load_run: reads finished and cut-off runs, skips damaged parts, rejects what is not a run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadlab.clock import now, process_anchor
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.tables import REQUEST_SCHEMA, SAMPLE_SCHEMA
from tests.support.records import record


def test_a_run_without_parts_loads_as_empty_tables_with_all_columns(tmp_path: Path) -> None:
    RunWriter(tmp_path, RunConfig(), process_anchor())  # never closed: cut off at once
    run = load_run(tmp_path)
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
        (lambda p: (p.mkdir(), (p / "run.json").write_text(json.dumps({"format": "x"}))), "unreadable"),
        (lambda p: (p.mkdir(), (p / "run.json").write_text("[]")), "a JSON array, not an object"),
        (lambda p: _valid_run_json_with(p, worker_anchors=[1]), "unreadable"),
        (lambda p: _valid_run_json_with(p, config=[1]), "config"),
        (lambda p: _valid_run_json_with(p, status=5), "status"),
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
    from tests.support.runs import fill_run

    fill_run(tmp_path)
    full, lean = load_run(tmp_path), load_run(tmp_path, without=("token_times",))
    assert list(lean.requests.columns) == list(full.requests.columns)
    assert full.requests["token_times"].map(len).sum() == 8
    assert lean.requests["token_times"].isna().all()
    assert lean.requests["end_time"].tolist() == full.requests["end_time"].tolist()


def test_token_times_stay_one_arrow_list_column(tmp_path: Path) -> None:
    # Not a numpy array per request: a large run's token times stay one buffer (TokenTimes flattens it).
    from tests.support.runs import fill_run

    fill_run(tmp_path / "full")
    RunWriter(tmp_path / "empty", RunConfig(), process_anchor()).close()
    for folder in ("full", "empty"):
        assert load_run(tmp_path / folder).requests["token_times"].dtype == pd.ArrowDtype(pa.list_(pa.float64()))
