"""`make demo`: start the reference server (tiny preset, CPU), load-test it at a few concurrency
levels with `loadlab run`, print the summary and the per-second timeline, stop the server, write
the HTML report and print its path. `make report` runs the same into runs/example and
reports/example.html (`--out`, `--report`).

Everything runs as real processes on loopback; the server is ended by its PID.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STEPS = "1,4,16"
STEP_SECONDS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"error: the reference server exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"error: the reference server was not ready after {timeout:.0f} s")


def main(argv: list[str] | None = None) -> None:
    """Run the demo end to end; exit non-zero if any stage fails."""
    parser = argparse.ArgumentParser(prog="python -m loadlab.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S"),
                        help="run folder to write (must not hold a run yet)")
    parser.add_argument("--report", type=Path, default=None, help="HTML report to write (default reports/<run>.html)")
    args = parser.parse_args(argv)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    out = args.out
    loadlab = [sys.executable, "-m", "loadlab.cli"]
    print(f"Starting the reference server (tiny preset, CPU) on {url} ...", flush=True)
    server = subprocess.Popen([sys.executable, "-m", "reference_server", "--preset", "tiny",
                               "--port", str(port)], env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        _wait_ready(f"{url}/health", server)
        run = subprocess.run([*loadlab, "run", "--url", url, "--concurrency", STEPS,
                              "--step-duration", str(STEP_SECONDS), "--input-len", "uniform:32:128",
                              "--output-len", "64", "--out", str(out), "--server-pid", str(server.pid)])
        if run.returncode != 0:
            sys.exit(run.returncode)
        subprocess.run([*loadlab, "timeline", str(out)])
        print(f"\nRun folder: {out}  (re-read it any time with: loadlab summary {out})")
    finally:
        _stop(server)
    report = subprocess.run([*loadlab, "report", str(out), *(["-o", str(args.report)] if args.report else [])],
                            stdout=subprocess.PIPE, text=True)
    if report.returncode != 0:
        sys.exit(report.returncode)
    print(f"Report: {report.stdout.strip()}  (one file, opens offline in any browser)")


def _stop(server: subprocess.Popen) -> None:
    """End the server by its PID: SIGTERM, then SIGKILL after 20 s."""
    if server.poll() is None:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
