"""llama.cpp's slot cap from /props and its slots' state from /slots, read from a stand-in server
that answers as llama-server does (a real one: tests/engines/test_llamacpp.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadlab.collect.signals import RUNNING_CAP
from loadlab.collect.slots import SLOT_CONTEXT, SLOT_TOKENS, SLOTS_BUSY, SlotsCollector, slot_cap
from loadlab.urls import parse_http_url

SLOTS = [
    {"id": 0, "n_ctx": 2048, "is_processing": True, "n_prompt_tokens": 40, "next_token": [{"n_decoded": 7}]},
    {"id": 1, "n_ctx": 2048, "is_processing": False},
]


def serve(pages: dict[str, tuple[int, object]]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = pages.get(self.path, (404, {"error": "not found"}))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()


@pytest.fixture
def llama() -> Iterator[str]:
    yield from serve({"/props": (200, {"total_slots": 2, "model_path": "m.gguf"}), "/slots": (200, SLOTS)})


def test_the_slot_cap_is_what_props_says_and_none_for_another_server(llama):
    assert slot_cap(parse_http_url(llama)) == 2
    for pages in ({}, {"/props": (200, {"default_generation_settings": {}})}, {"/props": (200, [1])}):
        for url in serve(pages):
            assert slot_cap(parse_http_url(url)) is None
    assert slot_cap(parse_http_url("http://127.0.0.1:9")) is None  # nothing listens


def test_each_poll_samples_the_cap_the_busy_slots_and_each_slots_context(llama):
    samples = SlotsCollector(parse_http_url(llama), cap=2).poll()
    by = {(s.signal, s.labels.get("slot", "")): s.value for s in samples}
    assert by[(RUNNING_CAP, "")] == 2 and by[(SLOTS_BUSY, "")] == 1
    assert by[(SLOT_CONTEXT, "0")] == by[(SLOT_CONTEXT, "1")] == 2048 and by[(SLOT_TOKENS, "0")] == 40
    assert {s.source for s in samples} == {"slots"}


def test_without_the_slots_endpoint_the_cap_alone_is_sampled():
    pages = {"/props": (200, {"total_slots": 3}), "/slots": (501, {"error": {"message": "not supported"}})}
    for url in serve(pages):
        collector = SlotsCollector(parse_http_url(url), cap=3)
        for _ in range(2):  # asked once, then no more
            assert [(s.signal, s.value) for s in collector.poll()] == [(RUNNING_CAP, 3.0)]
        assert "answered HTTP 501: the slot cap only" in collector.coverage().error
