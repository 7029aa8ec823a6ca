"""make_workload: the kinds it builds, its errors, and draws from many threads at once."""

import threading

import pytest

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload import WORKLOADS, make_workload


def test_every_documented_kind_exists():
    assert set(WORKLOADS) == {"synthetic", "sharegpt", "shared_prefix", "multiturn", "tools", "trace"}


def test_unknown_kind_and_api_are_user_errors():
    with pytest.raises(UserError, match="workload kind"):
        make_workload(WorkloadConfig(kind="random"), "chat")
    with pytest.raises(UserError, match="api"):
        make_workload(WorkloadConfig(), "grpc")


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


@pytest.mark.parametrize("kind", ["synthetic", "multiturn"])
def test_each_stream_draws_its_own_reproducible_prompts(kind):
    def prompts(stream):
        w = make_workload(WorkloadConfig(kind=kind, seed=2), "chat", stream=stream)
        return [w.next_request() for _ in range(5)]

    assert prompts(1) == prompts(1)
    assert {s.prompt for s in prompts(0)}.isdisjoint(s.prompt for s in prompts(1))
    if kind == "multiturn":
        assert {s.conversation for s in prompts(0)}.isdisjoint(s.conversation for s in prompts(1))
