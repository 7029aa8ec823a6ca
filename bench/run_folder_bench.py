"""How long the run writer's flush, close (compaction) and the summary take.

Usage: .venv/bin/python bench/run_folder_bench.py [requests_per_flush] [tokens_per_request] [flushes]
A flush blocks the gevent hub in `loadlab run` (C code under one greenlet), so its duration is
the worst extra delay it can add to a token timestamp.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from loadlab.analyze.summary import summarize, write_summary
from loadlab.clock import now, process_anchor
from loadlab.config import RunConfig
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import RequestRecord, Sample, StepInfo


def main() -> None:
    per_flush, tokens, flushes = (int(a) for a in (sys.argv[1:] + ["100", "256", "60"][len(sys.argv) - 1 :]))
    folder = Path(tempfile.mkdtemp()) / "run"
    writer = RunWriter(folder, RunConfig(concurrency=[per_flush]), process_anchor())
    t = now()
    writer.begin_step(StepInfo(0, f"concurrency={per_flush}", "closed", per_flush, t))
    flush_s = []
    for f in range(flushes):
        base = t + f
        writer.add_requests(
            [
                RequestRecord(
                    f"{f}-{i}",
                    "w",
                    0,
                    False,
                    "chat",
                    base,
                    base,
                    base + 0.1,
                    base + 0.1 + tokens * 0.01,
                    [base + 0.1 + k * 0.01 for k in range(tokens)],
                    completion_tokens=tokens,
                    client_tokens=tokens,
                    max_tokens=tokens,
                )
                for i in range(per_flush)
            ]
        )
        writer.add_samples(
            [Sample(base + k / 20, "server", "requests_running", 8.0, {"model": "m"}) for k in range(20)]
        )
        t0 = time.perf_counter()
        writer.flush()
        flush_s.append(time.perf_counter() - t0)
    writer.end_step(0, t + flushes)
    t0 = time.perf_counter()
    run = load_run(folder)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    summarize(run)
    summarize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    writer.close()  # compacts the parts
    write_summary(load_run(folder))
    close_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    load_run(folder)
    compacted_load_s = time.perf_counter() - t0
    flush_s.sort()
    print(
        f"{flushes} flushes of {per_flush} requests x {tokens} tokens (+20 samples): "
        f"flush p50 {flush_s[len(flush_s) // 2] * 1000:.1f} ms, max {flush_s[-1] * 1000:.1f} ms"
    )
    print(
        f"load_run of {len(run.requests)} requests in {2 * flushes} parts: {load_s:.2f} s; "
        f"summarize: {summarize_s:.2f} s"
    )
    print(f"close (compaction + summary): {close_s:.2f} s; load_run after it: {compacted_load_s:.2f} s")


if __name__ == "__main__":
    main()
