"""A running `loadlab mock` and a few streamed requests to it, so its metrics move.

Used where a test needs live server metrics, not a load test: collectors, Prometheus, timeline.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.procs import BIN, Proc, free_port


@contextmanager
def mock_server(*args: str, log: Path | None = None) -> Iterator[tuple[str, Proc]]:
    """`loadlab mock` on a free port (extra CLI args appended); yields (base URL, process)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port), *args], ready_url=f"{url}/metrics", timeout=60, log=log
    ) as proc:
        yield url, proc


def stream_one(url: str, max_tokens: int, model: str = "mock") -> None:
    """One streamed chat completion, read to the end."""
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hello there"}],
        }
    ).encode()
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        while response.read(4096):
            pass


def stream_requests(url: str, users: int, per_user: int, max_tokens: int, model: str = "mock") -> None:
    """`users` threads each streaming `per_user` requests back to back; returns when all are done."""
    threads = [
        threading.Thread(target=lambda: [stream_one(url, max_tokens, model) for _ in range(per_user)])
        for _ in range(users)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
