"""The two tables of a run folder: their Arrow schemas and the conversion from records.

The requests schema is derived from `RequestRecord`'s fields, so a field added there is stored
without a change here.
"""

from __future__ import annotations

import json
from dataclasses import fields

import pyarrow as pa

from loadlab.store.schema import RequestRecord, Sample

# RequestRecord's annotations are strings (postponed evaluation): map them to Arrow types.
_ARROW_TYPES: dict[str, pa.DataType] = {
    "str": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "list[float]": pa.list_(pa.float64()),
}

REQUEST_SCHEMA = pa.schema([pa.field(f.name, _ARROW_TYPES[str(f.type)]) for f in fields(RequestRecord)])

SAMPLE_SCHEMA = pa.schema(
    [
        pa.field("time", pa.float64()),
        pa.field("source", pa.string()),
        pa.field("signal", pa.string()),
        pa.field("labels", pa.string()),  # a JSON object, keys sorted
        pa.field("value", pa.float64()),
    ]
)


def requests_table(records: list[RequestRecord]) -> pa.Table:
    """One row per record, columns in `REQUEST_SCHEMA` order."""
    columns = {name: [getattr(r, name) for r in records] for name in REQUEST_SCHEMA.names}
    return pa.Table.from_pydict(columns, schema=REQUEST_SCHEMA)


def label_text(labels: dict[str, str]) -> str:
    """A label set as the samples table stores it: JSON with sorted keys (equal sets, equal strings)."""
    return json.dumps(labels, sort_keys=True)


def samples_table(samples: list[Sample]) -> pa.Table:
    """One row per sample; labels are stored as a JSON string so any label set fits one column."""
    # Each scrape repeats the same label sets: each is encoded once per table.
    texts: dict[tuple[tuple[str, str], ...], str] = {}
    labels = []
    for s in samples:
        key = tuple(s.labels.items())
        text = texts.get(key)
        if text is None:
            text = texts[key] = label_text(s.labels)
        labels.append(text)
    return pa.Table.from_pydict(
        {
            "time": [s.time for s in samples],
            "source": [s.source for s in samples],
            "signal": [s.signal for s in samples],
            "labels": labels,
            "value": [float(s.value) for s in samples],
        },
        schema=SAMPLE_SCHEMA,
    )
