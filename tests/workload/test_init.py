"""make_workload: the kinds it builds, its errors, and draws from many threads at once."""

import threading

import pytest

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload import WORKLOADS, make_workload


def test_every_documented_kind_exists():
    assert set(WORKLOADS) == {"synthetic", "sharegpt", "shared_prefix", "multiturn"}


def test_unknown_kind_and_api_are_user_errors():
    with pytest.raises(UserError, match="workload kind"):
        make_workload(WorkloadConfig(kind="random"), "chat")
    with pytest.raises(UserError, match="api"):
        make_workload(WorkloadConfig(), "embeddings")


def test_many_threads_draw_distinct_requests_without_losing_any():
    w = make_workload(WorkloadConfig(kind="multiturn", turns=2), "chat")
    seen: list = []

    def user():
        for _ in range(100):
            spec = w.next_request()
            seen.append((spec.conversation, spec.turn))
            w.complete(spec, "answer", ok=True)

    threads = [threading.Thread(target=user) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 800 and len(set(seen)) == 800
