"""The twin's engine on a virtual clock: users and arrivals keep the plan, tokens come at the
modelled pace, the engine's own /metrics is scraped every interval of virtual time, and the
failures a server would answer (a bad body, a full queue, a timeout) are recorded, not raised."""

from __future__ import annotations

import base64
import io
import json
from array import array
from collections import defaultdict
from typing import Any

import pytest

from reference_server.accounting import ChunkWork
from reference_server.simulate import Simulation
from reference_server.twin.spec import parse_twin
from reference_server.twin.timing import TimingModel

TWIN = "h100:llama-3-8b"


def body(prompt: str = "a" * 100, max_tokens: int = 20) -> dict[str, Any]:
    return {"model": "loadlab-reference", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}


def simulate(steps: list[dict[str, Any]], lines: list[dict[str, Any]], **header: Any) -> dict[str, list[dict]]:
    """Run a simulation; its output by kind."""
    out = io.StringIO()
    engine = {"twin": TWIN, "max_num_seqs": 8, **header.pop("engine", {})}
    full = {"engine": engine, "api": "completions", "steps": steps, "metrics_interval": 1.0, **header}
    Simulation(full, iter(lines), out).run()
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for line in out.getvalue().splitlines():
        item = json.loads(line)
        if item["kind"] == "request":  # token times come as float64s, base64
            item["tokens"] = array("d", base64.b64decode(item["tokens"])).tolist()
        by_kind[item["kind"]].append(item)
    return by_kind


def closed(users: int, seconds: float) -> dict[str, Any]:
    return {"mode": "closed", "target": users, "seconds": seconds, "requests": 0, "warmup": 0}


def test_one_user_gets_its_tokens_at_the_modelled_decode_pace() -> None:
    lines = [{"body": body(), "think": 0.5, "gap": 1.0, "meta": i} for i in range(100)]
    result = simulate([closed(1, 3.0)], lines)
    requests = result["request"]
    assert requests and all(r["completion_tokens"] == 20 and r["finish"] == "length" for r in requests)
    first = requests[0]
    prompt = first["prompt_tokens"]
    model = TimingModel(parse_twin(TWIN))
    gaps = [b - a for a, b in zip(first["tokens"], first["tokens"][1:], strict=False)]
    modelled = [model.step_time(model.cost.step([ChunkWork(1, prompt + i, True)])).total for i in range(19)]
    assert gaps == pytest.approx(modelled, rel=1e-9)
    # One user: each request is sent the think time after the previous one ended.
    for before, after in zip(requests, requests[1:], strict=False):
        assert after["send"] == pytest.approx(before["end"] + 0.5)
    assert [r["meta"] for r in requests] == list(range(len(requests)))  # taken in the planned order
    assert all(r["send"] < 3.0 for r in requests)
    assert result["end"][0]["time"] >= 3.0


def test_users_and_steps_follow_the_plan() -> None:
    lines = [{"body": body(max_tokens=50), "think": 0.0, "gap": 1.0, "meta": i} for i in range(10_000)]
    result = simulate([closed(2, 2.0), closed(6, 2.0)], lines, ramp_up=0.0)
    steps = [s for s in result["step"] if s["end"] is not None]
    assert [(s["index"], s["start"], s["end"]) for s in steps] == [(0, 0.0, 2.0), (1, 2.0, 4.0)]
    for index, users in ((0, 2), (1, 6)):
        sent = [r for r in result["request"] if r["step"] == index]
        # closed loop: never more requests in flight than users, and that many at the step's start
        events = sorted([(r["send"], 1) for r in sent] + [(r["end"], -1) for r in sent])
        in_flight = peak = 0
        for _, change in events:
            in_flight += change
            peak = max(peak, in_flight)
        assert peak == users


