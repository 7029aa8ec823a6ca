"""A run folder reduced to what the HTML report shows: small, typed, already aggregated.

Nothing per request or per token reaches the page: latency distributions become values at fixed
quantiles, time series become interval means, errors become counts per interval. A run of a
million requests therefore makes a page of the same size as a run of a thousand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from loadlab.analyze.analysis import Analysis, read_analysis
from loadlab.analyze.answer import Answer, build_answer
from loadlab.analyze.intervals import GPU_SOURCES, Bins
from loadlab.analyze.measures import measure
from loadlab.analyze.summary import RunSummary, per_request, steps_of, summarize
from loadlab.analyze.timeline import Timeline, build_timeline, gauge
from loadlab.analyze.tokens import TokenTimes
from loadlab.metrics.requests import read_gaps
from loadlab.store.reader import SUMMARY_JSON, RunData, RunFolderError, labels_of, read_stage_json
from loadlab.store.schema import Coverage, ErrorCategory

MAX_INTERVALS = 2000  # a long run gets wider intervals rather than a heavier page
# Where the CDFs are read: dense in the body, denser in the tail where SLOs live.
QUANTILES = np.unique(np.concatenate([np.linspace(0, 0.99, 100), np.linspace(0.99, 0.999, 10), [0.9995, 0.9999, 1.0]]))
MAX_ERROR_EXAMPLES = 3


@dataclass
class Cdf:
    """One latency distribution of one step: `values[i]` is its QUANTILES[i] quantile (seconds)."""

    step: int
    metric: str  # ttft | itl | e2e
    count: int
    values: np.ndarray


@dataclass
class Series:
    """One line of a time-series panel, one value per interval (NaN: nothing measured)."""

    name: str
    values: np.ndarray


@dataclass
class Panel:
    """One row of the time-series chart: a few series sharing a unit, or why there are none."""

    title: str
    unit: str  # "%" series hold 0..1 ratios
    series: list[Series]
    missing: str = ""  # shown instead of the panel when `series` is empty: what adds them

    @property
    def present(self) -> bool:
        return bool(self.series)


@dataclass
class StepMark:
    """A step's start on the time axis (seconds since the run's start)."""

    t: float
    label: str


@dataclass
class TimeSeries:
    """Every panel on one clock: interval starts `t` in seconds since the run's start."""

    t: np.ndarray
    interval: float
    marks: list[StepMark]
    panels: list[Panel]


@dataclass
class ErrorKind:
    """Failed requests of one category: count per interval, total, and a few distinct details."""

    category: str
    per_interval: np.ndarray
    total: int
    examples: list[str]


@dataclass
class StepExtra:
    """Per-step figures the summary does not hold: the slow users' speed."""

    index: int
    user_tokens_per_s_p10: float


@dataclass
class ReportData:
    """Everything one run's report shows. `analysis` is analysis.json as read (None: not written or unreadable)."""

    name: str
    path: str
    summary: RunSummary
    extras: list[StepExtra]
    cdfs: list[Cdf]
    timeseries: TimeSeries
    errors: list[ErrorKind]
    coverage: list[Coverage]
    config: dict[str, Any]
    versions: dict[str, str]
    host: dict[str, Any]
    analysis: Analysis | None = None
    analysis_problem: str = ""  # why analysis.json could not be used
    answer: Answer | None = None  # the answer in plain words (None: no step streamed a token)
    warnings: list[str] = field(default_factory=list)


def build_report_data(run: RunData) -> ReportData:
    """Aggregate a loaded run folder (finished, cut off or empty) for the report."""
    tokens = TokenTimes.of(run.requests["token_times"])
    summary = _summary(run, tokens)
    requests = per_request(run.requests, {s.index: s.mode for s in steps_of(run)})
    measured = requests[~requests["warmup"]]
    timeline = build_timeline(run, _interval(run), requests, tokens)
    bins = Bins(timeline.start, timeline.interval, len(timeline.rows))
    analysis, problem = _analysis(run.path)
    return ReportData(
        name=run.path.resolve().name,
        path=str(run.path),
        summary=summary,
        extras=_extras(measured, summary),
        cdfs=_cdfs(measured, tokens, summary),
        timeseries=_timeseries(run, timeline, bins, summary),
        errors=_errors(measured, bins),
        coverage=list(run.meta.coverage),
        config=run.meta.config.to_dict(),
        versions=run.meta.versions,
        host=run.meta.host,
        analysis=analysis,
        analysis_problem=problem,
        answer=build_answer(run, analysis, measured=measure(run, None, tokens, requests, summary)),
        warnings=summary.warnings + [w for w in run.warnings if w not in summary.warnings],
    )  # e.g. a part skipped now


