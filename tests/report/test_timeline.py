"""timeline_table: the timeline's rows in the terminal, formatted per column."""

from __future__ import annotations

import io
import math

from rich.console import Console

from loadlab.analyze.timeline import COLUMNS, Timeline, TimelineRow
from loadlab.numbers import DASH
from loadlab.report.timeline import timeline_table


def render(timeline: Timeline, interval: float) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(timeline_table(timeline, "run: every 1 s", interval))
    return out.getvalue()


def row(t: float, **values: float) -> TimelineRow:
    return TimelineRow(**{**{c: math.nan for c in COLUMNS}, "t": t, **values})


def test_columns_are_formatted_and_missing_values_are_dashes():
    rows = [row(0, started=3, ttft_p50=0.0514, kv_usage=0.042), row(0.5, started=2, kv_usage=0.5)]
    text = render(Timeline(0.0, 0.5, rows, ["t", "started", "ttft_p50", "kv_usage"]), 0.5)
    header = next(line for line in text.splitlines() if "TTFT ms" in line)
    assert "KV" in header and "GPU" not in header  # only the columns with data
    cells = [[cell.strip() for cell in line.strip("│").split("│")] for line in text.splitlines()]
    assert ["0.00", "3", "51.4", "4.2 %"] in cells  # ms and shares as the one formatter writes them
    assert ["0.50", "2", DASH, "50 %"] in cells  # t with two decimals for a 0.5 s interval
