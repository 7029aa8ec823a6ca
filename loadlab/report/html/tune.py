"""The page of `loadlab tune` (tune.html in the tune folder): the Pareto chart of its
configurations (per-user against total output tokens/s, one curve each, a star on the knee),
the table of knee, peak, goodput and verdict per configuration, and any verification.

One self-contained file, as `loadlab report`'s (page.py's layout, style and escaping).
"""

from __future__ import annotations

import math
from pathlib import Path

import plotly.graph_objects as go
from plotly.colors import qualitative

from loadlab.analyze.verify import Measured, Verification
from loadlab.numbers import format_number
from loadlab.report.html.charts import TEMPLATE, label
from loadlab.report.html.page import PLOTLY_CONFIG, Section, esc, html_note, html_table, render_page, write_page


def write_tune_report(results: list[Measured], verifications: list[Verification], serve: str, out: Path) -> Path:
    """Write the page to `out` (folders created); UserError when it cannot be written."""
    sections = [
        Section("pareto", "Per-user against total tokens/s", _pareto(results)),
        Section("configurations", "Configurations", _table(results, serve)),
    ]
    if verifications:
        sections.append(Section("verify", "The verdict put to the test", _verifications(verifications)))
    return write_page(render_page("loadlab tune", sections), out)


def pareto_chart(results: list[Measured]) -> go.Figure:
    """Per-user tokens/s (p50) against total output tokens/s, one curve per configuration in load
    order (labelled by the step), a star on its knee: up and right is better."""
    fig = go.Figure()
    colors = qualitative.Dark24
    for i, r in enumerate(x for x in results if x.figures and x.figures.points):
        assert r.figures is not None
        points = r.figures.points
        color = colors[i % len(colors)]
        fig.add_trace(
            go.Scatter(
                x=[p.output_tps for p in points],
                y=[p.user_tps for p in points],
                text=[label(p.label) for p in points],
                name=label(r.name),
                legendgroup=label(r.name),
                mode="lines+markers",
                line=dict(color=color),
                hovertemplate="%{text}: %{x:.1f} tok/s total, %{y:.1f} per user",
            )
        )
        knee = [p for p in points if p.label == r.figures.knee]
        if knee:
            fig.add_trace(
                go.Scatter(
                    x=[knee[0].output_tps],
                    y=[knee[0].user_tps],
                    name=f"knee of {label(r.name)}",
                    legendgroup=label(r.name),
                    showlegend=False,
                    mode="markers",
                    marker=dict(symbol="star", size=14, color=color),
                )
            )
    fig.update_xaxes(title_text="total output tokens/s", rangemode="tozero")
    fig.update_yaxes(title_text="tokens/s per user (p50)", rangemode="tozero")
    fig.update_layout(template=TEMPLATE, height=480, hovermode="closest")
    return fig


def _pareto(results: list[Measured]) -> str:
    if not any(r.figures and r.figures.points for r in results):
        return html_note("No configuration has a measured step: nothing to draw.")
    note = (
        "Each configuration's sweep, one point per step (load rising along the curve); a star marks its knee. "
        "A configuration whose curve lies up and to the right of another's serves more tokens in all and to each user."
    )
    return html_note(note) + pareto_chart(results).to_html(
        full_html=False, include_plotlyjs=False, config=PLOTLY_CONFIG, div_id="fig-pareto"
    )


def _table(results: list[Measured], serve: str) -> str:
    rows = []
    for r in results:
        f = r.figures
        rows.append(
            [
                esc(r.name),
                esc(r.status),
                esc(f.knee_text()) if f else "–",
                esc(f.saturation_text()) if f else "–",
                format_number(f.peak_tps) if f else "–",
                format_number(f.goodput) if f and math.isfinite(f.goodput) else "–",
                esc(f"{f.constraint}: {f.headline}" if f else r.why),
                f"<code>{esc(r.folder)}</code>",
            ]
        )
    headers = [
        "configuration",
        "status",
        "knee (users)",
        "saturates at (users)",
        "peak tok/s",
        "goodput req/s",
        "verdict",
        "run folder",
    ]
    note = (
        f"Started with: {serve} (each configuration's flags set in it). loadlab report FOLDER gives a "
        "configuration's full report; loadlab compare A B sets two side by side."
    )
    return html_table(headers, rows, "numbers") + html_note(note)


def _verifications(verifications: list[Verification]) -> str:
    rows = [
        [esc(v.outcome), esc(v.constraint), esc(f"{v.flag} {v.before_value} -> {v.after_value}"), esc(v.reason)]
        for v in verifications
    ]
    return html_table(["outcome", "class tested", "knob turned", "what moved"], rows)
