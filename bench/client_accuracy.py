"""How exact and how cheap is loadlab's streaming client? (a benchmark, not a test)

Runs `loadlab run` on CPU core 0 against `loadlab mock` on core 1 (taskset), then compares each
request with what the mock recorded of it (GET /truth, by X-Request-Id):

    .venv/bin/python bench/client_accuracy.py [--seconds 20] [--only 256] [--ramp-up S] [--nice N]

Scenarios: 32 and 256 concurrent streams of 128 tokens at 50 ms TTFT / 20 ms ITL, and open-loop
Poisson at 20 req/s. Reported per scenario: client CPU (cores, and µs per token), achieved vs
requested load, TTFT error at p50/p99 as the server sees it (the client's TTFT from its send time
minus the mock's, from the request's arrival to its first token: connection set-up and queueing
in the client count as error), every request included, and apart for the first wave (each
user's first request, closed loop); ITL error against the mock's token times; the self-check's
loop lag p99. Prints a markdown table for bench/results/client.md. On a machine shared with other
work, `--nice 10` runs the mock and the client at nice -10, and this session's autogroup too (Linux
schedules sessions against each other first; needs root): what the client measures when it and the
server get their cores, rather than how busy the neighbours are.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.store.reader import load_run
from report_table import print_results  # bench/ is on sys.path: the script's folder
from tests.support.procs import BIN, Proc, free_port

TTFT, ITL, TOKENS = 0.05, 0.02, 128


@dataclass
class Scenario:
    name: str
    load: list[str]  # loadlab run flags choosing the load
    requested: float  # users or requests/s
    mode: str


SCENARIOS = [
    Scenario("32 streams", ["--concurrency", "32"], 32, "closed"),
    Scenario("256 streams", ["--concurrency", "256"], 256, "closed"),
    Scenario("Poisson 20 req/s", ["--rate", "20", "--arrival", "poisson"], 20, "open"),
]


def pinned(core: int, nice: int) -> list[str]:
    """The command prefix that runs on `core` (where taskset exists), at nice -`nice` when > 0."""
    pin = ["taskset", "-c", str(core)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
    return (["nice", "-n", str(-nice)] if nice > 0 else []) + pin


@contextmanager
def own_autogroup(nice: int) -> Iterator[None]:
    """With nice > 0 (and root), this process and its children in an autogroup of their own at
    nice -`nice` until the block ends: Linux shares the CPU between autogroups first."""
    group = Path("/proc/self/autogroup")
    before = group.read_text().split()[-1] if nice > 0 and group.exists() else ""
    if before:
        try:
            os.setsid()  # an autogroup of its own: the caller's other processes keep their share
        except PermissionError:  # already a process group leader: the caller's group changes too
            pass
        group.write_text(str(-nice))
    try:
        yield
    finally:
        if before:
            group.write_text(before)


def run_scenario(s: Scenario, seconds: float, folder: Path, ramp_up: str, nice: int) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mock = [
        *pinned(1, nice),
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
    ]
    with Proc(mock, ready_url=f"{url}/health"):
        cmd = [
            *pinned(0, nice),
            str(BIN / "loadlab"),
            "run",
            "--url",
            url,
            *s.load,
            "--duration",
            str(seconds),
            "--output-len",
            str(TOKENS),
            "--input-len",
            "128",
            "--no-server-metrics",
            "--no-gpu",
            "--timeout",
            "60",
            "--out",
            str(folder),
            *(["--ramp-up", ramp_up] if ramp_up else []),
        ]
        subprocess.run(cmd, check=True, capture_output=True, timeout=seconds + 180)
        with urllib.request.urlopen(f"{url}/truth", timeout=30) as r:
            truth = {t["request_id"]: t for t in json.loads(r.read())["requests"]}
    return measure(s, load_run(folder), truth)


def measure(s: Scenario, run, truth: dict[str, dict]) -> dict[str, float]:
    step = run.meta.steps[0]
    window = step.end_time - step.start_time
    req = run.requests
    ok = req[req["error"] == ""]
    ttft_err, itl_err = [], []
    first_wave = set(ok.sort_values("send_time")["request_id"][: int(s.requested)]) if s.mode == "closed" else set()
    first_err = []
    for rec in ok.itertuples():
        served = truth[rec.request_id]
        real = np.asarray(served["token_times"])
        mine = np.asarray(rec.token_times)
        if len(real) != len(mine) or not len(real):
            continue
        # Each side's TTFT on its own clock: the client's from its send, the mock's from arrival.
        err = (mine[0] - rec.send_time) - (real[0] - served["received_time"])
        ttft_err.append(err)
        if rec.request_id in first_wave:
            first_err.append(err)
        itl_err.extend(np.diff(mine) - np.diff(real))
    samples = run.samples
    cpu = samples[(samples["signal"] == "client_cpu") & samples["time"].between(step.start_time, step.end_time + 1)]
    lag = samples[(samples["signal"] == "client_loop_lag") & samples["time"].between(step.start_time, step.end_time)]
    # Tokens received during the step window (drained requests stream on past it).
    tokens = sum(
        int(((np.asarray(t) >= step.start_time) & (np.asarray(t) <= step.end_time)).sum()) for t in req["token_times"]
    )
    cores = float(cpu["value"].mean()) if len(cpu) else float("nan")
    if s.mode == "closed":  # Little's law from the ramp-up's end: mean requests in flight
        start = step.ramp_end if np.isfinite(step.ramp_end) else step.start_time
        inside = req[(req["end_time"] > start) & (req["send_time"] < step.end_time)]
        busy = (np.minimum(inside["end_time"], step.end_time) - np.maximum(inside["send_time"], start)).sum()
        achieved = busy / (step.end_time - start)
    else:
        achieved = ((req["scheduled_time"] >= step.start_time) & (req["scheduled_time"] < step.end_time)).sum() / window
    delay = (req["send_time"] - req["scheduled_time"]).to_numpy()
    ms = lambda v, q: float(np.percentile(np.asarray(v) * 1000, q)) if len(v) else float("nan")  # noqa: E731
    return {
        "requests": len(req),
        "failed": int((req["error"] != "").sum()),
        "client cores": cores,
        "µs CPU/token": cores * window / max(tokens, 1) * 1e6,
        "tokens/s": tokens / window,
        "achieved %": 100 * achieved / s.requested,
        "TTFT err p50 ms": ms(ttft_err, 50),
        "TTFT err p99 ms": ms(ttft_err, 99),
        "first wave TTFT err p99 ms": ms(first_err, 99),
        "ITL err p50 ms": ms(np.abs(itl_err), 50),
        "ITL err p99 ms": ms(np.abs(itl_err), 99),
        "start delay p99 ms": ms(delay, 99) if s.mode == "open" else float("nan"),
        "loop lag p99 ms": ms(lag["value"], 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="load duration per scenario")
    parser.add_argument("--only", default="", help="run only scenarios whose name contains this")
    parser.add_argument("--ramp-up", default="", help="pass --ramp-up to loadlab run (default: its own)")
    parser.add_argument("--nice", type=int, default=0, help="run mock and client at nice -N (root only)")
    args = parser.parse_args()
    with own_autogroup(args.nice):
        rows = run_all(args)
    nice = f", nice -{args.nice}" if args.nice else ""
    print_results(f"{args.seconds:g} s per scenario{nice}", "scenario", rows)


def run_all(args: argparse.Namespace) -> list[tuple[str, dict[str, float]]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, s in enumerate(x for x in SCENARIOS if args.only in x.name):
            print(f"running {s.name} for {args.seconds:g} s ...", file=sys.stderr, flush=True)
            rows.append((s.name, run_scenario(s, args.seconds, Path(tmp) / f"run{i}", args.ramp_up, args.nice)))
    return rows


if __name__ == "__main__":
    main()
