"""How soon `loadlab run` stops on SIGTERM with the largest requests in flight (issue 29: within a
second in every phase). Against `loadlab mock`: 4 users sending 600 s audio clips (the bound, ~24 MiB
a body), SIGTERM 1 s after run.json appears; the time from the signal to the process's exit, and
its exit code (130: interrupted) and run.json's status, per round.

    .venv/bin/python bench/sigterm_stop.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.mock_load import mock_server
from tests.support.procs import BIN, REPO

LOAD = ("--audio-seconds", "600", "--concurrency", "4", "--duration", "60", "--no-server-metrics", "--no-gpu")


def one_round(url: str, out: Path) -> tuple[float, int, str]:
    """(seconds from SIGTERM to exit, exit code, run.json's status)."""
    run = subprocess.Popen(
        [str(BIN / "loadlab"), "run", "--url", url, *LOAD, "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (out / "run.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)  # its users build and send 24 MiB requests
    sent = time.monotonic()
    os.kill(run.pid, signal.SIGTERM)
    code = run.wait(60)
    took = time.monotonic() - sent
    return took, code, json.loads((out / "run.json").read_text())["status"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    took = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock_server("--model", "m", "--ttft", "0.01", "--itl", "0.005") as (url, _),
    ):
        for i in range(args.rounds):
            seconds, code, status = one_round(url, Path(tmp) / f"run{i}")
            took.append(seconds)
            print(f"round {i + 1}: exit {code} ({status}) {seconds:.2f} s after SIGTERM", flush=True)
    print(f"SIGTERM to exit: median {statistics.median(took):.2f} s, max {max(took):.2f} s over {len(took)} rounds")
    print(f"load average at the end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
