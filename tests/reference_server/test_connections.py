"""Slow, idle and too many clients: shed after --idle-timeout, out of descriptors without a log flood,
and a batch that could never be queued is a 400 that leaves other clients alone."""

from __future__ import annotations

import http.client
import os
import resource
import socket
import struct
import time

from tests.support.reference_server import start_server

IDLE = 1.0  # --idle-timeout of these servers: seconds


def port_of(server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def closed_by_server(sock: socket.socket, within: float) -> bytes | None:
    """Everything the server sent before closing sock within `within` seconds; None if it stayed open."""
    sock.settimeout(0.2)
    received, deadline = b"", time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return received
        if not data:
            return received
        received += data
    return None


def test_half_open_slow_and_idle_connections_are_closed_after_the_idle_timeout(tmp_path):
    with start_server(tmp_path / "server.log", "--idle-timeout", str(IDLE)) as server:
        address = ("127.0.0.1", port_of(server))
        silent = [socket.create_connection(address) for _ in range(20)]
        slow_headers = [socket.create_connection(address) for _ in range(20)]
        for sock in slow_headers:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        slow_body = socket.create_connection(address)
        slow_body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        idle = http.client.HTTPConnection(*address)
        idle.request("GET", "/health")
        assert idle.getresponse().read() == b""  # kept alive, then idle
        for sock in silent + slow_headers + [idle.sock]:
            assert closed_by_server(sock, within=IDLE + 3) is not None
        answer = closed_by_server(slow_body, within=2 * IDLE + 3)  # a 408, then aiohttp's lingering close
        assert answer is not None and answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"code": "request_timeout"' in answer
        assert server.get("/health").status_code == 200


def test_a_server_out_of_file_descriptors_keeps_answering_and_logs_a_line_a_second_at_most(tmp_path):
    log = tmp_path / "server.log"
    with start_server(log, "--idle-timeout", str(IDLE)) as server:
        in_use = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
        resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (in_use + 20, in_use + 20))
        flood = []
        start = time.monotonic()
        for _ in range(150):  # far past the limit; accepted ones hold a descriptor until shed
            sock = socket.socket()
            sock.settimeout(0.5)
            try:
                sock.connect(("127.0.0.1", port_of(server)))
            except OSError:  # the listen backlog is full
                sock.close()
                continue
            flood.append(sock)
        time.sleep(3)
        for sock in flood:  # clients that give up before sending headers: a reset
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        response = server.post("/v1/completions", {"prompt": "after the flood", "max_tokens": 2})
        assert response.status_code == 200, response.text
        seconds = time.monotonic() - start
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    flood_lines = text.count("cannot accept connections")
    assert 1 <= flood_lines <= seconds + 2, text[-3000:]
    assert len(text) < 20_000


def test_more_prompts_than_the_queue_can_ever_hold_is_a_400_and_other_requests_go_on(tmp_path):
    with start_server(tmp_path / "server.log", "--max-waiting", "3") as server:
        response = server.post("/v1/completions", {"prompt": ["a", "b", "c", "d"], "max_tokens": 2})
        assert response.status_code == 400, response.text
        assert "--max-waiting" in response.json()["error"]["message"]
        assert server.post("/v1/completions", {"prompt": "a", "max_tokens": 2}).status_code == 200
        batch = server.post("/v1/completions", {"prompt": ["a", "b", "c"], "max_tokens": 2})
        assert batch.status_code == 200 and len(batch.json()["choices"]) == 3
        assert server.pool_is_whole()
