"""The run folder's format version moves with its records: a field added, removed, renamed or
retyped in any record that reaches the disk must bump FORMAT_VERSION in loadlab/store/schema.py."""

from __future__ import annotations

import hashlib
from dataclasses import fields

from loadlab.store import schema
from loadlab.store.meta import RunMeta
from loadlab.store.tables import SAMPLE_SCHEMA

# The format version and the fingerprint of the records it describes. Change both together.
PINNED = (5, "a0992fe26760")


def records_fingerprint() -> str:
    """A short hash of every on-disk record's field names and types, and the error categories."""
    parts = [
        f"{cls.__name__}.{f.name}:{f.type}"
        for cls in (schema.RequestRecord, schema.StepInfo, schema.Sample, schema.Coverage, RunMeta)
        for f in fields(cls)
    ]
    parts += [f"ErrorCategory.{c.name}={c.value}" for c in schema.ErrorCategory]
    parts += [f"samples.{f.name}:{f.type}" for f in SAMPLE_SCHEMA]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def test_the_format_version_moves_with_the_records():
    version, fingerprint = PINNED
    assert (schema.FORMAT_VERSION, records_fingerprint()) == (version, fingerprint), (
        f"the run folder's records changed (fingerprint {records_fingerprint()}): bump FORMAT_VERSION in "
        f"loadlab/store/schema.py, say what changed in docs/run-folder.md, and pin "
        f"({schema.FORMAT_VERSION + 1}, '{records_fingerprint()}') in {__file__}"
    )


def test_run_json_names_the_format_version():
    assert schema.FORMAT == f"loadlab-run/{schema.FORMAT_VERSION}"
    assert RunMeta.__dataclass_fields__["format"].default == schema.FORMAT
