"""How soon a client that hangs up mid-stream gets its KV blocks back (real reference server, tiny preset).

Each round opens a stream, reads a few events, closes the socket and polls /metrics until
`vllm:kv_cache_usage_perc` is 0 again; the time from close to that reading is reported, next to
the time one /metrics scrape takes (the resolution of this measurement). Two whole-context
requests first warm the engine up (its first pass over each context length is slow on CPU).

    .venv/bin/python bench/api_disconnect.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.reference_server import start_server


def kv_usage(url: str) -> float:
    for line in requests.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:kv_cache_usage_perc"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError("vllm:kv_cache_usage_perc")


def one_round(url: str) -> float:
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"prompt": "x", "max_tokens": 250, "ignore_eos": True, "stream": True}).encode()
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    received = b""
    while received.count(b"data: ") < 3:
        received += sock.recv(4096)
    sock.close()
    closed = time.perf_counter()
    while kv_usage(url) != 0.0:
        pass
    return time.perf_counter() - closed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with start_server(Path(tempfile.mkdtemp()) / "server.log") as server:
        for _ in range(2):
            requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 250, "ignore_eos": True})
        times = sorted(one_round(server.url) for _ in range(args.rounds))
        scrapes = []
        for _ in range(20):
            start = time.perf_counter()
            kv_usage(server.url)
            scrapes.append(time.perf_counter() - start)
    print(
        f"rounds {len(times)}: close -> KV pool whole: median {statistics.median(times) * 1e3:.1f} ms, "
        f"max {times[-1] * 1e3:.1f} ms; one /metrics scrape: median {statistics.median(scrapes) * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
