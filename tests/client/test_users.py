"""loadlab's Locust users driven as a library (as distributed workers run them), against `loadlab mock`.

Locust's own statistics count each request once (never per token), and every request reaches
`llm_request` with its record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import BIN, REPO, Proc, free_port

DRIVER = Path(__file__).with_name("users_driver.py")


@pytest.fixture(scope="module")
def mock():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc([str(BIN / "loadlab"), "mock", "--port", str(port), "--model", "m", "--ttft", "0.02",
               "--itl", "0.02", "--error-rate", "0.2", "--error-codes", "500", "--seed", "2"], ready_url=f"{url}/health"):
        yield url


def drive(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(DRIVER), *args], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode, target", [("closed", "3"), ("open", "15")])
def test_locust_counts_one_request_per_stream(mock, mode, target):
    result = drive(mock, mode, target, "1.2")
    assert result["records"] >= 5
    assert result["locust_requests"] == result["records"]           # not one per token
    assert result["locust_failures"] == result["failed_records"] > 0  # the injected 500s
    assert len(set(result["ids"])) == result["records"]
    assert result["in_flight_after"] == 0                             # drained at stop
    if mode == "closed":
        assert result["peak_in_flight"] <= 3


def test_request_budget_is_exact(mock):
    result = drive(mock, "closed", "4", "1.5", "7")
    assert result["records"] == 7 and result["locust_requests"] == 7
