"""`loadlab simulate`'s speed: simulated seconds per wall second, and where the time goes.

    .venv/bin/python bench/simulate_bench.py                 # the issue's target: 1,000 users, 600 s
    .venv/bin/python bench/simulate_bench.py --users 100 --seconds 60 --profile 25   # hot path
    .venv/bin/python bench/simulate_bench.py --digest       # fingerprints: a speed-up must keep them
    .venv/bin/python bench/simulate_bench.py --folder-digest   # ... and the run folders' content

Runs the simulator in this process (the planning of loadlab.conductor.simulate feeding
reference_server.simulate.Simulation, output to /dev/null-like memory), so the figure is the
simulator's own, on one core; `--cli` times the whole `loadlab simulate` instead (the run folder
too). Prints one Markdown row (bench/results/simulate.md). `--digest` prints instead the SHA-256 of
the simulator's whole output (every request's token times, every /metrics scrape) for a few fixed
scenarios that reach preemption, prefix-cache hits, think times, open loop and tensor parallelism:
a change meant only to make the engine faster must leave them as they were. `--folder-digest`
prints the SHA-256 of the run folder's content written from them (every request and sample row,
run.json and summary.json, on a fixed epoch): the same for a change to how the folder is written.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


class Discarding(io.TextIOBase):
    """A sink that keeps nothing (the simulator's own cost, not a file's)."""

    def write(self, text: str) -> int:
        return len(text)


class Hashing(io.TextIOBase):
    """A sink that keeps only the SHA-256 of what is written to it, less the wall-clock times in it
    (prometheus_client's `_created` samples)."""

    def __init__(self) -> None:
        self.hash = hashlib.sha256()

    def write(self, text: str) -> int:
        item = json.loads(text)
        if item["kind"] == "metrics":
            item["text"] = "\n".join(line for line in item["text"].split("\n") if "_created" not in line)
        self.hash.update(json.dumps(item).encode())
        return len(text)


# (name, twin, engine settings beyond the twin, RunConfig fields, workload fields): each reaches
# parts of the engine the target case does not.
DIGESTS: list[tuple[str, str, dict, dict, dict]] = [
    ("target, 20 s", "h100:llama-3-8b", {"max_num_seqs": 256, "max_num_batched_tokens": 8192},
     {"concurrency": [1000], "duration": 20.0}, {"input_len": "512", "output_len": "256"}),
    ("preemption, prefix hits, think time", "l40s:llama-3-8b",
     {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.41},
     {"concurrency": [24, 96], "duration": 30.0, "think_time": "lognormal:0.5:0.4"},
     {"kind": "shared_prefix", "prefix_len": 256, "input_len": "uniform:32:512", "output_len": "uniform:16:384"}),
    ("open loop, tp4, chunked prefill", "a100:llama-3-70b:tp4", {"max_num_seqs": 48, "max_num_batched_tokens": 1024},
     {"rate": [4.0, 12.0], "duration": 40.0, "arrival": "gamma", "burstiness": 0.5},
     {"input_len": "lognormal:1500:800", "output_len": "uniform:1:300"}),
]  # fmt: skip


def run_config(run_fields: dict, workload_fields: dict) -> Any:
    """The RunConfig of `loadlab simulate` with these load and workload flags."""
    from loadlab.conductor.simulate import MODEL_NAME
    from loadlab.config import RunConfig
    from loadlab.workload.distributions import parse_length, parse_seconds

    if "think_time" in run_fields:
        run_fields = {**run_fields, "think_time": parse_seconds(run_fields["think_time"])}
    cfg = RunConfig(url="http://simulated", model=MODEL_NAME, **run_fields)
    for name, value in workload_fields.items():
        setattr(cfg.workload, name, parse_length(value) if isinstance(value, str) and name.endswith("_len") else value)
    return cfg


def simulation_of(twin: str, engine_fields: dict, run_fields: dict, workload_fields: dict, sink: io.TextIOBase) -> Any:
    """The simulator of this run, as `loadlab simulate` would set it up, writing to `sink`."""
    from loadlab.conductor.runloop import plan_steps
    from loadlab.conductor.simulate import EngineSettings, _header, planned_requests
    from reference_server.simulate import Simulation

    cfg = run_config(run_fields, workload_fields)
    header = _header(cfg, EngineSettings(twin, **engine_fields), plan_steps(cfg))
    return Simulation(header, planned_requests(cfg), sink)


def digests() -> None:
    """Print each fixed scenario's output digest and how long it took."""
    for name, twin, engine_fields, run_fields, workload_fields in DIGESTS:
        sink = Hashing()
        start = time.process_time()
        simulation_of(twin, engine_fields, run_fields, workload_fields, sink).run()
        print(f"{sink.hash.hexdigest()}  {name} ({time.process_time() - start:.1f} s CPU)")


def folder_digests() -> None:
    """Print the SHA-256 of the run folder `loadlab simulate` writes for each fixed scenario: every
    request row, every sample row, run.json and summary.json (less the writing process's host and
    the folder's path), with the virtual clock's epoch fixed (it is the wall clock's now otherwise)."""
    import pyarrow.parquet as pq

    from loadlab.conductor.runloop import plan_steps
    from loadlab.conductor.simulate import EngineSettings, _header, _run_simulator, _write_folder, planned_requests

    for name, twin, engine_fields, run_fields, workload_fields in DIGESTS:
        cfg = run_config(run_fields, workload_fields)
        engine, plans = EngineSettings(twin, **engine_fields), plan_steps(cfg)
        start = time.process_time()
        with tempfile.TemporaryDirectory() as tmp:
            results, folder = Path(tmp) / "results.jsonl", Path(tmp) / "run"
            _run_simulator(_header(cfg, engine, plans), planned_requests(cfg), results)
            with results.open() as lines:
                _write_folder(cfg, engine, plans, lines, folder, 1.8e9, 0.0)
            digest = hashlib.sha256()
            for table in ("requests", "samples"):
                rows = pq.read_table(folder / table).to_pylist()
                digest.update(json.dumps(rows).encode())
            meta, summary = (json.loads((folder / name).read_text()) for name in ("run.json", "summary.json"))
            del meta["host"], summary["path"]  # (the process that wrote it, the folder's place)
            digest.update(json.dumps([meta, summary], sort_keys=True).encode())
        print(f"{digest.hexdigest()}  {name}, run folder ({time.process_time() - start:.1f} s CPU here)")


def in_process(args: argparse.Namespace) -> tuple[float, float]:
    """Wall and CPU seconds of one simulation run in this process."""
    engine_fields = {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens}
    run_fields = {"concurrency": [args.users], "duration": args.seconds}
    workload_fields = {"input_len": str(args.input_len), "output_len": str(args.output_len)}
    # Drawing the requests is timed too (in `loadlab simulate` the loadlab process does it, beside).
    sink = Discarding()
    simulation = simulation_of(args.twin, engine_fields, run_fields, workload_fields, sink)
    start, cpu = time.perf_counter(), time.process_time()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(simulation.run)
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(args.profile)
    else:
        simulation.run()
    return time.perf_counter() - start, time.process_time() - cpu


def via_cli(args: argparse.Namespace) -> tuple[float, float]:
    """Wall and CPU seconds (both processes) of the whole `loadlab simulate` (planning, simulator,
    run folder, its summary and verdict)."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            str(BIN / "loadlab"), "simulate", "--twin", args.twin, "--concurrency", str(args.users),
            "--duration", str(args.seconds), "--input-len", str(args.input_len), "--output-len", str(args.output_len),
            "--max-num-seqs", str(args.max_num_seqs), "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--out", f"{tmp}/run",
        ]  # fmt: skip
        start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return time.perf_counter() - start, cpu


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
    parser.add_argument("--digest", action="store_true", help="print the fixed scenarios' output digests")
    parser.add_argument("--folder-digest", action="store_true", help="... and of the run folders written from them")
    args = parser.parse_args()
    if args.digest or args.folder_digest:
        (folder_digests if args.folder_digest else digests)()
        return
    # CPU seconds beside wall seconds: on a shared host the wall time measures the neighbours too.
    print("| twin | users | simulated s | wall s | CPU s | simulated s per wall s | what |")
    print("|---|---|---|---|---|---|---|")
    if args.cli:
        wall, cpu = via_cli(args)
        what = "loadlab simulate (all)"
    else:
        wall, cpu = in_process(args)
        what = "simulator, in process"
    load = os.getloadavg()[0]
    print(
        f"| {args.twin} | {args.users} | {args.seconds:g} | {wall:.1f} | {cpu:.1f} | {args.seconds / wall:.2f} "
        f"| {what}, load average {load:.1f} |"
    )


if __name__ == "__main__":
    main()
