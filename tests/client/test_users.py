"""loadlab's Locust users driven as a library (as distributed workers run them), against `loadlab mock`.

Locust's own statistics count each request once (never per token), and every request reaches
`llm_request` with its record.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.procs import BIN, Proc, free_port, python_json

DRIVER = Path(__file__).with_name("users_driver.py")


@pytest.fixture(scope="module")
def mock():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc(
        [
            str(BIN / "loadlab"),
            "mock",
            "--port",
            str(port),
            "--model",
            "m",
            "--ttft",
            "0.02",
            "--itl",
            "0.02",
            "--error-rate",
            "0.2",
            "--error-codes",
            "500",
            "--seed",
            "2",
        ],
        ready_url=f"{url}/health",
    ):
        yield url


def drive(*args: str) -> dict:
    return python_json(str(DRIVER), *args, timeout=120)


@pytest.mark.parametrize("mode, target", [("closed", "3"), ("open", "15")])
def test_locust_counts_one_request_per_stream(mock, mode, target):
    result = drive(mock, mode, target, "1.2")
    assert result["records"] >= 5
    assert result["locust_requests"] == result["records"]  # not one per token
    assert result["locust_failures"] == result["failed_records"] > 0  # the injected 500s
    assert len(set(result["ids"])) == result["records"]
    assert result["in_flight_after"] == 0  # drained at stop
    if mode == "closed":
        assert result["peak_in_flight"] <= 3


def test_request_budget_is_exact(mock):
    result = drive(mock, "closed", "4", "1.5", "7")
    assert result["records"] == 7 and result["locust_requests"] == 7


SYNC_CHECK = """
import json
from types import SimpleNamespace
from loadlab.client.context import ClientContext
from loadlab.client.users import process_state
from loadlab.config import RunConfig
env = SimpleNamespace(loadlab=ClientContext(config=RunConfig(url="http://a:1", model="m"), worker="w"))
state = process_state(env)
first = (state.endpoint, state.workload)
env.loadlab.config = RunConfig(url="http://a:1", model="m")   # sent again, equal: nothing rebuilt
process_state(env)
kept = state.endpoint is first[0] and state.workload is first[1]
env.loadlab.config = RunConfig(url="http://b:2/v1", model="m", api="completions")  # a test restarted
print(json.dumps({"kept": kept, "same_state": process_state(env) is state,
                  "base_url": state.endpoint.base_url, "path": state.endpoint.path,
                  "new_workload": state.workload is not first[1]}))
"""


def test_users_made_for_a_new_test_send_to_its_host():
    """Locust's web UI (or a master) may start a new test with another host or API: the users it
    spawns then must not keep the endpoint and workload of the first test."""
    result = python_json("-c", SYNC_CHECK)
    assert result == {
        "kept": True,
        "same_state": True,
        "base_url": "http://b:2",
        "path": "/v1/completions",
        "new_workload": True,
    }


THINK_CHECK = """
import json
from types import SimpleNamespace
from loadlab.client.context import ClientContext
from loadlab.client.users import ProcessState
from loadlab.config import RunConfig

def draws(worker_index, users=3):
    ctx = ClientContext(config=RunConfig(url="http://a:1", model="m"), worker="w", worker_index=worker_index)
    state = ProcessState(SimpleNamespace(loadlab=ctx))
    rngs = [state.think_rng() for _ in range(users)]   # one per user, in the order they start
    return [[rng.random() for _ in range(3)] for rng in rngs]

print(json.dumps({"run1": draws(0), "run2": draws(0), "worker1": draws(1)}))
"""


def test_think_times_are_reproducible_per_user_and_differ_between_users():
    """Each closed-loop user draws its think times from a generator seeded by the workload seed,
    its process's worker index and its number: the same run again draws the same ones."""
    result = python_json("-c", THINK_CHECK)
    assert result["run1"] == result["run2"]
    assert len({tuple(d) for d in result["run1"]}) == 3  # every user its own sequence
    assert not set(map(tuple, result["run1"])) & set(map(tuple, result["worker1"]))
