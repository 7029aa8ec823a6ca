"""`make demo`: start the reference server (tiny preset, CPU), load-test it at a few concurrency
levels with `loadlab run`, print the summary and the per-second timeline, stop the server, write
the HTML report and print its path. `make report` runs the same into runs/example and
reports/example.html (`--out`, `--report`).

Everything runs as real processes on loopback; the server is ended by its PID.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from loadlab.lab.processes import NotReady, end_child, free_port, start_child, wait_healthy

STEPS = "1,4,16"
STEP_SECONDS = 8


def main(argv: list[str] | None = None) -> None:
    """Run the demo end to end; exit non-zero if any stage fails."""
    parser = argparse.ArgumentParser(prog="python -m loadlab.demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S"),
        help="run folder to write (must not hold a run yet)",
    )
    parser.add_argument("--report", type=Path, default=None, help="HTML report to write (default reports/<run>.html)")
    args = parser.parse_args(argv)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = args.out
    loadlab = [sys.executable, "-m", "loadlab.cli"]
    print(f"Starting the reference server (tiny preset, CPU) on {url} ...", flush=True)
    server = start_child([sys.executable, "-m", "reference_server", "--preset", "tiny", "--port", str(port)])
    try:
        try:
            wait_healthy(f"{url}/health", server, timeout=120.0)
        except NotReady as e:
            sys.exit(f"error: {e}")
        run = subprocess.run(
            [
                *loadlab,
                "run",
                "--url",
                url,
                "--concurrency",
                STEPS,
                "--step-duration",
                str(STEP_SECONDS),
                "--input-len",
                "uniform:32:128",
                "--output-len",
                "64",
                "--out",
                str(out),
                "--server-pid",
                str(server.pid),
            ]
        )
        if run.returncode != 0:
            sys.exit(run.returncode)
        subprocess.run([*loadlab, "timeline", str(out)])
        print(f"\nRun folder: {out}  (re-read it any time with: loadlab summary {out})")
    finally:
        end_child(server)
    report = subprocess.run(
        [*loadlab, "report", str(out), *(["-o", str(args.report)] if args.report else [])],
        stdout=subprocess.PIPE,
        text=True,
    )
    if report.returncode != 0:
        sys.exit(report.returncode)
    print(f"Report: {report.stdout.strip()}  (one file, opens offline in any browser)")


if __name__ == "__main__":
    main()
