"""Read a run folder back: run.json plus every whole part of both tables. The one way into a run
folder: everything that reads one goes through `load_run`, and every reason not to trust it is one
`RunFolderError`.

Works on a finished run, on one cut off mid-run (kill -9) and on one still being written: parts
are only ever renamed into place whole, so whatever is there is usable; a part that still fails
to read is skipped with a warning rather than losing the rest of the run. What is checked on the
way in: run.json's format (this version's or an earlier one), that every number in it is one
loadlab writes (finite: it writes null for "not yet"), and that times are in order; a number
that would make every figure meaningless is an error, a flaw that spoils only itself a warning.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import socket
import sys
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from loadlab.errors import UserError
from loadlab.numbers import format_value
from loadlab.store.meta import RunMeta
from loadlab.store.schema import FORMAT_VERSION, StepInfo
from loadlab.store.tables import REQUEST_SCHEMA, SAMPLE_SCHEMA

RUN_JSON = "run.json"
SUMMARY_JSON = "summary.json"
ANALYSIS_JSON = "analysis.json"
REQUESTS_DIR = "requests"
SAMPLES_DIR = "samples"
PART_GLOB = "part-*.parquet"
_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
# run.json's parts every loadlab has written since the first format, and their JSON types ...
_ALWAYS_WRITTEN: dict[str, type] = {
    "config": dict,
    "versions": dict,
    "host": dict,
    "worker_anchors": dict,
    "steps": list,
    "coverage": list,
}
# ... and those a later format added (absent from an earlier run.json, never null).
_ADDED_LATER: dict[str, type] = {"warnings": list, "cache_resets": list, "simulated": dict}
_PART_NAME = re.compile(r"part-(\d+)(?:-(\d+))?\.parquet")
_FORMAT = re.compile(r"loadlab-run/(\d+)")
_TIME_COLUMNS = {
    REQUESTS_DIR: ("scheduled_time", "send_time", "first_token_time", "end_time"),
    SAMPLES_DIR: ("time",),
}
# A row's times lie within its run: from an hour before its start (other processes' clocks) to an
# hour after its end, or, while the end is unknown, to 30 days after the start (no run lasts that
# long). A row beyond would stretch every time axis over it (a grid of 10^12 intervals).
_SLACK_S = 3600.0
_LONGEST_RUN_S = 30 * 86400.0


class RunFolderError(UserError):
    """Why a folder cannot be read as a run, or why its numbers would mean nothing: one line
    (the CLI prints it and exits 2). The one error the reader raises."""


@dataclass
class RunData:
    """A run folder in memory. `requests` has RequestRecord's columns (`token_times` an Arrow list
    column: a large run's millions of token times stay one buffer, not an array per request);
    `samples` the long-form samples."""

    path: Path
    meta: RunMeta
    requests: pd.DataFrame
    samples: pd.DataFrame
    warnings: list[str] = field(default_factory=list)  # parts skipped, cut-off run, ...
    writing: bool = False  # run.json says `running` and the process writing it is alive

    @property
    def cut_off(self) -> bool:
        """The run never reached its end and no one is writing it any more (killed)."""
        return self.meta.cut_off and not self.writing


def labels_of(text: str) -> Mapping[str, Any]:
    """A sample's labels: its `labels` column's JSON text ("" for none) as a read-only mapping.
    Each distinct text is parsed once, however many samples and stages read it."""
    return MappingProxyType(_parsed_labels(text))


@functools.cache
def _parsed_labels(text: str) -> dict[str, Any]:
    labels: dict[str, Any] = json.loads(text) if text else {}
    return labels


def load_run(folder: str | Path, without: tuple[str, ...] = ()) -> RunData:
    """Load a run folder; RunFolderError (one line) when `folder` is not a readable run folder or
    run.json holds numbers loadlab never writes. The warnings are the caller's to print (once).

    `without`: request columns not to read (they come back as nulls), e.g. `token_times`, the
    bulk of a large run, for an analysis that does not need every token's time.
    """
    path = Path(folder)
    warnings: list[str] = []
    meta = read_meta(path, warnings)
    span = _span(meta)
    _check_times(meta, span, path / RUN_JSON)
    warnings += _step_warnings(meta)
    writing = meta.cut_off and writer_alive(meta.host)
    if writing:
        warnings.append(
            f"the run is still being written (process {meta.host.get('pid')} on this host): "
            "reading what it has written so far"
        )
    elif meta.cut_off:
        warnings.append("run.json still says 'running': the run was cut off; using the data it left")
    requests = _read_parts(path / REQUESTS_DIR, REQUEST_SCHEMA, warnings, span, without)
    samples = _read_parts(path / SAMPLES_DIR, SAMPLE_SCHEMA, warnings, span)
    return RunData(path=path, meta=meta, requests=requests, samples=samples, warnings=warnings, writing=writing)


def writer_alive(host: dict[str, Any]) -> bool:
    """Whether the process run.json's `host` names (this host's, by name and pid) still runs."""
    pid = host.get("pid")
    if host.get("hostname") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's process: alive
        return True
    except (OSError, OverflowError):
        return False
    return True


def read_meta(folder: Path, warnings: list[str] | None = None) -> RunMeta:
    """Parse folder/run.json, or raise RunFolderError saying why this is not a run folder (or
    why its numbers would mean nothing); a part every loadlab writes that is missing is read as
    empty, with a line appended to `warnings` naming it."""
    run_json = folder / RUN_JSON
    if not folder.is_dir():
        raise RunFolderError(f"not a run folder: {folder} does not exist or is not a directory")
    if not run_json.is_file():
        raise RunFolderError(f"not a run folder: {folder} has no {RUN_JSON}")
    try:
        data = json.loads(run_json.read_text())
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {_JSON_NAMES.get(type(data), type(data).__name__)}, not an object")
    except (OSError, ValueError, TypeError, RecursionError) as e:
        raise RunFolderError(f"not a run folder: {run_json} is unreadable ({type(e).__name__}: {e})") from None
    _check_format(data.get("format"), run_json)
    missing = _check_parts(data, run_json)
    if warnings is not None:
        warnings += missing
    odd = _odd_number(data, "")
    if odd:
        raise RunFolderError(
            f"{run_json}: {odd}, a number loadlab never writes (null stands for 'none'); "
            "figures read from it would mean nothing"
        )
    try:
        meta = RunMeta.from_dict(data)
        _check_types(meta)
        for anchor in (meta.anchor, *meta.worker_anchors.values()):
            _check_types(anchor, "anchors.")
        for i, step in enumerate(meta.steps):
            _check_types(step, f"steps[{i}].")
        for i, cov in enumerate(meta.coverage):
            _check_types(cov, f"coverage[{i}].")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RunFolderError(f"not a run folder: {run_json} is unreadable ({type(e).__name__}: {e})") from None
    for i, step in enumerate(meta.steps):
        _check_step(step, f"{run_json}: steps[{i}].")
    return meta


def read_stage_json(folder: Path, name: str) -> dict[str, Any] | None:
    """A JSON object a later stage wrote into the run folder (summary.json, analysis.json); None
    when it is not there; RunFolderError (one line) when it cannot be read, is not an object or
    holds a number loadlab never writes."""
    path = folder / name
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise RunFolderError(f"{name} is unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{name} holds a JSON {_JSON_NAMES.get(type(data), type(data).__name__)}, not an object")
    odd = _odd_number(data, "")
    if odd:
        raise RunFolderError(f"{name}: {odd}, a number loadlab never writes")
    return data


def _check_format(fmt: object, run_json: Path) -> None:
    """RunFolderError unless `fmt` is this version's run-folder format or an earlier one."""
    if fmt is None:
        raise RunFolderError(f"not a run folder: {run_json} has no format (loadlab writes e.g. loadlab-run/1)")
    m = _FORMAT.fullmatch(fmt) if isinstance(fmt, str) else None
    if m is None:
        raise RunFolderError(f"not a run folder: {run_json} has format {json.dumps(fmt)[:40]}, not loadlab-run/N")
    if not 1 <= int(m[1]) <= FORMAT_VERSION:
        raise RunFolderError(
            f"{run_json} has format {fmt} of a newer loadlab (this one reads up to "
            f"loadlab-run/{FORMAT_VERSION}): read it with the loadlab that wrote it"
        )


