"""A test's servers for the streaming client: a real `loadlab mock` subprocess (it reports when
it sent each token, GET /truth) or a hand-written event stream served in this process, and one
request sent through `stream_request`.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import gevent
from geventhttpclient.client import HTTPClient
from geventhttpclient.url import URL

from loadlab.client.stream import Endpoint, stream_request
from loadlab.clock import process_anchor
from loadlab.config import RunConfig
from loadlab.store.schema import RequestRecord
from loadlab.workload.spec import RequestSpec
from tests.support.procs import BIN, Proc, free_port


def start_mock(*args: str) -> Proc:
    """`loadlab mock` on a free port, model "m" (extra CLI args appended)."""
    port = free_port()
    return Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port), "--model", "m", *args],
        ready_url=f"http://127.0.0.1:{port}/health",
    )


def url_of(mock: Proc) -> str:
    return f"http://127.0.0.1:{mock.args[mock.args.index('--port') + 1]}"


def truth(url: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"{url}/truth", timeout=10) as r:
        return {t["request_id"]: t for t in json.loads(r.read())["requests"]}


def spec(max_tokens: int = 10, pin: bool = True, prompt: str = "hello") -> RequestSpec:
    return RequestSpec(
        prompt=prompt,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        input_tokens=len(prompt.encode()),
        pin_output=pin,
    )


def client(url: str, concurrency: int = 4, timeout: float = 5.0) -> HTTPClient:
    return HTTPClient.from_url(URL(url), concurrency=concurrency, network_timeout=timeout, connection_timeout=timeout)


def send(
    url: str,
    http: HTTPClient,
    request_id: str,
    *,
    api: str = "chat",
    model: str = "m",
    timeout: float = 5.0,
    api_key: str = "",
    max_tokens: int = 10,
    prompt: str = "hello",
) -> RequestRecord:
    """One streamed request through the client, as a load-test user sends it; its record."""
    endpoint = Endpoint.from_config(RunConfig(url=url, model=model, api=api, timeout=timeout, api_key=api_key))
    return stream_request(
        http,
        endpoint,
        spec(max_tokens, prompt=prompt),
        request_id,
        time.perf_counter(),
        process_anchor(),
        worker="test",
        step=0,
        warmup=False,
    ).record


def serve_events(writes: list[bytes | float], headers: bytes = b""):
    """A handler answering each request with `writes` as one chunked event stream, one chunk per
    write, 10 ms apart; a number in `writes` is a pause of that many seconds. `headers`: more
    response header lines (each ending with CRLF)."""

    def handle(conn, _address) -> None:
        while True:
            request = b""
            while b"\r\n\r\n" not in request:
                data = conn.recv(65536)
                if not data:
                    return
                request += data
            head, _, body = request.partition(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n%s\r\n" % headers
            )
            for data in writes:
                if isinstance(data, float):
                    gevent.sleep(data)
                    continue
                conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
                gevent.sleep(0.01)
            conn.sendall(b"0\r\n\r\n")

    return handle
