"""Read a run folder back: run.json plus every whole part of both tables.

Works on a finished run and on one cut off mid-run (kill -9): parts are only ever renamed into
place whole, so whatever is there is usable; a part that still fails to read is skipped with a
warning rather than losing the rest of the run.
"""

from __future__ import annotations

import json
import logging
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from loadlab.errors import UserError
from loadlab.store.meta import RunMeta
from loadlab.store.tables import REQUEST_SCHEMA, SAMPLE_SCHEMA

log = logging.getLogger(__name__)

RUN_JSON = "run.json"
SUMMARY_JSON = "summary.json"
REQUESTS_DIR = "requests"
SAMPLES_DIR = "samples"
PART_GLOB = "part-*.parquet"
_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}
_PART_NAME = re.compile(r"part-(\d+)(?:-(\d+))?\.parquet")


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


def load_run(folder: str | Path, without: tuple[str, ...] = ()) -> RunData:
    """Load a run folder. Raises UserError (one line) when `folder` is not a readable run folder.

    `without`: request columns not to read (they come back as nulls), e.g. `token_times`, the
    bulk of a large run, for an analysis that does not need every token's time.
    """
    path = Path(folder)
    meta = read_meta(path)
    warnings: list[str] = []
    if meta.cut_off:
        warnings.append("run.json still says 'running': the run was cut off; using the data it left")
    requests = _read_parts(path / REQUESTS_DIR, REQUEST_SCHEMA, warnings, without)
    samples = _read_parts(path / SAMPLES_DIR, SAMPLE_SCHEMA, warnings)
    for w in warnings:
        log.warning("%s: %s", path, w)
    return RunData(path=path, meta=meta, requests=requests, samples=samples, warnings=warnings)


def read_meta(folder: Path) -> RunMeta:
    """Parse folder/run.json, or raise UserError saying why this is not a run folder."""
    run_json = folder / RUN_JSON
    if not folder.is_dir():
        raise UserError(f"not a run folder: {folder} does not exist or is not a directory")
    if not run_json.is_file():
        raise UserError(f"not a run folder: {folder} has no {RUN_JSON}")
    try:
        data = json.loads(run_json.read_text())
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {_JSON_NAMES.get(type(data), type(data).__name__)}, not an object")
        meta = RunMeta.from_dict(data)
        _check_types(meta)
        for anchor in (meta.anchor, *meta.worker_anchors.values()):
            _check_types(anchor, "anchors.")
        for i, step in enumerate(meta.steps):
            _check_types(step, f"steps[{i}].")
        for i, cov in enumerate(meta.coverage):
            _check_types(cov, f"coverage[{i}].")
        return meta
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"not a run folder: {run_json} is unreadable ({type(e).__name__}: {e})") from None


def _check_types(record: Any, where: str = "") -> None:
    """TypeError when a field of the dataclass `record`, as parsed from JSON, is not of its
    declared type (str, int, float, bool, dict or list; an int stands for a float)."""
    for name, hint in typing.get_type_hints(type(record)).items():
        kind = typing.get_origin(hint) or hint
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


def _read_parts(folder: Path, schema: pa.Schema, warnings: list[str], without: tuple[str, ...] = ()) -> pd.DataFrame:
    # Columns added to the schema after a part was written (or left out) come back as nulls.
    tables = read_part_tables(folder, warnings, schema, without)
    if not tables:
        return schema.empty_table().to_pandas(types_mapper=_arrow_lists)
    table = pa.concat_tables(tables, promote_options="default")
    return _with_all_columns(table, schema).to_pandas(types_mapper=_arrow_lists)


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