def _check_parts(data: dict[str, Any], run_json: Path) -> list[str]:
    """RunFolderError when a part of run.json is null or not of the JSON type loadlab writes it
    as (`"steps": null` would read as a run without steps); a warning for each part every
    loadlab writes that is missing."""
    for key, kind in {**_ALWAYS_WRITTEN, **_ADDED_LATER}.items():
        if key in data and not isinstance(data[key], kind):
            empty = "{}" if kind is dict else "[]"
            raise RunFolderError(
                f"{run_json}: {key} is {_json_name(data[key])}, not {_json_name(kind())} "
                f"(loadlab writes {empty} for none): the run's figures would rest on a guess"
            )
    return [
        f"run.json has no {key} (every loadlab writes it): read as empty, "
        + ("the steps taken from the requests and the config" if key == "steps" else "its figures may be missing")
        for key in _ALWAYS_WRITTEN
        if key not in data
    ]


def _json_name(value: object) -> str:
    """A parsed JSON value's type as JSON names it, with its article: "null", "an array", "a string"."""
    name = _JSON_NAMES.get(type(value), type(value).__name__) if not isinstance(value, dict) else "object"
    return name if name == "null" else f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _check_step(step: StepInfo, where: str) -> None:
    """RunFolderError when a step's load is not one loadlab runs (users or requests/s above 0)
    or its index is negative (-1 stands for the whole run): achieved/target and the step's
    figures would be read against a number that means nothing."""
    if not step.target > 0:
        raise RunFolderError(
            f"{where}target is {step.target:g}, not a load (users or requests/s above 0): "
            "the step's figures would mean nothing"
        )
    if step.index < 0:
        raise RunFolderError(f"{where}index is {step.index}, not a step's (0 or more)")


