"""`loadlab diagnose` end to end against a server whose knee is known: the GPU twin (H100 timing of
Llama-3-8B) with an admission cap. Its decode step barely grows with the batch, so throughput
grows with the users up to `--max-num-seqs` and not beyond. Every place that names the knee and
the throughput must say the same: the console, analysis.json, sweep.json, the HTML report and
`loadlab plan`."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from loadlab.analyze.saturation import MIN_SUCCEEDED
from tests.support.procs import BIN, loadlab
from tests.support.reference_server import start_server

CAP = 2  # --max-num-seqs: at most 2 sequences run at once; more users wait in the queue
TWIN = "h100:llama-3-8b"


def read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def html_table(page: str, column: str) -> dict[str, dict[str, str]]:
    """The rows (by their first cell) of the report's table that has `column`, cells by header."""
    for table in re.findall(r"<table[^>]*>(.*?)</table>", page, re.S):
        headers = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table)]
        if column in headers:
            rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table)]
            return {
                html.unescape(cells[0]): dict(zip(headers, (re.sub("<[^>]+>", "", c) for c in cells), strict=True))
                for cells in rows
                if len(cells) == len(headers)
            }
    raise AssertionError(f"no table with {column!r} in the report")


def console_table(stdout: str, header: str) -> dict[str, list[str]]:
    """The rows (by their first cell) of the last console table whose header line has `header`."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if header in line and line.startswith("┃"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        if not line.startswith("│"):  # the rule under the header
            continue
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells and cells[0]:
            rows[cells[0]] = cells
    return rows


@pytest.mark.serial  # the twin keeps its modelled pace only with the host's cores to spare
def test_every_place_names_the_same_knee_and_the_same_throughput(tmp_path):
    out, report = tmp_path / "run", tmp_path / "diagnose.html"
    with start_server(tmp_path / "server.log", "--twin", TWIN, "--max-num-seqs", str(CAP)) as server:
        result = loadlab(
            "diagnose",
            server.url,
            "--max",
            "8",
            "--step-duration",
            "5",
            "--input-len",
            "32",
            "--output-len",
            "64",
            # the busy test host may strain the client; this test is about the knee
            "--slo",
            "client_limited=any",
            "--out",
            str(out),
            "--report",
            str(report),
            timeout=600,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    analysis, sweep, summary = read(out, "analysis.json"), read(out, "sweep.json"), read(out, "summary.json")
    label_of = {s["index"]: s["label"] for s in analysis["steps"]}

    # The knee: the admission cap, named by the one rule everywhere.
    knee = analysis["overall"]["knee_step"]
    assert knee is not None and sweep["knee_step"] == knee, (analysis["overall"], sweep)
    label = label_of[knee]
    # At the cap, or at the first step above it: between a user's answer and its next request the
    # cap's slots idle for a moment (longer on a busy host, where the twin also lags behind its
    # modelled pace), which users waiting in the queue fill, so that step may still gain.
    target = next(s["target"] for s in analysis["steps"] if s["index"] == knee)
    assert CAP <= target <= 2 * CAP, result.stdout[-4000:]
    assert f"{label} (the knee)" in analysis["overall"]["headline"]
    assert f"\nknee: {label} (" in result.stdout  # the sweep's line
    # (the console wraps a long line: compare words)
    verdict = result.stdout[result.stdout.index("\nverdict: ") + 1 : result.stdout.index("\nreport: ")]
    assert verdict.split() == f"verdict: {analysis['overall']['headline']}".split()
    at_knee = [s["label"] for s in analysis["steps"] if s["saturation"] == "at_knee"]
    assert at_knee[0] == label  # the first step at the knee, in load order
    page = report.read_text()
    assert html.escape(analysis["overall"]["headline"], quote=False) in page
    report_steps = html_table(page, "out tok/s")
    assert report_steps[label]["saturation"] == "at_knee (the knee)"
    assert [k for k, row in report_steps.items() if "(the knee)" in row["saturation"]] == [label]
    plan = loadlab("plan", str(out), "--users", "16", timeout=120)
    assert plan.returncode == 0, plan.stderr
    said = " ".join(plan.stdout.split())  # (the console wraps long lines)
    assert (
        f"taken at the knee (where throughput stops growing with the load, the analyzer's rule), {target:g} streams."
        in said
    )

    # Throughput: one figure per step in summary.json, analysis.json, the sweep's table, the
    # report's per-step table and plan's curve (the later step of a load run twice).
    sweep_rows, plan_rows = console_table(result.stdout, "judged"), console_table(plan.stdout, "E2E mean s")
    header = next(line for line in result.stdout.splitlines() if "judged" in line and line.startswith("┃"))
    column = [c.strip() for c in header.strip("┃ ").split("┃")].index("tok/s")
    planned: dict[str, float] = {}
    for step in summary["steps"]:
        figure = step["output_tokens_per_s"]
        derived = next(s for s in analysis["steps"] if s["index"] == step["index"])["derived"]
        assert derived["output_tokens_per_s"]["value"] == pytest.approx(figure)
        assert sweep_rows[step["label"]][column] == f"{figure:.0f}"
        assert report_steps[step["label"]]["out tok/s"] == f"{figure:,.0f}"
        if step["succeeded"] >= MIN_SUCCEEDED:
            planned[f"{step['target']:g}"] = figure
    assert planned and {k: row[1] for k, row in plan_rows.items()} == {k: f"{v:.0f}" for k, v in planned.items()}


def test_diagnose_serve_starts_the_server_diagnoses_it_and_ends_it(tmp_path):
    out = tmp_path / "out"
    serve = f"{BIN / 'loadlab'} mock --ttft 0.05 --itl 0.01 --output-len 16 --port {{port}}"
    result = loadlab(
        "diagnose", "--serve", serve, "--max", "2", "--step-duration", "3", "--no-gpu",
        "--slo", "client_limited=any", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run = out / "default" / "run"
    assert (run / "analysis.json").is_file() and (out / "diagnose.html").is_file()
    log = (out / "default" / "server.log").read_text()
    assert log.splitlines()[0].startswith("$ ") and "mock" in log.splitlines()[0]
    assert "verdict: " in result.stdout and f"report: {out / 'diagnose.html'}" in result.stdout
    pid = int(re.search(r"server PID (\d+)", result.stderr).group(1))
    with pytest.raises(ProcessLookupError):  # ended by its PID
        os.kill(pid, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["http://127.0.0.1:1", "--serve", "x {port}"], "the endpoint's URL or --serve CMD"),
        ([], "the endpoint's URL or --serve CMD"),
        (["http://127.0.0.1:1", "--verify"], "--verify needs --serve CMD"),
        (["--serve", "x --port 1"], "--serve must put {port}"),
    ],
)
def test_diagnose_bad_input_is_one_line(tmp_path, args, message):
    result = loadlab("diagnose", *args, "--out", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
