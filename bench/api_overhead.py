"""What the reference server's HTTP layer costs per streamed token, without the model.

The engine is swapped for one that hands out tokens as fast as the event loop allows, so the
server's CPU time is the API alone: request parsing, one JSON chunk and one SSE write per token.
The figure to read is server CPU per event (robust on a noisy machine); events/s is also shown.

    .venv/bin/python bench/api_overhead.py [--streams 1,16,64] [--tokens 200] [--requests 400]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.procs import free_port, wait_http


def serve_instant_engine(port: int) -> None:
    """Run the real API in front of an engine that generates instantly."""
    from aiohttp import web
    from prometheus_client import CollectorRegistry

    from reference_server.api import build_app
    from reference_server.interface import TokenOutput
    from reference_server.tokenizer import ByteTokenizer

    class InstantStream:
        def __init__(self, prompt: list[int], max_tokens: int) -> None:
            self.prompt, self.max_tokens, self.done = prompt, max_tokens, 0

        def __aiter__(self) -> InstantStream:
            return self

        async def __anext__(self) -> TokenOutput:
            if self.done == self.max_tokens:
                raise StopAsyncIteration
            await asyncio.sleep(0)  # one token per event-loop turn, as the real engine's deliveries
            self.done += 1
            reason = "length" if self.done == self.max_tokens else None
            return TokenOutput(97, "a", reason, len(self.prompt), self.done)

        def abort(self) -> None:
            self.done = self.max_tokens

    class InstantEngine:
        tokenizer = ByteTokenizer()
        max_model_len = 4096
        model_name = "loadlab-reference"
        registry = CollectorRegistry()
        healthy = True

        def add_request(self, request_id, prompt_ids, params):
            return InstantStream(prompt_ids, params.max_tokens)

    web.run_app(
        build_app(InstantEngine()), host="127.0.0.1", port=port, print=None, access_log=None, handler_cancellation=True
    )


async def load(url: str, streams: int, tokens: int, requests: int, stream: bool) -> int:
    """`requests` requests over `streams` concurrent connections; returns the events received."""
    body = {"prompt": "hello world", "max_tokens": tokens, "stream": stream}
    left = requests
    events = 0

    async def user(session: aiohttp.ClientSession) -> None:
        nonlocal left, events
        while left > 0:
            left -= 1
            async with session.post(url + "/v1/completions", json=body) as response:
                if stream:
                    async for line in response.content:
                        events += line.startswith(b"data: {")
                else:
                    await response.read()
                    events += tokens

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=streams)) as session:
        await asyncio.gather(*(user(session) for _ in range(streams)))
    return events


def measure(url: str, server: psutil.Process, streams: int, tokens: int, requests: int, stream: bool) -> str:
    cpu = server.cpu_times()
    start = time.perf_counter()
    events = asyncio.run(load(url, streams, tokens, requests, stream))
    wall = time.perf_counter() - start
    after = server.cpu_times()
    used = (after.user - cpu.user) + (after.system - cpu.system)
    kind = "stream" if stream else "whole"
    return (
        f"| {kind} | {streams} | {tokens} | {requests} | {events / wall:,.0f} | "
        f"{used / events * 1e6:.1f} | {used / requests * 1e3:.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--streams", default="1,16,64")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    if args.serve:
        serve_instant_engine(args.serve)
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        wait_http(url + "/health", timeout=60, proc=proc)
        server = psutil.Process(proc.pid)
        print(
            "| response | concurrent | tokens/request | requests | events/s | server CPU µs/event "
            "| server CPU ms/request |"
        )
        print("|---|---|---|---|---|---|---|")
        for streams in map(int, args.streams.split(",")):
            print(measure(url, server, streams, args.tokens, args.requests, stream=True), flush=True)
        print(measure(url, server, 16, args.tokens, args.requests, stream=False), flush=True)
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
