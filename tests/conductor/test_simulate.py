"""The plan loadlab hands the simulator: the client's own request bodies, in the order users take
them, with think times and unit-rate arrival gaps drawn from the run's distributions."""

from __future__ import annotations

import json
import threading
import time
from itertools import islice

import pytest

from loadlab.conductor import simulate
from loadlab.conductor.simulate import planned_requests
from loadlab.config import RunConfig
from loadlab.workload.distributions import parse_length, parse_seconds


def test_the_plan_holds_the_bodies_the_client_would_send() -> None:
    cfg = RunConfig(url="http://simulated", model="loadlab-reference", concurrency=[4])
    cfg.workload.input_len = parse_length("uniform:100:200")
    cfg.workload.output_len = parse_length("64")
    cfg.think_time = parse_seconds("uniform:1:3")
    lines = list(islice(planned_requests(cfg), 2000))
    body = lines[0]["body"]
    assert body["stream"] and body["max_tokens"] == 64 and body["ignore_eos"] and body["min_tokens"] == 64
    assert body["messages"][0]["role"] == "user"
    assert all(100 <= line["meta"][0] <= 200 and line["meta"][1] == 64 for line in lines)
    assert all(1 <= line["think"] <= 3 for line in lines)
    gaps = [line["gap"] for line in lines]
    assert sum(gaps) / len(gaps) == pytest.approx(1.0, rel=0.1)  # Poisson at rate 1: mean gap 1 s
    assert lines == list(islice(planned_requests(cfg), 2000))  # seeded: the same plan every time


def test_a_simulation_says_how_far_it_got(tmp_path, monkeypatch, capsys) -> None:
    """Read off the end of the simulator's results: its last /metrics render's virtual time."""
    monkeypatch.setattr(simulate, "PROGRESS_EVERY_S", 0.02)
    results = tmp_path / "results.jsonl"
    lines = [{"kind": "metrics", "time": 10.0, "text": "x"}, {"kind": "request", "id": "r"}]
    lines += [{"kind": "metrics", "time": 30.0, "text": "y" * 5000}, {"kind": "request", "id": "s"}]
    results.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    done = threading.Event()
    progress = threading.Thread(target=simulate._progress, args=(results, 120.0, done))
    progress.start()
    time.sleep(0.2)
    done.set()
    progress.join(timeout=5)
    said = capsys.readouterr().err.splitlines()
    assert said and all(line.startswith("simulate: 30 of 120 simulated s (25%) in ") for line in said)
