"""The values SLO checks and run comparisons read, per step: the summary's figures plus the raw
per-request values behind them, so any percentile can be taken and resampled.

Metric names are those of loadlab/metrics/slo.py (ttft, itl, tpot, e2e, tps_user, output_tps, rps,
error_rate, goodput); definitions as in docs/metrics.md (the summary computes them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from loadlab.analyze.summary import RunSummary, StepSummary, per_request, steps_of, summarize
from loadlab.analyze.tokens import TokenTimes
from loadlab.metrics.slo import METRICS, Slo
from loadlab.store.reader import RunData
from loadlab.store.schema import ErrorCategory

# The per-request columns of analyze.summary.per_request behind each distribution metric.
_COLUMNS = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2e", "tps_user": "user_tokens_per_s"}


@dataclass
class StepValues:
    """One step (index -1: the whole run): its summary and the successful requests' raw values,
    ordered by send time (request i of every array is the same request)."""

    summary: StepSummary
    per_request: dict[str, np.ndarray]  # ttft, tpot, e2e, tps_user (NaN where undefined)
    itl: np.ndarray  # every inter-token gap of those requests ...
    itl_owner: np.ndarray  # ... and the index of the request it belongs to
    end_times: np.ndarray
    out_tokens: np.ndarray
    failed: np.ndarray  # 1.0 per failed, 0.0 per successful measured request (aborted ones not judged)

    @property
    def label(self) -> str:
        return self.summary.label

    @property
    def count(self) -> int:
        """Successful measured requests."""
        return self.summary.succeeded

    def value(self, metric: str, stat: str = "", share: bool = False) -> float:
        """The step's figure for an SLO metric (a stat such as p99 or mean for a distribution;
        `share`: goodput as the fraction of sent requests meeting the per-request SLO)."""
        s = self.summary
        if METRICS[metric].distribution:
            values, _ = self.samples(metric)
            return statistic(values, stat)
        if metric == "output_tps":
            return s.output_tokens_per_s
        if metric == "rps":
            return s.requests_per_s
        if metric == "error_rate":
            judged = s.sent - s.aborted
            return s.failed / judged if judged > 0 else math.nan
        if s.slo_met is None:  # goodput without per-request objectives
            return math.nan
        if share:
            return s.slo_met / s.sent if s.sent else math.nan
        return s.goodput if s.goodput is not None else math.nan

    def unmeasured(self, metric: str, share: bool = False) -> str:
        """Why the step's figure for `metric` measures nothing ("" when it does): a rate (output_tps,
        rps, goodput in req/s) over a steady window in which nothing ended, or one too short
        (the summary's `rates_unmeasured`)."""
        definition = METRICS[metric]
        rate = not definition.distribution and definition.unit != "fraction" and not share
        return self.summary.rates_unmeasured if rate else ""

    def samples(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """A distribution metric's values and, for each, the request it came from."""
        if metric == "itl":
            return self.itl, self.itl_owner
        values = self.per_request[metric]
        return values, np.arange(values.size)


@dataclass
class RunValues:
    """A whole run's StepValues, its summary and its config (as in run.json)."""

    summary: RunSummary
    steps: list[StepValues]
    overall: StepValues
    config: dict[str, Any]


def statistic(values: np.ndarray, stat: str) -> float:
    """p<q>, mean, min or max of the finite values (NaN when there are none); percentiles as
    loadlab.metrics.stats (linear between ranks)."""
    a = values[np.isfinite(values)]
    if a.size == 0:
        return math.nan
    if stat.startswith("p"):
        return float(np.percentile(a, float(stat[1:])))
    if stat == "mean":
        return float(a.mean())
    return float(a.min() if stat == "min" else a.max())


def measure(
    run: RunData,
    slo: Slo | None = None,
    tokens: TokenTimes | None = None,
    requests: pd.DataFrame | None = None,
    summary: RunSummary | None = None,
) -> RunValues:
    """The run's values per step and overall (goodput with `slo`'s per-request objectives).
    `tokens`, `requests`, `summary`: the run's TokenTimes, `per_request` table and summary when
    the caller already has them (the report: a large run's cost tens of seconds)."""
    if tokens is None:
        tokens = TokenTimes.of(run.requests["token_times"])
    if requests is None:
        requests = per_request(run.requests, {s.index: s.mode for s in steps_of(run)})
    summary = summary or summarize(run, slo, tokens, requests)
    judged = requests[~requests["warmup"] & (requests["error"] != ErrorCategory.ABORTED.value)]
    judged = judged.sort_values("send_time", kind="stable")
    ok = judged[judged["ok"]]

    def values_of(step: StepSummary) -> StepValues:
        rows = ok if step.index < 0 else ok[ok["step"] == step.index]
        gaps = tokens.gaps_of(rows.index)
        read = gaps != 0  # bunched gaps are no ITL (read_gaps)
        outcomes = judged if step.index < 0 else judged[judged["step"] == step.index]
        return StepValues(
            summary=step,
            per_request={m: rows[c].to_numpy(dtype=float) for m, c in _COLUMNS.items()},
            itl=gaps[read],
            itl_owner=np.repeat(np.arange(len(rows)), tokens.gap_counts[rows.index])[read],
            end_times=rows["end_time"].to_numpy(dtype=float),
            out_tokens=rows["out_tokens"].to_numpy(dtype=float),
            failed=(~outcomes["ok"]).to_numpy(dtype=float),
        )

    return RunValues(
        summary=summary,
        steps=[values_of(s) for s in summary.steps],
        overall=values_of(summary.overall),
        config=run.meta.config.to_dict(),
    )
