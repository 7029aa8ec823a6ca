"""Event-loop lag that RunWriter.flush adds in a gevent-patched process (as inside `loadlab run`).

Usage: .venv/bin/python bench/run_writer_loop_lag.py pooled|plain [requests_per_flush] [tokens]
A probe greenlet sleeps 1 ms in a loop and records how late it wakes; meanwhile the writer
flushes 40 times (one every 50 ms). `plain` replaces the OS-thread offload with a direct call.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import sys
import tempfile
import time
from pathlib import Path

import gevent

from loadlab.clock import process_anchor
from loadlab.config import RunConfig
from loadlab.store import run_folder
from loadlab.store.schema import RequestRecord


def main() -> None:
    mode = sys.argv[1]
    per_flush = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    if mode == "plain":
        run_folder.off_the_event_loop = lambda work: work()
    writer = run_folder.RunWriter(Path(tempfile.mkdtemp()) / "run", RunConfig(), process_anchor())
    base = 1e9
    records = [
        RequestRecord(
            str(i),
            "w",
            0,
            False,
            "chat",
            base,
            base,
            base + 0.1,
            base + 3,
            [base + 0.1 + k * 0.01 for k in range(tokens)],
        )
        for i in range(per_flush)
    ]
    lags: list[float] = []
    running = True

    def probe() -> None:
        while running:
            t0 = time.perf_counter()
            gevent.sleep(0.001)
            lags.append(time.perf_counter() - t0 - 0.001)

    greenlet = gevent.spawn(probe)
    for _ in range(40):
        gevent.sleep(0.05)
        writer.add_requests(records)
        writer.flush()
    running = False
    greenlet.join()
    lags = sorted(lags[50:])  # skip the first flushes' warm-up
    print(
        f"{mode}: {per_flush} requests x {tokens} tokens per flush: loop lag "
        f"p99 {lags[int(len(lags) * 0.99)] * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
