"""`loadlab report RUN`: a real run against `loadlab mock` becomes one HTML file that headless
Chromium opens offline without errors, every chart drawn, the run's text inert; bad input is a
report or a one-line error.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from loadlab.store.reader import load_run
from tests.support.analysis import write_analysis
from tests.support.browser import load_page
from tests.support.procs import BIN, Proc, free_port, loadlab
from tests.support.runs import fill_run, write_run

# Markup that would run if any of it reached the page unescaped: it sets window.pwned.
PAYLOAD = '</script><script>window.pwned=1</script><img src=x onerror="window.pwned=2">"onerror=window.pwned=3 x'
SECRET = "sk-secret-key-4711"
# Characters that steer a terminal (ESC retitles it, BEL rings, U+202E reverses what follows), and
# how the terminal and the page both show them: written out.
CONTROL = "\x1b]0;pwned\x07\u202eevil"
CONTROL_SHOWN = "\\x1b]0;pwned\\x07\\u202eevil"
# Per chart: its traces, and how many of them drew a path with a shape (a line, a bar).
CHARTS_JS = """Array.from(document.querySelectorAll('.js-plotly-plot')).map(d => ({
  id: d.id, traces: d.data.length,
  drawn: Array.from(d.querySelectorAll('g.trace')).filter(g => Array.from(g.querySelectorAll('path'))
           .some(p => (p.getAttribute('d') || '').length > 5)).length}))"""
INERT_JS = """({pwned: window.pwned === undefined ? null : window.pwned,
  scripts: document.querySelectorAll('script').length, images: document.images.length,
  charts: document.querySelectorAll('.js-plotly-plot').length, text: document.body.innerText})"""


def mock_run(tmp_path: Path, model: str, run_model: str, *extra: str) -> tuple[Path, int]:
    """A run of `loadlab run` against a mock serving `model`; returns the folder and the exit code."""
    port, out = free_port(), tmp_path / "run"
    url = f"http://127.0.0.1:{port}"
    with Proc(
        [
            str(BIN / "loadlab"),
            "mock",
            "--port",
            str(port),
            "--model",
            model,
            "--api-key",
            SECRET,
            "--ttft",
            "0.03",
            "--itl",
            "0.01",
            "--error-rate",
            "0.1",
        ],
        ready_url=url + "/health",
    ):
        result = loadlab(
            "run",
            "--url",
            url,
            "--model",
            run_model,
            "--api-key",
            SECRET,
            "--concurrency",
            "1,4",
            "--step-duration",
            "2",
            "--output-len",
            "16",
            "--max-error-rate",
            "off",
            "--out",
            str(out),
            *extra,
            timeout=120,
        )
    assert out.joinpath("run.json").exists(), result.stderr
    return out, result.returncode


def report(run: Path, out: Path) -> Path:
    result = loadlab("report", str(run), "-o", str(out), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    return out


def test_report_opens_offline_in_chromium_with_every_chart_drawn_and_the_run_text_inert(tmp_path):
    run, code = mock_run(tmp_path, PAYLOAD, PAYLOAD)
    assert code == 0
    write_analysis(run, [s.label for s in load_run(run).meta.steps], PAYLOAD)
    page = report(run, tmp_path / "report.html")

    shot = tmp_path / "report.png"
    loaded = load_page(page.as_uri(), f"({{charts: {CHARTS_JS}, inert: {INERT_JS}}})", screenshot=shot)
    assert loaded.errors == [] and loaded.requests == []
    charts, inert = loaded.value["charts"], loaded.value["inert"]
    assert {c["id"] for c in charts} == {"fig-load-curve", "fig-cdfs", "fig-timeline", "fig-errors"}
    for chart in charts:
        assert chart["traces"] > 0 and chart["drawn"] == chart["traces"], chart
    assert shot.stat().st_size > 10_000  # kept with the test's output

    assert inert["pwned"] is None and inert["images"] == 0
    assert inert["scripts"] == inert["charts"] + 1  # plotly.js once, then one per chart: nothing injected
    assert inert["text"].count(PAYLOAD) >= 5  # the model, headlines, evidence, advice, notes: as text
    assert SECRET not in page.read_text()
    assert not [p for p in run.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_server_error_text_arrives_inert(tmp_path):
    # A model the mock does not serve: every request gets 404 "The model `PAYLOAD` does not exist."
    run, code = mock_run(tmp_path, "mock", PAYLOAD + CONTROL)
    assert code == 4
    page = report(run, tmp_path / "report.html")
    loaded = load_page(page.as_uri(), INERT_JS)
    assert loaded.errors == [] and loaded.requests == []
    assert loaded.value["pwned"] is None and loaded.value["images"] == 0
    text = loaded.value["text"]
    assert f"The model `{PAYLOAD}{CONTROL_SHOWN}` does not exist." in text  # the error examples' cell
    assert text.count(PAYLOAD + CONTROL_SHOWN) >= 2  # and the model's
    assert not any(raw in page.read_text() for raw in ("\x1b", "\x07", "\u202e"))
    assert (run / "analysis.json").exists()  # `loadlab run` analyzed it: its text went through the page too


def cut_off(folder: Path) -> Path:
    """Make a finished run folder look killed mid-run: run.json still 'running', no ends, no summary."""
    meta = json.loads((folder / "run.json").read_text())
    meta.update(status="running", ended_at=None, coverage=[])
    meta["host"]["pid"] = 0  # its writer is gone (the test's own process wrote it)
    for step in meta["steps"]:
        step["end_time"] = None
    (folder / "run.json").write_text(json.dumps(meta))
    (folder / "summary.json").unlink(missing_ok=True)
    return folder


@pytest.mark.parametrize("kind", ["empty", "no server or GPU signals", "cut off"])
def test_a_thin_run_still_gets_a_whole_report_that_says_what_is_missing(tmp_path, kind):
    folder = tmp_path / "run"
    if kind == "empty":
        write_run(folder, lambda t0: ([], []))
    else:
        fill_run(folder, with_server=False)
    if kind == "cut off":
        cut_off(folder)
    page = report(folder, tmp_path / "report.html")
    loaded = load_page(page.as_uri(), INERT_JS.replace("({", "({charts_drawn: " + CHARTS_JS + ", "))
    assert loaded.errors == [] and loaded.requests == []
    text = loaded.value["text"]
    for section in (
        "Verdict",
        "Per-step summary",
        "Load curve",
        "Latency distributions",
        "Time series",
        "Errors",
        "Collectors' coverage",
        "Configuration, versions, host",
    ):
        assert section in text
    # Which flag adds each missing signal.
    for flag in ("--server-metrics", "--prometheus", "--no-gpu", "--server-pid", "--nccl-inspector-dir"):
        assert flag in text
    assert "No analysis yet: run loadlab analyze" in text
    charts = loaded.value["charts_drawn"]
    if kind == "empty":
        assert charts == [] and "No successful request: no latency to draw." in text
    else:
        assert {c["id"] for c in charts} == {"fig-load-curve", "fig-cdfs", "fig-timeline", "fig-errors"}
        assert all(c["drawn"] == c["traces"] > 0 for c in charts)
    if kind == "cut off":
        assert "cut off" in text


def test_a_corrupt_or_missing_folder_is_a_one_line_error(tmp_path):
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "run.json").write_text("{not json")
    for folder in (tmp_path / "corrupt", tmp_path / "missing"):
        result = loadlab("report", str(folder), "-o", str(tmp_path / "r.html"))
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr.startswith("error: not a run folder") and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_an_unwritable_output_is_a_one_line_error(tmp_path):
    fill_run(tmp_path / "run")
    (tmp_path / "file").write_text("")
    result = loadlab("report", str(tmp_path / "run"), "-o", str(tmp_path / "file" / "r.html"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: cannot write the report to") and len(result.stderr.splitlines()) == 1


def test_the_default_output_is_reports_run_name_html(tmp_path):
    fill_run(tmp_path / "my-run")
    result = subprocess.run(
        [str(BIN / "loadlab"), "report", str(tmp_path / "my-run")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "reports/my-run.html"
    assert (tmp_path / "reports" / "my-run.html").stat().st_size > 1_000_000  # plotly.js inside
