"""The per-second timeline of a run folder written by RunWriter."""

from __future__ import annotations

import math

import pytest

from loadlab.analyze.timeline import build_timeline
from loadlab.store.reader import load_run
from loadlab.store.schema import RequestRecord, Sample
from tests.support.runs import fill_run, request, three_requests, write_run


def column(timeline, name: str) -> list[float]:
    return [getattr(r, name) for r in timeline.rows]


def test_client_columns_per_second(tmp_path):
    fill_run(tmp_path / "run")
    tl = build_timeline(load_run(tmp_path / "run"))
    assert tl.interval == 1.0
    assert len(tl.rows) >= 3
    assert column(tl, "t")[:3] == [0.0, 1.0, 2.0]
    assert column(tl, "started")[:3] == [2, 1, 0]
    assert column(tl, "completed")[:3] == [0, 1, 1]
    assert column(tl, "failed")[:3] == [0, 0, 1]
    # Second 0: r1's 4 events x 2 tokens each + r2's first event = 9; second 1: r2's 1.1, 1.6.
    assert column(tl, "output_tokens_per_s")[:3] == [9, 2, 1]
    # TTFT from send (closed loop): r1 0.2, r2 0.4 -> median 0.3, both in second 0.
    assert column(tl, "ttft_p50")[0] == pytest.approx(0.3)
    assert math.isnan(column(tl, "ttft_p50")[1])
    # Gaps ending in second 0: r1's 0.2, 0.2, 0.2 -> 0.2; second 1: r2's 0.5, 0.5.
    assert column(tl, "itl_p50")[:2] == pytest.approx([0.2, 0.5])
    # Open requests, time-averaged: second 0: r1 0.9 s + r2 0.8 s; second 1: r1 0.2 + r2 1 + r3 0.5.
    assert column(tl, "in_flight")[:3] == pytest.approx([1.7, 1.7, 0.6])


def test_server_gpu_and_collective_columns(tmp_path):
    fill_run(tmp_path / "run")
    tl = build_timeline(load_run(tmp_path / "run"))
    assert column(tl, "requests_running")[:2] == pytest.approx([3.0, 1.0])  # (2 + 4) / 2, then 1
    assert column(tl, "kv_usage")[0] == pytest.approx(0.3)
    assert column(tl, "requests_waiting")[0] == 0
    pre = column(tl, "preemptions")
    assert pre[0] == 0 and pre[1] == 2 and pre[2] == 1
    assert column(tl, "gpu_util")[0] == pytest.approx(0.75)
    assert column(tl, "gpu_sm_active")[0] == pytest.approx(0.4)
    assert column(tl, "collective_share")[1] == pytest.approx(0.25)
    assert math.isnan(column(tl, "collective_share")[0])
    assert "gpu_dram_active" not in tl.columns  # no data: no column
    assert {"requests_running", "kv_usage", "preemptions", "gpu_util", "collective_share"} <= set(tl.columns)


def test_columns_without_data_are_left_out(tmp_path):
    fill_run(tmp_path / "run", with_server=False)
    tl = build_timeline(load_run(tmp_path / "run"))
    assert tl.columns == [
        "t",
        "started",
        "completed",
        "failed",
        "output_tokens_per_s",
        "ttft_p50",
        "itl_p50",
        "in_flight",
    ]


def test_open_loop_ttft_counts_from_the_scheduled_time(tmp_path):
    late = lambda t0: [request("r", t0, send=0.5, scheduled=0.1, tokens=[0.7, 0.8], end=0.8)]  # noqa: E731
    write_run(tmp_path / "run", lambda t0: (late(t0), []), mode="open")
    tl = build_timeline(load_run(tmp_path / "run"))
    assert column(tl, "ttft_p50")[0] == pytest.approx(0.6)


def test_a_wider_interval_aggregates(tmp_path):
    fill_run(tmp_path / "run")
    tl = build_timeline(load_run(tmp_path / "run"), interval=2.0)
    assert column(tl, "started")[:2] == [3, 0]
    assert column(tl, "output_tokens_per_s")[0] == pytest.approx(11 / 2)


def test_an_empty_run_has_one_row_and_only_time(tmp_path):
    write_run(tmp_path / "run", lambda t0: ([], []))
    tl = build_timeline(load_run(tmp_path / "run"))
    assert len(tl.rows) == 1 and tl.columns == ["t"]


def test_collective_share_from_nccl_inspector_when_the_engine_has_no_histogram(tmp_path):
    def content(t0: float) -> tuple[list[RequestRecord], list[Sample]]:
        def s(t: float, signal: str, value: float, source: str, **labels: str) -> Sample:
            return Sample(t0 + t, source, signal, value, labels)

        return [], [
            s(0.2, "step_time_sum", 2.0, "server"),
            s(1.2, "step_time_sum", 3.0, "server"),
            # Second 1: rank 0 spends 0.2 + 0.1 s in collectives, rank 1 0.5 s: mean 0.4 of 1.0 s stepping.
            s(1.4, "collective_seconds", 0.2, "nccl", rank="0"),
            s(1.9, "collective_seconds", 0.1, "nccl", rank="0"),
            s(1.4, "collective_seconds", 0.5, "nccl", rank="1"),
        ]

    write_run(tmp_path / "run", content)
    tl = build_timeline(load_run(tmp_path / "run"))
    assert column(tl, "collective_share")[1] == pytest.approx(0.4)
    assert "collective_share" in tl.columns


def test_requests_cut_off_by_the_stop_are_not_failures(tmp_path):
    def content(t0: float) -> tuple[list[RequestRecord], list[Sample]]:
        return three_requests(t0) + [request("r4", t0, 1.0, [1.3], 2.6, error="aborted")], []

    write_run(tmp_path / "run", content)
    tl = build_timeline(load_run(tmp_path / "run"))
    assert column(tl, "failed")[:3] == [0, 0, 1]  # r3's timeout only
    assert column(tl, "completed")[:3] == [0, 1, 1]


def test_gpu_signals_scraped_with_the_servers_metrics_count_as_gpu_signals(tmp_path):
    """A `loadlab gpu-exporter` or the GPU twin publishes gpu_* signals on a /metrics page the
    server-metrics collector scrapes (source "server"): the timeline shows them like NVML's."""

    def content(t0: float):
        return three_requests(t0), [Sample(t0 + 0.5, "server", "gpu_util", 0.6, {"gpu": "0"})]

    write_run(tmp_path / "run", content)
    assert column(build_timeline(load_run(tmp_path / "run")), "gpu_util")[0] == pytest.approx(0.6)
