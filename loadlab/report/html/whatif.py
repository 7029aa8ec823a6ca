"""The page of `loadlab plan --what-if`: the answer table, the specs' simulated curves side by side
on shared axes, and each spec's verdict and run folder (whose full report `loadlab report` writes).

One self-contained file, as `loadlab report`'s (page.py's layout, style and escaping).
"""

from __future__ import annotations

import math
from pathlib import Path

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from loadlab.analyze.whatif import WhatIf
from loadlab.metrics.slo import SloSpec
from loadlab.numbers import format_number
from loadlab.report.html.charts import TEMPLATE, label
from loadlab.report.html.page import PLOTLY_CONFIG, Section, esc, html_note, html_table, render_page, write_page

SIMULATED = (
    "Simulated in virtual time on each GPU twin (loadlab simulate, docs/simulate.md): the engine's "
    "scheduling, KV cache, preemption and prefix cache, and the twin's step times (docs/twin.md). Not "
    "in the numbers: the client's network and HTTP time, the server's HTTP handling and tokenization."
)


def whatif_page(answers: list[WhatIf], users: int, slo: SloSpec | None) -> str:
    """The whole HTML page for the specs' answers."""
    sections = [
        Section("answer", "Answer", _answer(answers, users, slo)),
        Section("curves", "Curves", _curves(answers, slo)),
        Section("verdicts", "Verdicts and run folders", _verdicts(answers)),
    ]
    return render_page(f"loadlab plan --what-if: {users:,} users", sections)


def write_whatif_report(answers: list[WhatIf], users: int, slo: SloSpec | None, out: Path) -> Path:
    """Write the page to `out` (folders created); UserError when it cannot be written."""
    page = whatif_page(answers, users, slo)
    return write_page(page, out)


def _answer(answers: list[WhatIf], users: int, slo: SloSpec | None) -> str:
    headers = [
        "spec",
        "knee (users)",
        "users per replica",
        "replicas",
        "GPUs",
        "per-user tok/s",
        "capacity set by",
        "constraint at the knee",
    ]
    rows = []
    for a in answers:
        p = a.plan
        rows.append(
            [
                esc(a.spec),
                "none seen" if a.knee is None else format_number(a.knee, group=True),
                format_number(a.users_per_replica, group=True),
                "none" if p.replicas is None else f"{p.replicas:,}",
                "–" if a.gpus is None else f"{a.gpus:,}",
                format_number(p.user_tps.value) if p.replicas else "–",
                esc(a.binds),
                esc(a.constraint),
            ]
        )
    think = f"{answers[0].plan.think_time:g} s" if answers else "–"
    slo_text = esc(slo.text) if slo else "none (a replica's capacity is its knee)"
    head = (
        f"<p>{users:,} users, think time {think}, SLO {slo_text}. One replica serves the users per replica "
        "within the SLO; N users need the replicas shown (GPUs: replicas × tensor-parallel size), and each "
        "user then sees the per-user tokens/s (p50).</p>"
    )
    return head + html_table(headers, rows, "numbers") + html_note(SIMULATED)


def _curves(answers: list[WhatIf], slo: SloSpec | None) -> str:
    if not any(a.points for a in answers):
        return html_note("No spec has a measured step: nothing to draw.")
    note = (
        "Each spec's simulated sweep, one replica: a star marks its knee. Click a spec in the legend to hide "
        "its lines; drag to zoom."
    )
    return html_note(note) + whatif_curves(answers, slo).to_html(
        full_html=False, include_plotlyjs=False, config=PLOTLY_CONFIG, div_id="fig-whatif"
    )


def whatif_curves(answers: list[WhatIf], slo: SloSpec | None) -> go.Figure:
    """Output tok/s per replica, per-user tok/s p50 and each per-step SLO statistic (its limit
    dashed) against concurrency, one colour per spec across the panels."""
    planned = {text for a in answers for p in a.points for text in p.values}
    objectives = [o for o in (slo.objectives if slo else ()) if o.text in planned]
    panels = ["output tok/s (one replica)", "per-user tok/s p50", *(o.text for o in objectives)]
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.05, subplot_titles=panels)
    colors = qualitative.Dark24  # one colour per spec: the template's eight repeat with ten specs
    for i, a in enumerate(answers):
        x = [p.concurrency for p in a.points]
        columns = [[p.output_tps for p in a.points], [p.user_tps for p in a.points]]
        columns += [[p.values.get(o.text, math.nan) for p in a.points] for o in objectives]
        color = colors[i % len(colors)]
        for row, y in enumerate(columns, start=1):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=label(a.spec),
                    legendgroup=label(a.spec),
                    showlegend=row == 1,
                    mode="lines+markers",
                    line=dict(color=color),
                ),
                row=row,
                col=1,
            )
            if a.knee in x:
                fig.add_trace(
                    go.Scatter(
                        x=[a.knee],
                        y=[y[x.index(a.knee)]],
                        name=f"knee of {label(a.spec)}",
                        legendgroup=label(a.spec),
                        showlegend=False,
                        mode="markers",
                        marker=dict(symbol="star", size=14, color=color),
                    ),
                    row=row,
                    col=1,
                )
    for row, o in enumerate(objectives, start=3):
        fig.add_hline(y=o.limit, line=dict(dash="dash", color="#888"), row=row, col=1)
    xs = [p.concurrency for a in answers for p in a.points]
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 8:
        fig.update_xaxes(type="log", tickvals=sorted(set(xs)))
    fig.update_xaxes(title_text="concurrency (users, one replica)", row=len(panels), col=1)
    for row in range(1, len(panels) + 1):
        fig.update_yaxes(rangemode="tozero", row=row, col=1)
    fig.update_layout(template=TEMPLATE, height=260 * len(panels) + 80, hovermode="closest")
    return fig


def _verdicts(answers: list[WhatIf]) -> str:
    rows = [
        [
            esc(a.spec),
            esc(a.headline or "–"),
            esc(a.stop),
            f"<code>{esc(a.folder)}</code>",
        ]
        for a in answers
    ]
    note = "Each run folder is an ordinary one: loadlab summary, analyze, report and compare read it."
    return html_table(["spec", "the analyzer's verdict", "the sweep", "run folder"], rows) + html_note(note)
