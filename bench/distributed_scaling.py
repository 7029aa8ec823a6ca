"""What `--processes N` buys and what shipping records to the master costs (a benchmark, not a test).

Runs `loadlab run --processes N` (N = 1, 2, ...) against `loadlab mock` with the same closed-loop
load, then compares every token's client timestamp with the mock's truth (GET /truth, by
X-Request-Id). CPU is read with psutil from the run process (the master, which for N > 1 only
receives, merges and writes records, and draws the live display) and its worker processes,
polled while they live; the cores shown are the mean over the load step.

    .venv/bin/python bench/distributed_scaling.py [--seconds 15] [--users 128] [--processes 1,2]

Prints a markdown table for bench/results/distributed.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.store.reader import load_run
from report_table import print_results  # bench/ is on sys.path: the script's folder
from tests.support.procs import BIN, REPO as CWD, Proc, free_port

TTFT, ITL, TOKENS = 0.05, 0.01, 128


def cpu_trace(proc: subprocess.Popen, poll: float = 0.25) -> list[tuple[float, float, float]]:
    """(epoch time, master CPU s, workers' CPU s) of `proc` and its children, polled until it exits."""
    last: dict[int, float] = {}
    trace = []
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                last[p.pid] = t.user + t.system
        except psutil.Error:
            pass
        trace.append((time.time(), last.get(proc.pid, 0.0), sum(v for k, v in last.items() if k != proc.pid)))
        time.sleep(poll)
    return trace


def cores_between(trace: list[tuple[float, float, float]], start: float, end: float) -> tuple[float, float]:
    """Mean cores used by the master and by the workers between two epoch times."""
    t = np.array(trace)
    at = lambda col, when: float(np.interp(when, t[:, 0], t[:, col]))  # noqa: E731
    return ((at(1, end) - at(1, start)) / (end - start), (at(2, end) - at(2, start)) / (end - start))


def run_once(processes: int, users: int, seconds: float, folder: Path) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc(
        [
            str(BIN / "loadlab"),
            "mock",
            "--port",
            str(port),
            "--ttft",
            str(TTFT),
            "--itl",
            str(ITL),
            "--output-len",
            str(TOKENS),
        ],
        ready_url=f"{url}/health",
    ):
        cmd = [
            str(BIN / "loadlab"),
            "run",
            "--url",
            url,
            "--model",
            "mock",
            "--concurrency",
            str(users),
            "--duration",
            str(seconds),
            "--output-len",
            str(TOKENS),
            "--input-len",
            "64",
            "--server-metrics",
            "off",
            "--timeout",
            "60",
            "--processes",
            str(processes),
            "--out",
            str(folder),
        ]
        proc = subprocess.Popen(cmd, cwd=CWD, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        trace = cpu_trace(proc)
        with urllib.request.urlopen(f"{url}/truth", timeout=30) as r:
            truth = {t["request_id"]: t for t in json.loads(r.read())["requests"]}
    run = load_run(folder)
    step, req = run.meta.steps[0], run.requests
    window = step.end_time - step.start_time
    itl_err = []
    for rec in req[req["error"] == ""].itertuples():
        real, mine = np.asarray(truth[rec.request_id]["token_times"]), np.asarray(rec.token_times)
        if len(real) == len(mine) > 1:
            itl_err.extend(np.abs(np.diff(mine) - np.diff(real)))
    tokens = sum(
        int(((np.asarray(t) >= step.start_time) & (np.asarray(t) <= step.end_time)).sum()) for t in req["token_times"]
    )
    served = len(truth)
    master_cores, worker_cores = cores_between(trace, step.start_time, step.end_time)
    return {
        "requests": len(req),
        "lost": served - len(set(req["request_id"]) & set(truth)),
        "workers": req["worker"].nunique(),
        "tokens/s": tokens / window,
        "ITL err p50 ms": float(np.percentile(itl_err, 50) * 1000),
        "ITL err p99 ms": float(np.percentile(itl_err, 99) * 1000),
        "master cores": master_cores,
        "worker cores": worker_cores,
        "master µs/record": master_cores * window / max(len(req), 1) * 1e6 if processes > 1 else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--users", type=int, default=128)
    parser.add_argument("--processes", default="1,2")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.processes.split(",")):
            print(f"--processes {n}: {args.users} streams for {args.seconds:g} s ...", file=sys.stderr, flush=True)
            rows.append((n, run_once(n, args.users, args.seconds, Path(tmp) / f"run{n}")))
    print_results(
        f"{args.users} closed-loop streams of {TOKENS} tokens (mock TTFT {TTFT * 1000:g} ms, "
        f"ITL {ITL * 1000:g} ms), {args.seconds:g} s",
        "processes",
        rows,
    )


if __name__ == "__main__":
    main()
