"""How closely does `loadlab run --trace` keep a trace's clock? (a benchmark, not a test)

Writes a trace in Azure's layout (TIMESTAMP,ContextTokens,GeneratedTokens) at `--rate` requests
per second (evenly spaced, or Poisson with --poisson), replays it with `loadlab run --trace` from
one process on CPU core 0 against `loadlab mock` on core 1, and reports the send error: each
request's send time minus the time the trace recorded for it (the open-loop start delay), at
p50 / p99 / max, every request included:

    .venv/bin/python bench/trace_replay.py [--rate 100] [--seconds 30] [--poisson] [--nice 10] [--as-rate]

Target: p99 <= 2 ms at 100 req/s. Prints one markdown row for bench/results/workloads.md.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from client_accuracy import own_autogroup, pinned  # bench/ is on sys.path: the script's folder
from loadlab.store.reader import load_run
from tests.support.procs import BIN, Proc, free_port

TOKENS_IN, TOKENS_OUT = 64, 8


def write_trace(path: Path, rate: float, seconds: float, poisson: bool) -> int:
    """An Azure-layout trace of about rate x seconds requests; returns how many."""
    rng = random.Random(1)
    start = datetime(2023, 11, 16, 18, 15, 46)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    t = 0.0
    while t < seconds:
        stamp = (start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        lines.append(f"{stamp},{TOKENS_IN},{TOKENS_OUT}")
        t += rng.expovariate(rate) if poisson else 1 / rate
    path.write_text("\n".join(lines) + "\n")
    return len(lines) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--poisson", action="store_true", help="Poisson arrivals instead of even spacing")
    parser.add_argument(
        "--nice", type=int, default=0, help="run both ends at nice -N in an autogroup of their own (root)"
    )
    parser.add_argument(
        "--as-rate",
        action="store_true",
        help="send the same load with --rate --arrival constant instead (the open loop's own send error, for scale)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "AzureLLMInferenceTrace_bench.csv"
        count = write_trace(trace, args.rate, args.seconds, args.poisson)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        mock = [*pinned(1, args.nice), str(BIN / "loadlab"), "mock", "--port", str(port), "--ttft", "0.01"]
        mock += ["--itl", "0.005"]
        with own_autogroup(args.nice), Proc(mock, ready_url=f"{url}/health"):
            cmd = [*pinned(0, args.nice), str(BIN / "loadlab"), "run", "--url", url, "--trace", str(trace)]
            if args.as_rate:  # the trace's lengths, the open loop's clock
                cmd += ["--rate", f"{args.rate:g}", "--arrival", "constant", "--requests", str(count)]
            cmd += ["--no-server-metrics", "--no-gpu", "--out", str(Path(tmp) / "run")]
            load = os.getloadavg()[0]
            subprocess.run(cmd, check=True, capture_output=True, timeout=args.seconds + 180)
        req = load_run(Path(tmp) / "run").requests
    error_ms = (req["send_time"] - req["scheduled_time"]).to_numpy() * 1000
    failed = int((req["error"] != "").sum())
    p50, p99, worst = np.percentile(error_ms, 50), np.percentile(error_ms, 99), error_ms.max()
    arrivals = ("Poisson" if args.poisson else "even") + (", sent as --rate" if args.as_rate else "")
    print("| date | trace | requests (failed) | send error p50 / p99 / max | load average |")
    print("|---|---|---|---|---|")
    print(
        f"| {time.strftime('%Y-%m-%d %H:%M')} | {args.rate:g} req/s {arrivals}, {args.seconds:g} s "
        f"| {len(req)} of {count} ({failed}) | {p50:.2f} / {p99:.2f} / {worst:.1f} ms | {load:.1f} |"
    )


if __name__ == "__main__":
    main()
