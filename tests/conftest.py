"""Fixtures shared across test folders."""

from __future__ import annotations

import pytest

from tests.support.reference_server import KvBoundRun, kv_bound_run


@pytest.fixture(scope="session")
def kv_bound(tmp_path_factory: pytest.TempPathFactory) -> KvBoundRun:
    """One run whose KV pool binds, for the tests of its live lines and of its analysis."""
    return kv_bound_run(tmp_path_factory.mktemp("kv_bound"))
