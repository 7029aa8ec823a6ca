"""The lab's scenario tables: which to run, and how many load steps each asks for."""

from __future__ import annotations

import pytest

from loadlab.lab.engines import REFERENCE, VLLM
from loadlab.lab.scenarios import VLLM_SHARED_SCENARIOS, select


def test_the_shared_host_table_runs_vllm_unpinned_and_unniced_beside_the_load_generator():
    scenarios = select(None, VLLM, shared_host=True)
    assert scenarios == list(VLLM_SHARED_SCENARIOS)
    assert all(not s.server_cpus and s.server_nice == 0 for s in scenarios)
    # The load generator as diagnose places itself beside a local server.
    assert all(s.client_beside and not s.client_cpus for s in scenarios)
    # The admission cap, judged both with the server's metrics and as a black box.
    by_name = {s.name: s for s in scenarios}
    assert (
        by_name["scheduling-blackbox"].expect == "queueing"
        and "--no-server-metrics" in by_name["scheduling-blackbox"].load
    )
    assert by_name["scheduling-blackbox"].steps == 2 and by_name["scheduling"].steps == 1


def test_an_engine_without_a_shared_host_table_is_refused_by_name():
    with pytest.raises(ValueError, match="--shared-host: only vllm has a shared-host table"):
        select(None, REFERENCE, shared_host=True)
    with pytest.raises(ValueError, match="unknown scenario nope"):
        select("nope", VLLM, shared_host=True)