def _summary(run: RunData, tokens: TokenTimes) -> RunSummary:
    """summary.json when the run wrote one (it holds the run's SLO and goodput), else computed now."""
    try:
        data = read_stage_json(run.path, SUMMARY_JSON)
        if data is not None:
            return RunSummary.from_dict(data)
    except (RunFolderError, ValueError, KeyError, TypeError):
        pass  # computed now, from the records
    return summarize(run, tokens=tokens)


def _interval(run: RunData) -> float:
    """1 s, or wider for a run so long that 1 s intervals would make the page heavy."""
    start, end = run.meta.started_at, run.meta.ended_at
    if not (math.isfinite(start) and math.isfinite(end)):
        times = run.requests["end_time"].to_numpy(float)
        times = times[np.isfinite(times)]
        start, end = (times.min(), times.max()) if times.size else (0.0, 0.0)
    return float(max(1, math.ceil((end - start) / MAX_INTERVALS)))


def _analysis(folder: Path) -> tuple[Analysis | None, str]:
    try:
        return read_analysis(folder), ""
    except RunFolderError as e:
        return None, str(e)


def _extras(measured: pd.DataFrame, summary: RunSummary) -> list[StepExtra]:
    ok = measured[measured["ok"]]
    extras = []
    for step in summary.steps:
        speeds = ok.loc[ok["step"] == step.index, "user_tokens_per_s"].to_numpy(float)
        speeds = speeds[np.isfinite(speeds)]
        extras.append(StepExtra(step.index, float(np.percentile(speeds, 10)) if speeds.size else math.nan))
    return extras


def _cdfs(measured: pd.DataFrame, tokens: TokenTimes, summary: RunSummary) -> list[Cdf]:
    ok = measured[measured["ok"]]
    cdfs = []
    for step in summary.steps:
        in_step = ok[ok["step"] == step.index]
        for metric, values in (
            ("ttft", in_step["ttft"].to_numpy(float)),
            ("itl", read_gaps(tokens.gaps_of(in_step.index))),
            ("e2e", in_step["e2e"].to_numpy(float)),
        ):
            # Sorted first: 113 quantiles of millions of gaps select faster.
            values = np.sort(values[np.isfinite(values)])
            if values.size:
                cdfs.append(Cdf(step.index, metric, int(values.size), np.quantile(values, QUANTILES)))
    return cdfs


# Why a panel can be empty, and what adds its signals (flags of `loadlab run`).
SERVER_MISSING = (
    "no server metrics: the server's /metrics was not scraped (on by default at the URL's "
    "/metrics; --server-metrics URL points elsewhere, --no-server-metrics turns it off; "
    "--prometheus URL reads them from a Prometheus server)"
)
GPU_MISSING = (
    "no GPU samples: loadlab samples NVIDIA GPUs with NVML on the host it runs on (--no-gpu turns "
    "it off); for a remote server run `loadlab gpu-exporter` or dcgm-exporter there and pass "
    "--prometheus URL"
)
NVML_MISSING = (
    "no GPU power or clock samples: these come from NVML only (run loadlab on the GPU host, or "
    "`loadlab gpu-exporter` there with --prometheus URL)"
)
COLLECTIVE_MISSING = (
    "no collective time: needs the engine's collective-time and step-time histograms "
    "(the reference server with tensor parallelism) or NCCL Inspector's output "
    "(--nccl-inspector-dir DIR)"
)
HOST_MISSING = "no host CPU samples: --server-pid PID samples the server process's and its host's CPU"
CLIENT_MISSING = "no requests were recorded"


# Samples read here rather than through the timeline.
EXTRA_SIGNALS = (
    "gpu_util",
    "gpu_sm_active",
    "gpu_tensor_active",
    "gpu_dram_active",
    "gpu_power",
    "gpu_sm_clock",
    "gpu_clock_power_cap",
    "gpu_clock_thermal",
    "gpu_clock_hw_slowdown",
    "host_cpu",
    "process_cpu",
    "client_cpu",
)


