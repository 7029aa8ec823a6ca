"""A large synthetic run folder, written straight to Parquet (building a million RequestRecords
would take longer than what the benchmarks measure).

A closed-loop concurrency sweep (32 to 512 users; a million requests take about an hour) whose TTFT
and ITL grow with the load, a few failures of several kinds, and per-second server, GPU (8 GPUs
every 0.25 s) and host samples: the shape a real sweep of a GPU server leaves, at any size.
Used by bench/report_scale.py.

Usage: .venv/bin/python bench/synthetic_run.py FOLDER [requests] [tokens_per_request]
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from loadlab.analyze.summary import write_summary
from loadlab.clock import ClockAnchor
from loadlab.config import RunConfig
from loadlab.store.meta import FINISHED, RunMeta, write_json_atomic
from loadlab.store.reader import REQUESTS_DIR, RUN_JSON, SAMPLES_DIR, load_run
from loadlab.store.schema import TOKEN_EVENTS_CHUNKS, Coverage, RequestRecord, StepInfo
from loadlab.store.tables import REQUEST_SCHEMA, SAMPLE_SCHEMA

CONCURRENCY = [32, 64, 128, 256, 512]
T0 = 1_764_000_000.0
GPUS = 8
ERRORS = {"timeout": 0.002, "http_5xx": 0.002, "http_429": 0.001}
# What a synthetic request leaves as a RequestRecord would (the server's own timings, images, ...).
DEFAULTS = {f.name: f.default for f in dataclasses.fields(RequestRecord) if f.default is not dataclasses.MISSING}


def write_synthetic_run(folder: Path, requests: int = 1_000_000, tokens: int = 64, seed: int = 0) -> None:
    """Write a finished run folder of about `requests` requests of `tokens` output tokens each."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    (folder / REQUESTS_DIR).mkdir()
    (folder / SAMPLES_DIR).mkdir()
    itl = {c: 0.004 * (1 + c / 256) for c in CONCURRENCY}
    ttft = {c: 0.05 * (1 + (c / 256) ** 2) for c in CONCURRENCY}
    per_second = sum(c / (ttft[c] + tokens * itl[c]) for c in CONCURRENCY)
    duration = requests / per_second  # seconds per step
    steps, tables = [], []
    for i, c in enumerate(CONCURRENCY):
        start = T0 + i * duration
        steps.append(StepInfo(i, f"concurrency={c}", "closed", float(c), start, start + duration))
        n = int(c * duration / (ttft[c] + tokens * itl[c]))
        tables.append(_requests(rng, i, n, start, duration, ttft[c], itl[c], tokens))
    pq.write_table(pa.concat_tables(tables), folder / REQUESTS_DIR / "part-000000.parquet")
    end = T0 + len(CONCURRENCY) * duration
    pq.write_table(_samples(rng, steps, end), folder / SAMPLES_DIR / "part-000000.parquet")
    config = RunConfig(url="http://gpu-server:8000", model="synthetic", concurrency=CONCURRENCY, step_duration=duration)
    meta = RunMeta(
        status=FINISHED,
        config=config,
        versions={"loadlab": "synthetic"},
        host={"hostname": "bench"},
        anchor=ClockAnchor(T0, 0.0),
        started_at=T0,
        ended_at=end,
        steps=steps,
        coverage=[
            Coverage("server", True, ok_samples=int(end - T0)),
            Coverage("gpu", True, ok_samples=int(end - T0) * 4 * GPUS),
        ],
    )
    write_json_atomic(folder / RUN_JSON, meta.to_dict())
    write_summary(load_run(folder))  # as `loadlab run` does at its end