def test_a_request_sent_as_a_step_ends_waits_for_the_step_that_began_then() -> None:
    """A user hears its last token when a step ends and sends at once, but the engine has begun
    its next step that instant: the new request joins the step after (as a real server's would)."""
    long = {"body": body(max_tokens=1000), "think": 0.0, "gap": 1.0, "meta": "long"}
    short = [{"body": body(max_tokens=5), "think": 0.0, "gap": 1.0, "meta": i} for i in range(100)]
    requests = simulate([closed(2, 1.0)], [short[0], long, *short[1:]], ramp_up=0.0)["request"]
    decoding = next(r for r in requests if r["meta"] == "long")["tokens"]
    for second in (r for r in requests if r["meta"] not in ("long", 0)):
        began = decoding.index(second["send"])  # sent as a step of the long request ended ...
        assert second["tokens"][0] == decoding[began + 2]  # ... it missed the next, came with the one after


def test_requests_in_flight_a_grace_after_the_last_step_are_cut_off() -> None:
    lines = [{"body": body(max_tokens=5 if i % 2 else 2000), "think": 0.0, "gap": 1.0, "meta": i} for i in range(100)]
    result = simulate([closed(2, 1.0)], lines, ramp_up=0.0, grace=0.5, cut_off="cut off after step c=2")
    requests = result["request"]
    cut = [r for r in requests if r["error"]]
    assert cut and all(r["error"] == "aborted" and r["detail"] == "cut off after step c=2" for r in cut)
    assert all(r["end"] == pytest.approx(1.5, abs=0.05) and r["tokens"] for r in cut)  # tokens kept
    assert all(r["end"] <= 1.5 for r in requests) and any(r["finish"] == "length" for r in requests)
    assert result["end"][0]["cut_off"] == len(cut)


def test_open_loop_arrivals_are_the_planned_gaps_over_the_rate() -> None:
    lines = [{"body": body(max_tokens=5), "think": 0.0, "gap": 1.0, "meta": i} for i in range(100)]
    step = {"mode": "open", "target": 4.0, "seconds": 2.0, "requests": 0, "warmup": 2}
    requests = simulate([step], lines)["request"]
    assert [r["scheduled"] for r in requests] == pytest.approx([i * 0.25 for i in range(8)])
    assert [r["warmup"] for r in requests] == [True, True] + [False] * 6


def test_the_engine_metrics_are_scraped_every_interval_of_virtual_time() -> None:
    lines = [{"body": body(), "think": 0.0, "gap": 1.0, "meta": i} for i in range(1000)]
    scrapes = simulate([closed(4, 3.0)], lines)["metrics"]
    times = [s["time"] for s in scrapes]
    assert times[:4] == [0.0, 1.0, 2.0, 3.0]
    assert "vllm:generation_tokens_total" in scrapes[-1]["text"]
    assert "loadlab_gpu_util" in scrapes[2]["text"]
    assert "loadlab_twin_lag_seconds_total" in scrapes[-1]["text"]
    # a virtual clock is never late
    lag = [line for line in scrapes[-1]["text"].splitlines() if line.startswith("loadlab_twin_lag_seconds_total")]
    assert float(lag[0].split()[-1]) == 0.0


def test_what_a_server_would_refuse_is_recorded_as_an_error() -> None:
    lines = [{"body": {"prompt": "a", "max_tokens": 0}, "think": 0.0, "gap": 1.0, "meta": 0}]
    lines += [{"body": body(max_tokens=100_000), "think": 0.0, "gap": 1.0, "meta": 1}]
    step = {"mode": "open", "target": 1.0, "seconds": 1.5, "requests": 0, "warmup": 0}
    requests = simulate([step], lines)["request"]
    assert [(r["error"], r["status"]) for r in requests] == [("http_4xx", 400), ("http_4xx", 400)]


def test_a_request_past_the_timeout_is_aborted_as_a_timeout() -> None:
    lines = [{"body": body(max_tokens=2000), "think": 0.0, "gap": 1.0, "meta": 0}]
    result = simulate([closed(1, 0.5)], lines, timeout=1.0)
    (request,) = result["request"]
    assert request["error"] == "timeout"
    assert request["end"] == pytest.approx(1.0, abs=0.02)
    assert 0 < len(request["tokens"]) < 2000


def test_a_simulation_needs_a_twin() -> None:
    with pytest.raises(ValueError, match="needs a twin"):
        simulate([closed(1, 1.0)], [], engine={"twin": "", "preset": "tiny"})
