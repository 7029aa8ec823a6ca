"""`loadlab report`: a run folder as one self-contained, offline, interactive HTML file.

data.py aggregates the run into small dataclasses, charts.py makes plotly figures of them,
page.py lays out the sections and the page.
"""

from __future__ import annotations

from pathlib import Path

from loadlab.report.html.data import build_report_data
from loadlab.report.html.page import render_page, run_sections, write_page
from loadlab.store.reader import RunData

DEFAULT_FOLDER = Path("reports")  # where a report goes when no file is named


def write_report(run: RunData, out: Path) -> Path:
    """Write the report of a loaded run to `out` (folders created); UserError when it cannot be written."""
    data = build_report_data(run)
    page = render_page(f"loadlab report: {data.name}", run_sections(data))
    return write_page(page, out)
