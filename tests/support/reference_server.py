"""The reference server started once per test module, and the HTTP helpers its tests share."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from loadlab.conductor.liveverdict import EVERY_S, MIN_WINDOW_S
from tests.support.procs import Proc, free_port, loadlab

# The tiny preset on CPU with a short context: fast to start, and "too long" is cheap to reach.
TEST_FLAGS = ("--preset", "tiny", "--device", "cpu", "--max-model-len", "256")
MAX_MODEL_LEN = 256
MODEL = "loadlab-reference"


@dataclass
class Server:
    """A running reference server and helpers to talk to it."""

    url: str
    proc: Proc
    api_key: str | None = None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def post(self, path: str, body: Any, **kwargs: Any) -> requests.Response:
        """POST a JSON body (or raw bytes/str as they are)."""
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {"Content-Type": "application/json", **self.headers(), **kwargs.pop("headers", {})}
        return requests.post(self.url + path, data=data, headers=headers, timeout=60, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        headers = {**self.headers(), **kwargs.pop("headers", {})}
        return requests.get(self.url + path, headers=headers, timeout=30, **kwargs)

    def events(self, path: str, body: dict) -> list[str]:
        """Stream a request; return the data of each SSE event ("[DONE]" last), checking the framing."""
        response = self.post(path, {**body, "stream": True})
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return sse_data(response.content)

    def metric(self, name: str, **labels: str) -> float:
        """The value of the first sample on /metrics with this name and these labels."""
        text = requests.get(self.url + "/metrics", timeout=30).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    return sample.value
        raise KeyError(name)

    def pool_is_whole(self, timeout: float = 10.0) -> bool:
        """Whether, within timeout, no sequence runs or waits and every KV block is free again.
        (A leak never comes back whole: the wait only absorbs a slow or busy host.)"""
        deadline = time.monotonic() + timeout
        while True:
            idle = (
                self.metric("vllm:kv_cache_usage_perc") == 0.0
                and self.metric("vllm:num_requests_running") == 0
                and self.metric("vllm:num_requests_waiting") == 0
            )
            if idle or time.monotonic() > deadline:
                return idle
            time.sleep(0.05)


def sse_data(body: bytes) -> list[str]:
    """The data of each event of an SSE body that must be nothing but `data: ...\\n\\n` events."""
    assert body.endswith(b"data: [DONE]\n\n"), body[-200:]
    events = body.decode().split("\n\n")
    assert events[-1] == ""
    assert all(e.startswith("data: ") and "\n" not in e for e in events[:-1]), body[:500]
    data = [e[len("data: ") :] for e in events[:-1]]
    assert data.count("[DONE]") == 1
    return data


def chunks(data: list[str]) -> list[dict]:
    """The JSON chunks of a stream (everything before [DONE])."""
    return [json.loads(d) for d in data[:-1]]


@contextmanager
def start_server(log: Path, *flags: str, api_key: str | None = None, niceness: int = 0) -> Iterator[Server]:
    """Run `python -m reference_server` on a free port until the block ends (under `nice` when
    `niceness` is given: a load test on a shared machine keeps its load generator unstarved)."""
    port = free_port()
    args = [sys.executable, "-m", "reference_server", "--port", str(port), *TEST_FLAGS, *flags]
    if niceness:
        args = ["nice", "-n", str(niceness), *args]
    if api_key:
        args += ["--api-key", api_key]
    url = f"http://127.0.0.1:{port}"
    with Proc(args, ready_url=url + "/health", timeout=120, log=log) as proc:
        yield Server(url, proc, api_key)


@dataclass
class KvBoundRun:
    """A finished `loadlab run` against a reference server whose KV pool binds."""

    folder: Path
    result: Any  # subprocess.CompletedProcess[str]: exit code, stdout (end panel), stderr (status lines)
    seconds: float  # the step's length, chosen for this host's speed (kv_bound_run)


KV_BOUND_PROMPT = "a " * 100  # ~100 tokens, as --input-len 100


def kv_bound_run(folder: Path) -> KvBoundRun:
    """6 users against 18 KV blocks of 16 tokens. A request (100 prompt tokens, 119 with the chat
    template, + 20 output) takes 8 blocks when admitted and 9 by its end: two run at once holding
    16-18 blocks, a third never fits, so 4 users wait and nothing is preempted. Every window of the
    step, however short, reads KV near full with requests waiting (in a pool where a growing request
    preempts the other, usage thrashes between full and half full, and a short window can catch
    only the half-full phase). The server runs niced so that the load generator is not the one
    starved on a busy 2-core machine.

    The step lasts long enough for the live verdict on this host, measured first: its window opens
    once the step is past its ramp-up (1 s), the recent requests' E2E p90 (a request's own time,
    slower with two sharing the engine, plus two others' ahead of it in the queue: ~4 requests'
    time alone, doubled for a host whose load changes, then doubled again so that a window holds
    the five finished requests a verdict needs) and MIN_WINDOW_S (5 s); then a verdict every
    EVERY_S (one too early to hold five requests is followed by another), the niced judge process
    taking a few seconds. At least 40 s: a 20 s step finished 8 requests when the host grew busier
    after the measurement."""
    with start_server(folder / "server.log", "--num-kv-blocks", "18", niceness=15) as server:
        alone = request_seconds(server)
        seconds = min(max(40.0, 1 + 16 * alone + MIN_WINDOW_S + EVERY_S + 5), 150.0)
        result = loadlab(
            "run",
            "--url",
            server.url,
            "--concurrency",
            "6",
            "--duration",
            f"{seconds:.0f}",
            "--input-len",
            "100",
            "--output-len",
            "20",
            "--no-gpu",
            "--out",
            str(folder / "run"),
            timeout=180 + seconds,
        )
    return KvBoundRun(folder / "run", result, seconds)


def request_seconds(server: Server) -> float:
    """How long one request of kv_bound_run's shape takes alone on this host, right now."""
    start = time.monotonic()
    body = {"model": MODEL, "prompt": KV_BOUND_PROMPT, "max_tokens": 20, "ignore_eos": True}
    response = server.post("/v1/completions", body)
    assert response.status_code == 200, response.text
    return time.monotonic() - start