def _timeseries(run: RunData, timeline: Timeline, bins: Bins, summary: RunSummary) -> TimeSeries:
    columns = {c: np.array([getattr(r, c) for r in timeline.rows], dtype=float) for c in timeline.columns}
    width = timeline.interval

    def of(*pairs: tuple[str, str], scale: float = 1.0) -> list[Series]:
        return [Series(name, columns[c] * scale) for c, name in pairs if c in columns]

    samples = run.samples[run.samples["signal"].isin(EXTRA_SIGNALS)]  # once, not per signal: runs hold millions
    gpu = [
        Series(name, gauge(samples, signal, GPU_SOURCES, "all", bins))
        for signal, name in (
            ("gpu_util", "GPU busy"),
            ("gpu_sm_active", "SM active"),
            ("gpu_tensor_active", "tensor active"),
            ("gpu_dram_active", "DRAM active"),
        )
    ]
    power = [Series("power per GPU", gauge(samples, "gpu_power", GPU_SOURCES, "all", bins))]
    clock = [Series("SM clock", gauge(samples, "gpu_sm_clock", GPU_SOURCES, "all", bins))]
    slowdown = [
        Series(name, gauge(samples, signal, GPU_SOURCES, "all", bins))
        for signal, name in (
            ("gpu_clock_power_cap", "power cap"),
            ("gpu_clock_thermal", "thermal"),
            ("gpu_clock_hw_slowdown", "HW slowdown"),
        )
    ]
    panels = [
        Panel(
            "Requests per second and in flight",
            "",
            of(("started", "sent/s"), ("completed", "done/s"), ("failed", "failed/s"), scale=1 / width)
            + of(("in_flight", "in flight")),
            CLIENT_MISSING,
        ),
        Panel(
            "Output tokens per second (client)", "tok/s", of(("output_tokens_per_s", "output tok/s")), CLIENT_MISSING
        ),
        Panel(
            "Latency, median within each interval",
            "ms",
            of(("ttft_p50", "TTFT p50"), ("itl_p50", "ITL p50"), scale=1000),
            CLIENT_MISSING,
        ),
        Panel(
            "Server: requests running and waiting",
            "",
            of(("requests_running", "running"), ("requests_waiting", "waiting")),
            SERVER_MISSING,
        ),
        Panel("Server: KV cache usage", "%", of(("kv_usage", "KV usage")), SERVER_MISSING),
        Panel("Server: preemptions per interval", "", of(("preemptions", "preemptions")), SERVER_MISSING),
        Panel("GPU activity (mean over GPUs)", "%", _measured(gpu), GPU_MISSING),
        Panel("GPU power", "W", _measured(power), NVML_MISSING),
        Panel("GPU SM clock", "MHz", _measured(clock), NVML_MISSING),
        Panel("GPU clock slowdowns (share of samples)", "%", _measured(slowdown), NVML_MISSING),
        Panel(
            "Collective share of engine step time",
            "%",
            of(("collective_share", "collective share")),
            COLLECTIVE_MISSING,
        ),
        Panel("CPU", "cores", _measured(_cpu(samples, bins)), HOST_MISSING),
    ]
    marks = [StepMark(s.start_time - timeline.start, s.label) for s in summary.steps if math.isfinite(s.start_time)]
    return TimeSeries(t=bins.starts - timeline.start, interval=width, marks=marks, panels=panels)


def _cpu(samples: pd.DataFrame, bins: Bins) -> list[Series]:
    """Host CPU, each sampled process's CPU (by role) and the load generator's (mean per process)."""
    series = [Series("host", gauge(samples, "host_cpu", ("host",), "all", bins))]
    processes = samples[samples["signal"] == "process_cpu"]
    for labels in sorted(processes["labels"].unique()):
        role = labels_of(labels).get("role", "?")
        series.append(
            Series(
                f"{role} process",
                gauge(processes[processes["labels"] == labels], "process_cpu", ("host",), "all", bins),
            )
        )
    series.append(Series("load generator (mean per process)", gauge(samples, "client_cpu", ("client",), "all", bins)))
    return series


def _measured(series: list[Series]) -> list[Series]:
    """The series with at least one value (all zeros is a finding: GPUs that never slowed down)."""
    return [s for s in series if not np.all(np.isnan(s.values))]


def _errors(measured: pd.DataFrame, bins: Bins) -> list[ErrorKind]:
    """Failed and aborted requests by category, counted in the interval where they ended."""
    failed = measured[~measured["ok"]]
    kinds = []
    for category, group in failed.groupby("error", sort=True):
        details = [d for d in group["error_detail"].fillna("").unique() if d][:MAX_ERROR_EXAMPLES]
        kinds.append(ErrorKind(str(category), bins.total(group["end_time"]), len(group), [str(d) for d in details]))
    # Aborted last: cut off by the run's stop, not the server's failure.
    return sorted(kinds, key=lambda k: (k.category == ErrorCategory.ABORTED.value, -k.total))