def _odd_number(value: Any, where: str) -> str:
    """The first number in parsed JSON that loadlab never writes (NaN, infinite, beyond a
    float's range), as "WHERE is WHAT"; "" when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'run.json'} is {'NaN' if math.isnan(value) else 'infinite'}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        return f"{where or 'run.json'} is out of range"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        odd = _odd_number(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key))
        if odd:
            return odd
    return ""


def _check_times(meta: RunMeta, span: tuple[float, float], run_json: Path) -> None:
    """RunFolderError when the run ends before it starts or a step's time lies far outside the
    run: every rate and time axis would be measured over a meaningless span."""
    if meta.ended_at < meta.started_at:
        raise RunFolderError(f"{run_json}: ended_at is before started_at: the run's times mean nothing")
    lo, hi = span
    for i, step in enumerate(meta.steps):
        for name in ("start_time", "end_time", "ramp_end"):
            value = getattr(step, name)
            if not lo <= value <= hi and not math.isnan(value):
                raise RunFolderError(
                    f"{run_json}: steps[{i}].{name} lies far outside the run (more than an hour before its "
                    "start or after its end): the step's figures would mean nothing"
                )


def _step_warnings(meta: RunMeta) -> list[str]:
    """A step that ends before it starts: its end is dropped (its rates then run to its last
    request's end, as a cut-off step's), and a warning says so."""
    warnings = []
    for step in meta.steps:
        if step.end_time < step.start_time:
            warnings.append(
                f"step {step.label} ends before it starts "
                f"(end_time {format_value(step.start_time - step.end_time, 's')} before start_time): "
                "its rates are measured to its last request's end"
            )
            step.end_time = math.nan
    return warnings


def _check_types(record: Any, where: str = "") -> None:
    """TypeError when a field of the dataclass `record`, as parsed from JSON, is not of its
    declared type (str, int, float, bool, dict or list; an int stands for a float), or not one of
    the names a `Literal` field allows."""
    for name, hint in typing.get_type_hints(type(record)).items():
        kind = typing.get_origin(hint) or hint
        if kind is typing.Literal:
            value = getattr(record, name)
            if value not in typing.get_args(hint):
                raise TypeError(f"{where}{name} is {str(value)[:40]!r}, not one of {', '.join(typing.get_args(hint))}")
            continue
        if kind not in (str, int, float, bool, dict, list):
            continue
        value = getattr(record, name)
        ok = isinstance(value, (int, float) if kind is float else kind)
        if not ok or (isinstance(value, bool) and kind is not bool):
            raise TypeError(f"{where}{name} is {str(value)[:40]!r}, not {kind.__name__}")


def current_parts(folder: Path) -> list[tuple[int, int, Path]]:
    """(first, last, path) of every part to read, in order.

    A single part `part-N.parquet` covers number N; a compacted one `part-A-B.parquet` covers
    A..B and replaces the single parts it holds (they may outlive it briefly if the writer was
    killed while deleting them).
    """
    found = []
    for path in folder.glob(PART_GLOB):
        m = _PART_NAME.fullmatch(path.name)
        if m:
            found.append((int(m[1]), int(m[2] or m[1]), path))
    ranges = [(first, last) for first, last, _ in found if last > first]
    return sorted(
        (first, last, path)
        for first, last, path in found
        if not any(a <= first and last <= b and (a, b) != (first, last) for a, b in ranges)
    )


def read_part_tables(
    folder: Path, warnings: list[str], schema: pa.Schema | None = None, without: tuple[str, ...] = ()
) -> list[pa.Table]:
    """Every readable current part of one table (less the columns `without`); an unreadable one
    is skipped with a warning.

    With `schema`, each part is cast to it; a part whose columns are not the table's (none in
    common, or of another type) is skipped like a damaged one.
    """
    tables = []
    for _, _, part in current_parts(folder):
        try:
            columns = [n for n in pq.read_schema(part).names if n not in without] if without else None
            table = pq.read_table(part, columns=columns)
            if schema is not None:
                if table.num_columns and not set(table.column_names) & set(schema.names):
                    raise TypeError(f"none of its columns belongs in {folder.name}/")
                table = table.cast(_schema_of(table, schema))
            tables.append(table)
        except Exception as e:  # a damaged part must not cost the rest of the run
            warnings.append(f"skipped unreadable part {part.name}: {type(e).__name__}: {e}")
    return tables


def _read_parts(
    folder: Path, schema: pa.Schema, warnings: list[str], span: tuple[float, float], without: tuple[str, ...] = ()
) -> pd.DataFrame:
    # Columns added to the schema after a part was written (or left out) come back as nulls.
    tables = read_part_tables(folder, warnings, schema, without)
    if not tables:
        return schema.empty_table().to_pandas(types_mapper=_arrow_lists)
    table = _with_all_columns(pa.concat_tables(tables, promote_options="default"), schema)
    return _times_in_run(table, folder.name, span, warnings).to_pandas(types_mapper=_arrow_lists)


def _span(meta: RunMeta) -> tuple[float, float]:
    """The earliest and latest time a row of this run can carry (see _SLACK_S)."""
    start = (
        meta.started_at
        if math.isfinite(meta.started_at)
        else min((s.start_time for s in meta.steps if math.isfinite(s.start_time)), default=-math.inf)
    )
    end = meta.ended_at if math.isfinite(meta.ended_at) else start + _LONGEST_RUN_S
    return start - _SLACK_S, end + _SLACK_S


def _times_in_run(table: pa.Table, name: str, span: tuple[float, float], warnings: list[str]) -> pa.Table:
    """The rows whose times are NaN (not yet / never) or lie within the run's `span`; rows with
    an infinite time, or one far outside the run, which no clock of the run gives, are left out
    with a warning."""
    lo, hi = span
    outside = np.zeros(len(table), dtype=bool)
    for column in _TIME_COLUMNS[name]:
        times = table[column].to_numpy(zero_copy_only=False).astype(float, copy=False)
        outside |= np.isinf(times) | (times < lo) | (times > hi)
    if not outside.any():
        return table
    count = int(outside.sum())
    what = ("request" if name == REQUESTS_DIR else "sample") + ("s" if count != 1 else "")
    warnings.append(f"left out {count} {what} with an infinite time or one far outside the run in {name}/")
    return table.filter(pa.array(~outside))


def _arrow_lists(kind: pa.DataType) -> pd.ArrowDtype | None:
    """List columns stay Arrow-backed in pandas (to_pandas would make a numpy array per row)."""
    return pd.ArrowDtype(kind) if pa.types.is_list(kind) else None


def _schema_of(table: pa.Table, schema: pa.Schema) -> pa.Schema:
    """The part's own columns, typed as the current schema says (unknown columns keep their type)."""
    return pa.schema([schema.field(n) if n in schema.names else table.schema.field(n) for n in table.column_names])


def _with_all_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The schema's columns in its order (nulls where the parts lack one), then any unknown ones."""
    for f in schema:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(len(table), f.type))
    return table.select(schema.names + [n for n in table.column_names if n not in schema.names])