def _requests(
    rng: np.random.Generator, step: int, n: int, start: float, duration: float, ttft: float, itl: float, tokens: int
) -> pa.Table:
    send = start + rng.uniform(0, duration * 0.98, n)
    first = send + ttft * rng.lognormal(0, 0.3, n)
    gaps = itl * rng.lognormal(0, 0.2, (n, tokens))
    gaps[:, 0] = 0.0
    times = first[:, None] + np.cumsum(gaps, axis=1)
    error = np.full(n, "", dtype=object)
    draw = rng.uniform(0, 1, n)
    edge = 0.0
    for category, share in ERRORS.items():
        error[(draw >= edge) & (draw < edge + share)] = category
        edge += share
    ok = error == ""
    counts = np.where(ok, tokens, 0)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    values = times[ok].ravel()
    end = np.where(ok, times[:, -1], send + 1.0)
    columns = {
        "request_id": pa.array([f"{step}-{k}" for k in range(n)]),
        "worker": pa.array(["bench:1"] * n),
        "step": pa.array(np.full(n, step)),
        "warmup": pa.array(np.zeros(n, dtype=bool)),
        "api": pa.array(["chat"] * n),
        "scheduled_time": pa.array(send),
        "send_time": pa.array(send),
        "first_token_time": pa.array(np.where(ok, first, np.nan)),
        "end_time": pa.array(end),
        "token_times": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        "token_clock": pa.array(["kernel"] * n),
        "prompt_tokens": pa.array(np.full(n, 256)),
        "completion_tokens": pa.array(counts),
        "client_tokens": pa.array(counts),
        "token_events": pa.array(np.where(ok, TOKEN_EVENTS_CHUNKS, "")),
        "input_tokens": pa.array(np.full(n, 256)),
        "max_tokens": pa.array(np.full(n, tokens)),
        "finish_reason": pa.array(np.where(ok, "length", "")),
        "status": pa.array(np.where(ok, 200, 500)),
        "error": pa.array(error.astype(str)),
        "error_detail": pa.array(np.where(ok, "", "synthetic failure")),
        "conversation": pa.array([""] * n),
        "turn": pa.array(np.full(n, -1)),
    }
    for f in REQUEST_SCHEMA:
        if f.name not in columns:
            columns[f.name] = pa.array([DEFAULTS[f.name]] * n, type=f.type)
    return pa.Table.from_pydict(columns, schema=REQUEST_SCHEMA)


def _samples(rng: np.random.Generator, steps: list[StepInfo], end: float) -> pa.Table:
    seconds = np.arange(T0, end, 1.0)
    load = np.interp(seconds, [s.start_time for s in steps], [s.target for s in steps])
    frames = [
        _series(seconds, "server", "requests_running", load, '{"engine": "0"}'),
        _series(seconds, "server", "requests_waiting", np.maximum(load - 256, 0), '{"engine": "0"}'),
        _series(seconds, "server", "kv_usage", np.minimum(load / 300, 1.0), '{"engine": "0"}'),
        _series(seconds, "server", "preemptions", np.cumsum(load > 300).astype(float), '{"engine": "0"}'),
        _series(seconds, "host", "host_cpu", 2 + rng.uniform(0, 1, seconds.size), "{}"),
        _series(seconds, "host", "process_cpu", 1 + load / 256, '{"role": "server"}'),
        _series(seconds, "client", "client_cpu", 0.2 + load / 600, '{"worker": "bench:1"}'),
    ]
    quarter = np.arange(T0, end, 0.25)
    busy = np.minimum(np.interp(quarter, seconds, load) / 400, 1.0)
    for gpu in range(GPUS):
        labels = json.dumps({"gpu": str(gpu), "uuid": f"GPU-{gpu}"}, sort_keys=True)
        for signal, values in (
            ("gpu_util", np.minimum(busy * 1.5, 1)),
            ("gpu_sm_active", busy * 0.8),
            ("gpu_dram_active", busy * 0.6),
            ("gpu_tensor_active", busy * 0.3),
            ("gpu_power", 150 + 500 * busy),
            ("gpu_sm_clock", 1980 - 200 * busy),
            ("gpu_clock_power_cap", (busy > 0.9).astype(float)),
            ("gpu_clock_thermal", np.zeros(quarter.size)),
            ("gpu_clock_hw_slowdown", np.zeros(quarter.size)),
            ("gpu_clock_slowdown", (busy > 0.9).astype(float)),
        ):
            frames.append(_series(quarter, "gpu", signal, values + rng.normal(0, 0.01, quarter.size), labels))
    return pa.concat_tables(frames)


def _series(times: np.ndarray, source: str, signal: str, values: np.ndarray, labels: str) -> pa.Table:
    n = times.size
    return pa.Table.from_pydict(
        {
            "time": times,
            "source": [source] * n,
            "signal": [signal] * n,
            "labels": [labels] * n,
            "value": values.astype(float),
        },
        schema=SAMPLE_SCHEMA,
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    write_synthetic_run(Path(args[0]), *(int(a) for a in args[1:3]))
