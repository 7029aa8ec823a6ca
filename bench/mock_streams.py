"""How many concurrent streams `loadlab mock` holds, what they cost, and how exact its timing stays.

Starts `loadlab mock`, opens N streams at once from an aiohttp client in this process, and reports
the mock's CPU use (psutil on its PID) and the error of its token times (from /truth) against the
configured TTFT/ITL. Run:
    .venv/bin/python bench/mock_streams.py --streams 300 --tokens 200 --itl 0.02 --spread 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.procs import BIN, Proc, free_port


async def one_stream(session: aiohttp.ClientSession, url: str, tokens: int, i: int, delay: float) -> bool:
    await asyncio.sleep(delay)
    body = {"prompt": "x" * 100, "max_tokens": tokens, "stream": True}
    async with session.post(url, json=body, headers={"X-Request-Id": f"bench-{i}"}) as resp:
        last = b""
        async for line in resp.content:
            if line.strip():
                last = line.strip()
        return last == b"data: [DONE]"


async def drive(port: int, streams: int, tokens: int, spread: float) -> tuple[int, float]:
    url = f"http://127.0.0.1:{port}/v1/completions"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as s:
        start = time.monotonic()
        done = await asyncio.gather(*(one_stream(s, url, tokens, i, spread * i / streams) for i in range(streams)))
        return sum(done), time.monotonic() - start


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--spread", type=float, default=1.0, help="seconds over which the streams start")
    args = ap.parse_args()

    port = free_port()
    cmd = [str(BIN / "loadlab"), "mock", "--port", str(port), "--ttft", str(args.ttft), "--itl", str(args.itl)]
    with Proc(cmd, ready_url=f"http://127.0.0.1:{port}/health") as proc:
        mock = psutil.Process(proc.pid)
        cpu0 = mock.cpu_times()
        ok, wall = asyncio.run(drive(port, args.streams, args.tokens, args.spread))
        cpu1 = mock.cpu_times()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/truth", timeout=60) as r:
            truth = json.load(r)["requests"]

    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    ttft_err = [t["token_times"][0] - t["received_time"] - args.ttft for t in truth if t["token_times"]]
    # Token k is due at arrival + TTFT + k * ITL (the mock's absolute schedule).
    lateness = [
        tt - (t["received_time"] + args.ttft + k * args.itl) for t in truth for k, tt in enumerate(t["token_times"])
    ]
    tokens = sum(len(t["token_times"]) for t in truth)
    print(
        json.dumps(
            {
                "streams": args.streams,
                "spread_s": args.spread,
                "completed": ok,
                "tokens": tokens,
                "wall_s": round(wall, 2),
                "tokens_per_s": round(tokens / wall),
                "mock_cpu_s": round(cpu, 2),
                "mock_cpu_share_of_one_core": round(cpu / wall, 3),
                "cpu_us_per_token": round(1e6 * cpu / tokens, 1),
                "ttft_error_ms_p50": round(1e3 * statistics.median(ttft_err), 2),
                "ttft_error_ms_p99": round(1e3 * percentile(ttft_err, 0.99), 2),
                "token_lateness_ms_p50": round(1e3 * statistics.median(lateness), 2),
                "token_lateness_ms_p99": round(1e3 * percentile(lateness, 0.99), 2),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
