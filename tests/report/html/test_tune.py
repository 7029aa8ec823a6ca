"""tune.html: the Pareto chart (one curve per configuration, a star on its knee), the table of
configurations, and the verifications; text from the command and the runs arrives inert."""

from __future__ import annotations

import math
from pathlib import Path

from loadlab.analyze.verify import Figures, Measured, Point
from loadlab.report.html.tune import pareto_chart, write_tune_report


def measured(name: str, scale: float) -> Measured:
    points = tuple(Point(f"concurrency={c}", c, 30 * c * scale, 30 * scale) for c in (1, 2, 4))
    figures = Figures(
        "concurrency=2", 2, "concurrency=4", points[-1].output_tps, math.nan, "scheduling", "", "", "h", points
    )
    return Measured(name, {"max-num-seqs": name}, f"out/{name}/run", "measured", figures=figures)


def test_one_curve_per_configuration_with_its_knee() -> None:
    fig = pareto_chart([measured("2", 1.0), measured("8", 2.0), Measured("x", {}, "out/x/run", "failed", "why")])
    curves = [t for t in fig.data if t.mode == "lines+markers"]
    assert [c.name for c in curves] == ["2", "8"]
    assert list(curves[1].x) == [60, 120, 240] and list(curves[1].y) == [60, 60, 60]
    stars = [t for t in fig.data if t.mode == "markers"]
    assert [(s.x[0], s.y[0]) for s in stars] == [(60, 30), (120, 60)]  # each at its knee, concurrency=2


def test_the_page_has_the_table_and_escapes_the_command(tmp_path: Path) -> None:
    failed = Measured("<b>x</b>", {}, "out/x/run", "failed", "the server did not start")
    page = write_tune_report([measured("2", 1.0), failed], [], "srv --port {port} <script>", tmp_path / "t.html")
    text = page.read_text()
    assert "fig-pareto" in text and "the server did not start" in text
    assert "&lt;script&gt;" in text and "<b>x</b>" not in text
