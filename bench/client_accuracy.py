"""How exact and how cheap is loadlab's streaming client? (a benchmark, not a test)

Runs `loadlab run` on CPU core 0 against `loadlab mock` on core 1 (taskset), then compares every
token's client timestamp with the time the mock says it sent it (GET /truth, by X-Request-Id):

    .venv/bin/python bench/client_accuracy.py [--seconds 20] [--only 256]

Scenarios: 32 and 256 concurrent streams of 128 tokens at 50 ms TTFT / 20 ms ITL, and open-loop
Poisson at 20 req/s. Reported per scenario: client CPU (cores, and µs per token), achieved vs
requested load, TTFT and ITL error against the truth at p50/p99, the self-check's loop lag p99.
Prints a markdown table for bench/results/client.md.
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.store.reader import load_run  # noqa: E402
from tests.support.procs import BIN, Proc, free_port  # noqa: E402
from report_table import print_results  # noqa: E402  (bench/ is on sys.path: the script's folder)

TTFT, ITL, TOKENS = 0.05, 0.02, 128


@dataclass
class Scenario:
    name: str
    load: list[str]          # loadlab run flags choosing the load
    requested: float         # users or requests/s
    mode: str


SCENARIOS = [
    Scenario("32 streams", ["--concurrency", "32"], 32, "closed"),
    Scenario("256 streams", ["--concurrency", "256"], 256, "closed"),
    Scenario("Poisson 20 req/s", ["--rate", "20", "--arrival", "poisson"], 20, "open"),
]


def pinned(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


def run_scenario(s: Scenario, seconds: float, folder: Path) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mock = [*pinned(1), str(BIN / "loadlab"), "mock", "--port", str(port), "--ttft", str(TTFT),
            "--itl", str(ITL), "--output-len", str(TOKENS)]
    with Proc(mock, ready_url=f"{url}/health"):
        cmd = [*pinned(0), str(BIN / "loadlab"), "run", "--url", url, *s.load, "--duration", str(seconds),
               "--output-len", str(TOKENS), "--input-len", "128", "--no-server-metrics", "--no-gpu",
               "--timeout", "60", "--out", str(folder)]
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
    for rec in ok.itertuples():
        real = np.asarray(truth[rec.request_id]["token_times"])
        mine = np.asarray(rec.token_times)
        if len(real) != len(mine) or not len(real):
            continue
        ttft_err.append(mine[0] - real[0])
        itl_err.extend(np.diff(mine) - np.diff(real))
    samples = run.samples
    cpu = samples[(samples["signal"] == "client_cpu") & samples["time"].between(step.start_time, step.end_time + 1)]
    lag = samples[(samples["signal"] == "client_loop_lag") & samples["time"].between(step.start_time, step.end_time)]
    # Tokens received during the step window (drained requests stream on past it).
    tokens = sum(int(((np.asarray(t) >= step.start_time) & (np.asarray(t) <= step.end_time)).sum())
                 for t in req["token_times"])
    cores = float(cpu["value"].mean()) if len(cpu) else float("nan")
    if s.mode == "closed":   # Little's law over the window: mean requests in flight
        inside = req[(req["send_time"] >= step.start_time) & (req["send_time"] < step.end_time)]
        busy = (np.minimum(inside["end_time"], step.end_time) - inside["send_time"]).sum()
        achieved = busy / window
    else:
        achieved = ((req["scheduled_time"] >= step.start_time) & (req["scheduled_time"] < step.end_time)).sum() / window
    delay = (req["send_time"] - req["scheduled_time"]).to_numpy()
    ms = lambda v, q: float(np.percentile(np.asarray(v) * 1000, q)) if len(v) else float("nan")  # noqa: E731
    return {
        "requests": len(req), "failed": int((req["error"] != "").sum()),
        "client cores": cores, "µs CPU/token": cores * window / max(tokens, 1) * 1e6,
        "tokens/s": tokens / window, "achieved %": 100 * achieved / s.requested,
        "TTFT err p50 ms": ms(ttft_err, 50), "TTFT err p99 ms": ms(ttft_err, 99),
        "ITL err p50 ms": ms(np.abs(itl_err), 50), "ITL err p99 ms": ms(np.abs(itl_err), 99),
        "start delay p99 ms": ms(delay, 99) if s.mode == "open" else float("nan"),
        "loop lag p99 ms": ms(lag["value"], 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="load duration per scenario")
    parser.add_argument("--only", default="", help="run only scenarios whose name contains this")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, s in enumerate(x for x in SCENARIOS if args.only in x.name):
            print(f"running {s.name} for {args.seconds:g} s ...", file=sys.stderr, flush=True)
            rows.append((s.name, run_scenario(s, args.seconds, Path(tmp) / f"run{i}")))
    print_results(f"{args.seconds:g} s per scenario", "scenario", rows)

if __name__ == "__main__":
    main()
