"""Plotly figures built from the report's aggregated data (loadlab/report/html/data.py).

Every text that came from the run (step labels, signal names) goes through `label()`: plotly
renders a few HTML-like tags inside chart text, so `<` must arrive as an entity, not a tag.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from loadlab.analyze.summary import StepSummary
from loadlab.report.html.data import QUANTILES, Cdf, ErrorKind, StepExtra, TimeSeries
from loadlab.terminal import inert

# A small template of our own: plotly's default one adds ~10 kB of JSON to every figure.
TEMPLATE = go.layout.Template(
    layout=dict(
        font=dict(family="system-ui, sans-serif", size=12),
        paper_bgcolor="white",
        plot_bgcolor="#fafafa",
        colorway=["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"],
        xaxis=dict(gridcolor="#e5e5e5", zeroline=False),
        yaxis=dict(gridcolor="#e5e5e5", zeroline=False),
        hovermode="x unified",
        margin=dict(l=60, r=30, t=40, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
)
ERROR_COLORS = {"aborted": "#aaaaaa", "timeout": "#ff7f0e", "http_429": "#bcbd22", "http_5xx": "#d62728"}
METRIC_TITLES = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E"}
PANEL_HEIGHT = 170


def label(text: object) -> str:
    """Run-supplied text made safe for plotly's text rendering: control characters written out
    (`inert`, as in the terminal), then markup escaped."""
    return html.escape(inert(str(text)), quote=False)


def step_colors(count: int) -> list[str]:
    """One colour per step, from light load (blue) to heavy load (yellow-orange)."""
    if count <= 1:
        return ["#1f77b4"]
    return sample_colorscale("Plasma", [0.85 * i / (count - 1) for i in range(count)])


def load_curve(steps: list[StepSummary], extras: list[StepExtra]) -> go.Figure:
    """Throughput and per-user speed (top) and TTFT/ITL p99 (bottom) against each step's load."""
    # By load, not run order: a sweep's bisected step (4, then 3) would draw the line backwards.
    steps = sorted(steps, key=lambda s: (s.target if math.isfinite(s.target) else math.inf, s.index))
    x, title = _load_axis(steps)
    p10 = {e.index: e.user_tokens_per_s_p10 for e in extras}
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, specs=[[{"secondary_y": True}], [{}]])
    hover = [label(s.label) for s in steps]
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[s.output_tokens_per_s for s in steps],
            name="output tok/s (all users)",
            mode="lines+markers",
            text=hover,
            line=dict(width=3),
        ),
        row=1,
        col=1,
    )
    for name, values, dash in (
        ("per-user tok/s p50", [s.user_tokens_per_s.p50 for s in steps], "solid"),
        ("per-user tok/s p10 (slowest users)", [p10.get(s.index, math.nan) for s in steps], "dot"),
    ):
        fig.add_trace(
            go.Scatter(x=x, y=values, name=name, mode="lines+markers", text=hover, line=dict(dash=dash)),
            row=1,
            col=1,
            secondary_y=True,
        )
    for name, values in (("TTFT p99", [s.ttft.p99 for s in steps]), ("ITL p99", [s.itl.p99 for s in steps])):
        fig.add_trace(
            go.Scatter(
                x=x, y=np.array(values, dtype=float) * 1000, name=name + " (ms)", mode="lines+markers", text=hover
            ),
            row=2,
            col=1,
        )
    fig.update_yaxes(title_text="output tok/s", rangemode="tozero", row=1, col=1, secondary_y=False)
    fig.update_yaxes(title_text="per-user tok/s", rangemode="tozero", row=1, col=1, secondary_y=True)
    fig.update_yaxes(title_text="p99 (ms)", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text=title, row=2, col=1)
    if _spread(x):
        fig.update_xaxes(type="log", tickvals=x)
    fig.update_layout(template=TEMPLATE, height=560, hovermode="x unified")
    return fig


def _load_axis(steps: list[StepSummary]) -> tuple[list, str]:
    """Each step's target when every step has one of one kind, else its label."""
    modes = {s.mode for s in steps}
    if len(modes) == 1 and all(math.isfinite(s.target) for s in steps):
        return [s.target for s in steps], ("concurrency (users)" if modes == {"closed"} else "request rate (req/s)")
    return [label(s.label) for s in steps], "step"


def _spread(x: list) -> bool:
    numbers = [v for v in x if isinstance(v, float) and v > 0]
    return len(numbers) == len(x) and len(x) > 2 and max(numbers) / min(numbers) >= 8


