"""`loadlab diagnose` end to end. Against a server whose knee is known (the GPU twin, H100 timing
of Llama-3-8B, with an admission cap: its decode step barely grows with the batch, so throughput
grows with the users up to `--max-num-seqs` and not beyond), every place that names the knee and
the throughput must say the same: the console, analysis.json, sweep.json, the HTML report and
`loadlab plan`. Without a URL it finds the server on this host, and ends with the answer in plain
words, whose figures are the run's own."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from loadlab.analyze.answer import DEFAULT_SLO, confidence_words
from loadlab.analyze.saturation import MIN_SUCCEEDED
from loadlab.client.discovery import PORTS_ENV
from loadlab.numbers import format_number, format_value
from tests.support.mock_load import mock_server
from tests.support.procs import BIN, free_port, loadlab
from tests.support.reference_server import MODEL, start_server

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
    # the answer's line (printed whole, never wrapped)
    assert f"\n  what limits it: {analysis['overall']['headline']} (" in result.stdout
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


def test_without_a_url_it_finds_the_local_server_and_ends_with_the_answer(tmp_path):
    """The tiny reference server on a free port, probed as if it were one of the usual ones: the
    answer's figures are summary.json's for the steps it names, judged by the default SLO."""
    out, report = tmp_path / "run", tmp_path / "diagnose.html"
    with start_server(tmp_path / "server.log") as server:
        result = loadlab(
            "diagnose",
            "--max", "4", "--max-steps", "4", "--step-duration", "4", "--input-len", "32", "--output-len", "16",
            # the busy test host may strain the client; this test is about the answer
            "--slo", "client_limited=any", "--no-gpu", "--out", str(out), "--report", str(report),
            env={PORTS_ENV: f"{free_port()},{server.url.rsplit(':', 1)[1]}"},
            timeout=600,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(
        f"no URL given: found loadlab's reference server or mock at {server.url}, serving {MODEL} "
        "(from /v1/models owned_by loadlab)\n"
    )
    analysis, summary = read(out, "analysis.json"), read(out, "summary.json")
    # the server found on this host: the load generator placed beside it, the server's CPU sampled
    assert re.search(r"^the server \(.+, PID \d+\) (is on this host|shares this host's only core)", result.stdout, re.M)
    coverage = {c["source"]: c for c in read(out, "run.json")["coverage"]}
    assert coverage["host"]["ok_samples"] > 0, coverage
    lines = result.stdout.splitlines()
    start = lines.index(f"the answer (SLO {DEFAULT_SLO.replace(',', ', ')}, client_limited=any: loadlab's default "
                        "objectives; --slo sets yours)")  # fmt: skip
    said = dict(line.strip().split(": ", 1) for line in lines[start + 1 :])
    assert list(said) == ["one user", "capacity", "what limits it", "try"]  # the answer ends the output
    judged = {s["target"]: s for s in summary["steps"] if s["succeeded"] >= MIN_SUCCEEDED}  # the later of a rerun
    one = judged[1]
    assert said["one user"] == (
        f"first token in {format_value(one['ttft']['p50'], 's')}, then "
        f"{format_number(one['user_tokens_per_s']['p50'])} tokens/s (concurrency=1, medians)"
    )
    users = float(re.search(r"(\d+) users?(?: \(the load generator delivered [^)]+\))? within", said["capacity"])[1])
    held = judged[users]
    assert f"at {users:g} user{'s' if users > 1 else ''} {format_number(held['output_tokens_per_s'])} tokens/s in " \
        f"total, {format_number(held['user_tokens_per_s']['p50'])} tokens/s each (median), first token p99 " \
        f"{format_value(held['ttft']['p99'], 's')}" in said["capacity"]  # fmt: skip
    # the default's objectives hold at every judged load up to it, and break at the next one (if any)
    within = {t: s["ttft"]["p99"] <= 2 and s["user_tokens_per_s"]["p50"] >= 10 for t, s in judged.items()}
    assert all(ok for t, ok in within.items() if t <= users)
    above = [t for t in sorted(judged) if t > users]
    assert said["capacity"].startswith("at least ") == (not above)
    assert not above or f"; concurrency={above[0]:g} broke it: " in said["capacity"]
    overall = analysis["overall"]
    assert said["what limits it"].startswith(f"{overall['headline']} ({confidence_words(overall['confidence'])}")
    assert said["try"] == (overall["advice"][0] if overall["advice"] else "no change named for this verdict")
    # the same block tops the report
    page = report.read_text()
    sections = re.findall(r'<section id="([^"]+)"', page)
    assert sections[:2] == ["answer", "run"]
    top = page[page.index('<section id="answer"') : page.index('<section id="run"')]
    for label, text in said.items():
        assert f"<td><b>{label}</b></td><td>{html.escape(text)}</td>" in top


def test_without_a_url_none_or_several_servers_are_one_line_asking_for_one(tmp_path):
    nothing = str(free_port())
    none = loadlab("diagnose", "--max", "1", env={PORTS_ENV: nothing}, timeout=60)
    assert none.returncode == 2 and none.stderr.count("\n") == 1, none.stderr
    assert none.stderr.startswith(f"error: no URL given and no LLM server answered on 127.0.0.1 at {nothing} (given)")
    with mock_server() as (one, _), mock_server() as (two, _):
        ports = ",".join(u.rsplit(":", 1)[1] for u in (one, two))
        several = loadlab("diagnose", "--max", "1", "--out", str(tmp_path / "run"), env={PORTS_ENV: ports}, timeout=60)
    assert several.returncode == 2 and several.stderr.count("\n") == 1, several.stderr
    assert several.stderr.startswith("error: no URL given and 2 servers answered") and one in several.stderr
    assert not (tmp_path / "run").exists()  # nothing was run


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
        (["http://127.0.0.1:1", "--serve", "x {port}"], "the endpoint's URL or --serve CMD to start it, not both"),
        (["http://127.0.0.1:1", "--verify"], "--verify needs --serve CMD"),
        (["--serve", "x --port 1"], "--serve must put {port}"),
    ],
)
def test_diagnose_bad_input_is_one_line(tmp_path, args, message):
    result = loadlab("diagnose", *args, "--out", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
