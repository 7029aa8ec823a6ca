"""`loadlab simulate`'s speed: simulated seconds per wall second, and where the time goes.

    .venv/bin/python bench/simulate_bench.py                 # the issue's target: 1,000 users, 600 s
    .venv/bin/python bench/simulate_bench.py --users 100 --seconds 60 --profile 25   # hot path

Runs the simulator in this process (the planning of loadlab.conductor.simulate feeding
reference_server.simulate.Simulation, output to /dev/null-like memory), so the figure is the
simulator's own, on one core; `--cli` times the whole `loadlab simulate` instead (the run folder
too). Prints one Markdown row (bench/results/simulate.md).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


class Counting(io.TextIOBase):
    """A sink that counts the lines written to it (the results are not kept)."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += 1
        return len(text)


def in_process(args: argparse.Namespace) -> tuple[float, int]:
    """Wall seconds of one simulation run in this process, and the lines it wrote."""
    from loadlab.conductor.simulate import EngineSettings, planned_requests
    from loadlab.config import RunConfig
    from loadlab.workload.distributions import parse_length
    from reference_server.simulate import Simulation

    cfg = RunConfig(url="http://simulated", concurrency=[args.users], duration=args.seconds, model="loadlab-reference")
    cfg.workload.input_len = parse_length(str(args.input_len))
    cfg.workload.output_len = parse_length(str(args.output_len))
    engine = EngineSettings(args.twin, args.max_num_seqs, args.max_num_batched_tokens)
    header = {
        "engine": engine.to_dict(),
        "api": cfg.api,
        "steps": [{"mode": "closed", "target": args.users, "seconds": args.seconds, "requests": 0, "warmup": 0}],
        "ramp_up": cfg.ramp_up,
        "timeout": cfg.timeout,
        "metrics_interval": cfg.metrics_interval,
    }
    # Drawing the requests is timed too (in `loadlab simulate` the loadlab process does it, beside).
    sink = Counting()
    simulation = Simulation(header, planned_requests(cfg), sink)
    start = time.perf_counter()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(simulation.run)
        pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
    else:
        simulation.run()
    return time.perf_counter() - start, sink.lines


def via_cli(args: argparse.Namespace) -> float:
    """Wall seconds of the whole `loadlab simulate` (planning, simulator, run folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            str(BIN / "loadlab"), "simulate", "--twin", args.twin, "--concurrency", str(args.users),
            "--duration", str(args.seconds), "--input-len", str(args.input_len), "--output-len", str(args.output_len),
            "--max-num-seqs", str(args.max_num_seqs), "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--out", f"{tmp}/run",
        ]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--twin", default="h100:llama-3-8b")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions by cumulative time")
    parser.add_argument("--cli", action="store_true", help="time the whole `loadlab simulate` command")
    args = parser.parse_args()
    print("| twin | users | simulated s | wall s | simulated s per wall s | what |")
    print("|---|---|---|---|---|---|")
    if args.cli:
        wall = via_cli(args)
        what = "loadlab simulate (all)"
    else:
        wall, _ = in_process(args)
        what = "simulator, in process"
    print(f"| {args.twin} | {args.users} | {args.seconds:g} | {wall:.1f} | {args.seconds / wall:.2f} | {what} |")


if __name__ == "__main__":
    main()
