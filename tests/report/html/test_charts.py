"""The figures: the load curve's axis follows the steps' load model, the time series stacks only
the panels with data and marks every step's start across all of them."""

from __future__ import annotations

from loadlab.report.html import charts
from loadlab.report.html.data import build_report_data
from tests.support.records import T, closed, opened, req
from tests.support.runs import run_of


def sweep(steps) -> object:
    records = [
        req(10 * s.index + k, s.start_time + k, [s.start_time + k + 0.2, s.start_time + k + 0.3], step=s.index)
        for s in steps
        for k in range(3)
    ]
    return build_report_data(run_of(records, steps))


def test_the_load_curve_is_drawn_against_concurrency_or_rate_with_a_log_axis_for_wide_sweeps():
    closed_steps = [closed(c, start=T + 10 * i, end=T + 10 * i + 10, index=i) for i, c in enumerate((1, 4, 16))]
    data = sweep(closed_steps)
    fig = charts.load_curve(data.summary.steps, data.extras)
    assert list(fig.data[0].x) == [1.0, 4.0, 16.0]
    assert fig.layout.xaxis2.title.text == "concurrency (users)" and fig.layout.xaxis.type == "log"

    open_steps = [opened(r, start=T + 10 * i, end=T + 10 * i + 10, index=i) for i, r in enumerate((2, 3))]
    data = sweep(open_steps)
    fig = charts.load_curve(data.summary.steps, data.extras)
    assert fig.layout.xaxis2.title.text == "request rate (req/s)" and fig.layout.xaxis.type != "log"


def test_mixed_load_models_are_drawn_against_the_step_labels():
    steps = [closed(2, start=T, end=T + 10, index=0), opened(5, start=T + 10, end=T + 20, index=1)]
    data = sweep(steps)
    fig = charts.load_curve(data.summary.steps, data.extras)
    assert list(fig.data[0].x) == ["concurrency=2", "rate=5"] and fig.layout.xaxis2.title.text == "step"


def test_the_time_series_holds_only_panels_with_data_and_marks_each_step_start():
    steps = [closed(c, start=T + 10 * i, end=T + 10 * i + 10, index=i) for i, c in enumerate((1, 4, 16))]
    data = sweep(steps)
    fig = charts.time_series(data.timeseries)
    present = [p for p in data.timeseries.panels if p.present]
    assert [a.text for a in fig.layout.annotations][: len(present)] == [p.title for p in present]
    assert len(present) == 3  # client panels only: no server, GPU or host samples
    assert [s.x0 for s in fig.layout.shapes] == [0.0, 10.0, 20.0]
    step_labels = [a.text for a in fig.layout.annotations][len(present) :]
    assert step_labels == ["concurrency=1", "concurrency=4", "concurrency=16"]
