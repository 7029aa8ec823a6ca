"""Event-loop lag that the server-metrics collector adds in a gevent-patched process (as in `loadlab run`).

Usage: .venv/bin/python bench/server_metrics_loop_lag.py pooled|plain [seconds] [interval] [engines]
Serves a reference-server /metrics page (its real series, with every histogram observed, from a
separate `python -m http.server` process; `engines` copies of every series, as a data-parallel
server or a larger vLLM page would have) and scrapes it with ServerMetricsCollector every
`interval` s; a probe greenlet sleeps 1 ms in a loop and records how late it wakes (the loop lag
a token timestamp would suffer). `plain` parses on the event loop (the collector before the
offload); `pooled` is the collector as shipped (parsing in gevent's thread pool).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gevent
from prometheus_client import generate_latest

from loadlab.collect import server_metrics
from loadlab.collect.prom_text import parse_metrics_text
from reference_server.engine.metrics import EngineMetrics


def reference_page(engines: int) -> bytes:
    """The reference server's /metrics with every series present (as after some traffic), its
    samples repeated for `engines` engines."""
    m = EngineMetrics("tiny", 256)
    for value in (0.001, 0.02, 0.3, 4.0):
        for h in (
            m.ttft,
            m.itl,
            m.e2e,
            m.queue_time,
            m.prefill_time,
            m.decode_time,
            m.inference_time,
            m.batch_size,
            m.collective_seconds,
            *m.step_seconds.values(),
        ):
            h.observe(value)
        m.iteration_tokens.observe(value * 100)
        m.prompt_tokens_per_request.observe(value * 50)
        m.generation_tokens_per_request.observe(value * 50)
    lines = generate_latest(m.registry).decode().splitlines()
    samples = [line for line in lines if not line.startswith("#")]
    extra = [line.replace('engine="0"', f'engine="{e}"') for e in range(1, engines) for line in samples]
    return "\n".join(lines + extra).encode() + b"\n"


def main() -> None:
    mode = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    interval = float(sys.argv[3]) if len(sys.argv) > 3 else 0.25
    engines = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if mode == "plain":
        server_metrics.off_the_event_loop = lambda work: work()
    folder = Path(tempfile.mkdtemp())
    page = reference_page(engines)
    (folder / "metrics").write_bytes(page)
    t0 = time.perf_counter()
    for _ in range(20):
        parse_metrics_text(page.decode(), 0.0, "server")
    parse_ms = (time.perf_counter() - t0) / 20 * 1000
    http = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = int(http.stdout.readline().split("port ")[1].split()[0])
        collector = server_metrics.ServerMetricsCollector(f"http://127.0.0.1:{port}/metrics", interval)
        lags: list[float] = []
        woke: list[float] = []
        running = True

        def probe() -> None:
            while running:
                t0 = time.perf_counter()
                gevent.sleep(0.001)
                lags.append(time.perf_counter() - t0 - 0.001)
                woke.append(time.perf_counter() - started)

        started = time.perf_counter()
        greenlet = gevent.spawn(probe)
        collector.start(lambda samples: None)
        gevent.sleep(seconds)
        running = False
        collector.stop()
        greenlet.join()
    finally:
        http.terminate()
        http.wait(10)
    # The worst lag of each scrape interval: what a sparse lag sampler (the client's, every 100 ms)
    # can catch when it happens to wake during a parse.
    worst: dict[int, float] = {}
    for t, lag in zip(woke, lags, strict=True):
        worst[int(t / interval)] = max(worst.get(int(t / interval), 0.0), lag)
    per_scrape = sorted(worst.values())
    lags.sort()
    ok, lines = collector.coverage().ok_samples, page.count(b"\n")
    print(
        f"{mode}: {lines}-line page (parse {parse_ms:.1f} ms), {ok} scrapes every {interval:g} s "
        f"over {seconds:g} s: loop lag p50 {lags[len(lags) // 2] * 1000:.2f} ms, "
        f"p99 {lags[int(len(lags) * 0.99)] * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms ({len(lags)} probes); "
        f"worst per interval: median {per_scrape[len(per_scrape) // 2] * 1000:.1f} ms, "
        f"p90 {per_scrape[int(len(per_scrape) * 0.9)] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
