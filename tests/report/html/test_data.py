"""The report's aggregation: exact quantiles, panels present or saying what adds them, errors by
category per interval, analysis.json read or explained."""

from __future__ import annotations

import json
import math

import numpy as np

from loadlab.analyze.analysis import Analysis
from loadlab.report.html.data import (
    COLLECTIVE_MISSING,
    GPU_MISSING,
    HOST_MISSING,
    MAX_INTERVALS,
    QUANTILES,
    SERVER_MISSING,
    build_report_data,
)
from loadlab.store.reader import load_run
from loadlab.store.schema import Sample
from tests.support.analysis import write_analysis
from tests.support.records import T, closed, req
from tests.support.runs import fill_run, run_of, server_samples


def ten_requests() -> list:
    """TTFTs 0.1 .. 1.0 s, each with two gaps of 0.05 s; two failures of two kinds, one aborted."""
    records = [
        req(i, T + i, [T + i + 0.1 * (i + 1), T + i + 0.1 * (i + 1) + 0.05, T + i + 0.1 * (i + 1) + 0.1])
        for i in range(10)
    ]
    records += [
        req(10, T + 2, [], T + 2.5, error="timeout", error_detail="no token for 30 s"),
        req(11, T + 3, [], T + 3.2, error="http_5xx", error_detail="boom"),
        req(12, T + 4, [], T + 4.5, error="http_5xx", error_detail="boom"),
        req(13, T + 9, [], T + 9.9, error="aborted"),
    ]
    return records


def test_cdfs_are_exact_quantiles_of_each_steps_successful_requests():
    data = build_report_data(run_of(ten_requests(), [closed(1)]))
    cdf = {c.metric: c for c in data.cdfs}
    assert cdf["ttft"].count == 10 and cdf["itl"].count == 20 and cdf["e2e"].count == 10
    ttfts = 0.1 * np.arange(1, 11)
    assert np.allclose(cdf["ttft"].values, np.quantile(ttfts, QUANTILES))
    assert math.isclose(cdf["ttft"].values[-1], 1.0) and math.isclose(cdf["ttft"].values[0], 0.1)
    assert np.allclose(cdf["itl"].values, 0.05)


def test_errors_are_counted_by_category_in_the_interval_they_ended_with_aborted_last():
    data = build_report_data(run_of(ten_requests(), [closed(1)]))
    kinds = {k.category: k for k in data.errors}
    assert [k.category for k in data.errors] == ["http_5xx", "timeout", "aborted"]
    assert kinds["http_5xx"].total == 2 and kinds["http_5xx"].examples == ["boom"]  # distinct details
    t = data.timeseries.t
    assert kinds["http_5xx"].per_interval[np.searchsorted(t, 3.2, side="right") - 1] == 1
    assert kinds["http_5xx"].per_interval.sum() == 2 and kinds["timeout"].examples == ["no token for 30 s"]


def test_a_run_without_server_gpu_or_host_signals_says_what_adds_each(tmp_path):
    fill_run(tmp_path / "run", with_server=False)
    panels = {p.title: p for p in build_report_data(load_run(tmp_path / "run")).timeseries.panels}
    assert panels["Output tokens per second (client)"].present
    for title, why in (
        ("Server: requests running and waiting", SERVER_MISSING),
        ("GPU activity (mean over GPUs)", GPU_MISSING),
        ("Collective share of engine step time", COLLECTIVE_MISSING),
    ):
        assert not panels[title].present and panels[title].missing == why
    assert panels["CPU"].missing == HOST_MISSING and "--server-pid" in HOST_MISSING


def test_server_gpu_and_cpu_panels_appear_with_their_signals(tmp_path):
    def content(t0):
        from tests.support.runs import three_requests

        return three_requests(t0), server_samples(t0) + [
            Sample(t0 + 0.5, "gpu", "gpu_power", 300.0, {"gpu": "0"}),
            Sample(t0 + 0.5, "gpu", "gpu_power", 500.0, {"gpu": "1"}),
            Sample(t0 + 0.5, "host", "process_cpu", 1.5, {"role": "server"}),
        ]

    from tests.support.runs import write_run

    write_run(tmp_path / "run", content)
    panels = {p.title: p for p in build_report_data(load_run(tmp_path / "run")).timeseries.panels}
    running = panels["Server: requests running and waiting"].series
    assert [s.name for s in running] == ["running", "waiting"]
    assert panels["GPU power"].series[0].values[0] == 400.0  # mean over GPUs
    assert [s.name for s in panels["CPU"].series] == ["server process"]
    assert panels["Collective share of engine step time"].present


def test_a_long_run_gets_wider_intervals():
    hours = 5
    run = run_of(
        [req(0, T, [T + 1]), req(1, T + hours * 3600, [T + hours * 3600 + 1])], [closed(1, end=T + hours * 3600 + 2)]
    )
    run.meta.started_at, run.meta.ended_at = T, T + hours * 3600 + 2
    ts = build_report_data(run).timeseries
    assert ts.interval == math.ceil((hours * 3600 + 2) / MAX_INTERVALS) == 10 and len(ts.t) <= MAX_INTERVALS + 1


def test_analysis_json_is_read_when_present_and_explained_when_unreadable(tmp_path):
    fill_run(tmp_path / "run")
    assert build_report_data(load_run(tmp_path / "run")).analysis is None
    written = write_analysis(tmp_path / "run", ["x"])
    assert build_report_data(load_run(tmp_path / "run")).analysis == Analysis.from_dict(written)
    (tmp_path / "run" / "analysis.json").write_text('{"overall": ')
    data = build_report_data(load_run(tmp_path / "run"))
    assert data.analysis is None and data.analysis_problem.startswith("analysis.json is unreadable (JSONDecodeError")
    (tmp_path / "run" / "analysis.json").write_text(json.dumps([1, 2]))
    assert (
        build_report_data(load_run(tmp_path / "run")).analysis_problem
        == "analysis.json holds a JSON array, not an object"
    )


def test_a_damaged_part_is_named_among_the_warnings_and_the_rest_is_reported(tmp_path):
    fill_run(tmp_path / "run")
    (tmp_path / "run" / "requests" / "part-999999.parquet").write_bytes(b"not parquet")
    data = build_report_data(load_run(tmp_path / "run"))
    assert any(w.startswith("skipped unreadable part part-999999.parquet") for w in data.warnings)
    assert data.summary.overall.sent == 3 and data.cdfs


def test_the_load_curve_runs_by_load_when_a_sweep_bisected_back(tmp_path):
    from loadlab.analyze.summary import summarize
    from loadlab.report.html.charts import load_curve
    from loadlab.store.reader import load_run
    from tests.support.runs import write_drawn_run

    write_drawn_run(tmp_path, seed=3, targets=(1, 2, 4, 3), n=20)
    figure = load_curve(summarize(load_run(tmp_path)).steps, [])
    assert list(figure.data[0].x) == [1, 2, 3, 4]
    assert list(figure.data[0].text) == ["concurrency=1", "concurrency=2", "concurrency=3", "concurrency=4"]