def latency_cdfs(cdfs: list[Cdf], steps: list[StepSummary]) -> go.Figure:
    """TTFT, ITL and E2E CDFs side by side, one line per step; a step's lines toggle together."""
    metrics = [m for m in METRIC_TITLES if any(c.metric == m for c in cdfs)]
    fig = make_subplots(
        rows=1,
        cols=len(metrics),
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=[f"{METRIC_TITLES[m]} (ms)" for m in metrics],
    )
    colors = dict(zip([s.index for s in steps], step_colors(len(steps)), strict=False))
    names = {s.index: label(s.label) for s in steps}
    shown: set[int] = set()
    for cdf in cdfs:
        col = metrics.index(cdf.metric) + 1
        fig.add_trace(
            go.Scatter(
                x=cdf.values * 1000,
                y=QUANTILES * 100,
                mode="lines",
                name=names.get(cdf.step, str(cdf.step)),
                legendgroup=str(cdf.step),
                showlegend=cdf.step not in shown,
                line=dict(color=colors.get(cdf.step), shape="hv"),
                hovertemplate=f"{names.get(cdf.step, '')}: p%{{y:.2f}} = %{{x:.1f}} ms (n={cdf.count})<extra></extra>",
            ),
            row=1,
            col=col,
        )
        shown.add(cdf.step)
    fig.update_yaxes(title_text="percentile", range=[0, 100.5], row=1, col=1)
    fig.update_layout(template=TEMPLATE, height=420, hovermode="closest", margin=dict(t=90), legend=dict(y=1.12))
    return fig


def time_series(ts: TimeSeries) -> go.Figure:
    """Every present panel stacked on one shared time axis, with step starts marked across all."""
    panels = [p for p in ts.panels if p.present]
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.25 / len(panels),
        subplot_titles=[label(p.title) for p in panels],
    )
    for row, panel in enumerate(panels, start=1):
        scale = 100.0 if panel.unit == "%" else 1.0
        for series in panel.series:
            fig.add_trace(
                go.Scatter(
                    x=ts.t,
                    y=series.values * scale,
                    name=label(series.name),
                    mode="lines",
                    legendgroup=str(row),
                    showlegend=True,
                    line=dict(width=1.5, shape="hv"),
                    hovertemplate=f"%{{y:.3g}} {panel.unit}<extra>{label(series.name)}</extra>",
                ),
                row=row,
                col=1,
            )
        fig.update_yaxes(title_text=label(panel.unit), rangemode="tozero", row=row, col=1)
    _mark_steps(fig, ts, with_labels=True)
    fig.update_xaxes(
        title_text=f"seconds since the run's start (intervals of {ts.interval:g} s)", row=len(panels), col=1
    )
    fig.update_layout(
        template=TEMPLATE,
        height=PANEL_HEIGHT * len(panels) + 120,
        legend=dict(orientation="v", x=1.01, y=1, yanchor="top"),
        margin=dict(r=220),
    )
    return fig


def _mark_steps(fig: go.Figure, ts: TimeSeries, with_labels: bool) -> None:
    """A dotted line at each step's start across the whole figure (shared x axis), labelled on top.

    Set as one layout list: fig.add_vline per step re-validates every shape and takes seconds.
    """
    line = dict(color="#555", width=1, dash="dot")
    fig.update_layout(
        shapes=[dict(type="line", xref="x", yref="paper", x0=m.t, x1=m.t, y0=0, y1=1, line=line) for m in ts.marks]
    )
    if with_labels:
        fig.update_layout(
            annotations=list(fig.layout.annotations)
            + [
                dict(
                    x=m.t,
                    y=1,
                    xref="x",
                    yref="paper",
                    xanchor="left",
                    yanchor="bottom",
                    showarrow=False,
                    text=label(m.label),
                    font=dict(size=10, color="#555"),
                )
                for m in ts.marks
            ]
        )


def errors_over_time(errors: list[ErrorKind], ts: TimeSeries) -> go.Figure:
    """Failed requests per interval, stacked by category (aborted: cut off by the stop, in grey)."""
    fig = go.Figure()
    for kind in errors:
        fig.add_trace(
            go.Bar(
                x=ts.t,
                y=kind.per_interval,
                name=f"{label(kind.category)} ({kind.total})",
                marker_color=ERROR_COLORS.get(kind.category),
            )
        )
    _mark_steps(fig, ts, with_labels=False)
    fig.update_layout(
        template=TEMPLATE,
        barmode="stack",
        height=300,
        bargap=0,
        xaxis_title="seconds since the run's start",
        yaxis_title="requests per interval",
    )
    return fig
