"""CPU cost of loadlab's collectors on this machine (no GPU needed): GPU, host, NCCL, server
metrics (against a live `loadlab mock` and the reference server) and the Prometheus pull.

Each collector runs in its own thread for `--seconds` while the main thread sleeps, so the
process's CPU time over that window is the collector's cost. Run:
    .venv/bin/python bench/collector_cost.py --seconds 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.collect.gpu import GpuCollector, NvmlBackend, ReplayBackend
from loadlab.collect.host import HostCollector
from loadlab.collect.nccl import NcclInspectorCollector
from tests.support.fake_nvml import FakeNvml  # pynvml stand-in: Python-side cost only
from tests.support.nccl_inspector import inspector_line

TRACE = REPO / "tests" / "collect" / "data" / "gpu_h200_tp2_decode.jsonl"


def eight_gpu_trace(directory: Path) -> Path:
    """The 2-GPU trace widened to 8 GPUs (same values, indices 0..7)."""
    out = directory / "gpu8.jsonl"
    with open(out, "w") as f:
        for line in TRACE.read_text().splitlines():
            d = json.loads(line)
            for k in range(4):
                f.write(json.dumps({**d, "index": d["index"] + 2 * k}) + "\n")
    return out


def cost(name: str, collector, seconds: float) -> None:
    ticks = []
    cpu0, wall0 = time.process_time(), time.monotonic()
    collector.start(lambda batch: ticks.append(len(batch)))
    time.sleep(seconds)
    collector.stop()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    if not ticks:
        print(f"{name:<48} {1000 * cpu:6.2f} ms CPU in all (disabled at start, no ticks)")
        return
    print(
        f"{name:<48} {100 * cpu / wall:5.2f}% of a core  {1000 * cpu / len(ticks):5.2f} ms CPU/tick  "
        f"{len(ticks)} ticks  {sum(ticks) / len(ticks):.0f} samples/tick"
    )


def server_metrics_costs(seconds: float, tmp_path: Path) -> None:
    """The /metrics scraper at its default 1 s against live servers, then one Prometheus pull.

    The servers run in their own processes, so only the scraper's CPU lands in this process.
    Parsing cost follows the size of the page (histogram buckets), not the load.
    """
    from loadlab.collect.prometheus_server import PrometheusCollector
    from loadlab.collect.server_metrics import ServerMetricsCollector
    from tests.support.mock_load import mock_server
    from tests.support.procs import BIN, Proc, free_port
    from tests.support.prometheus import prometheus_server

    with mock_server() as (url, _):
        cost("server: loadlab mock /metrics, 1 s", ServerMetricsCollector(f"{url}/metrics", 1.0), seconds)
        with prometheus_server([url.removeprefix("http://")], tmp_path / "prom") as prom:
            prom.wait_for_scrapes(int(seconds), timeout=seconds + 30)
            pull = PrometheusCollector(prom.url, step=1.0)
            end = time.time()
            cpu0 = time.process_time()
            samples = pull.pull(end - seconds, end)
            cpu = time.process_time() - cpu0
            print(
                f"{'prometheus: one pull of the window, step 1 s':<48} {1000 * cpu:6.1f} ms CPU once  "
                f"{len(samples)} samples over {seconds:.0f} s"
            )
    port = free_port()
    ref = f"http://127.0.0.1:{port}"
    with Proc(
        [str(BIN / "python"), "-m", "reference_server", "--port", str(port), "--preset", "tiny"],
        ready_url=f"{ref}/metrics",
        timeout=120,
    ):
        cost("server: reference server /metrics, 1 s", ServerMetricsCollector(f"{ref}/metrics", 1.0), seconds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.seconds:.0f} s per collector")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cost("gpu: replay, 2 GPUs, 250 ms", GpuCollector(0.25, ReplayBackend(TRACE)), args.seconds)
        cost("gpu: replay, 8 GPUs, 250 ms", GpuCollector(0.25, ReplayBackend(eight_gpu_trace(tmp_path))), args.seconds)
        cost(
            "gpu: NvmlBackend over stand-in, 2 GPUs, 250 ms",
            GpuCollector(0.25, NvmlBackend(nvml=FakeNvml())),
            args.seconds,
        )
        cost("gpu: no NVML (real pynvml, no driver)", GpuCollector(0.25), args.seconds)
        cost(
            "host: host + 2 processes, 1 s",
            HostCollector({"self": os.getpid(), "parent": os.getppid()}, 1.0),
            args.seconds,
        )
        dump = tmp_path / "nccl"
        dump.mkdir()
        (dump / "node0-pid1.log").write_text("".join(inspector_line(0, i, 300) for i in range(1, 2001)))
        cost("nccl: 2000 records then idle tail, 1 s", NcclInspectorCollector(str(dump), 1.0), args.seconds)
        server_metrics_costs(args.seconds, tmp_path)


if __name__ == "__main__":
    main()
