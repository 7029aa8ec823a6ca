"""`loadlab summary DIR`: table, JSON, SLOs, --write, cut-off folders and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadlab.analyze.summary import write_summary
from loadlab.clock import now, process_anchor
from loadlab.config import RunConfig
from loadlab.numbers import format_number, format_value
from loadlab.store.reader import load_run
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import StepInfo
from tests.support.mock_load import mock_server
from tests.support.procs import loadlab
from tests.support.records import record
from tests.support.runs import as_killed, write_drawn_run
from tests.support.traces import write_mooncake


def write_run(folder: Path, finish: bool) -> None:
    """Five requests of one step; `finish=False` leaves the folder as a kill -9 would."""
    writer = RunWriter(folder, RunConfig(url="http://x", concurrency=[2]), process_anchor())
    t = now()
    writer.begin_step(StepInfo(0, "concurrency=2", "closed", 2, t - 1))
    writer.add_requests(
        [record(i, t - 1 + i * 0.1) for i in range(4)] + [record(9, t, error="http_5xx", status=500, token_times=[])]
    )
    writer.flush()
    if finish:
        writer.end_step(0, t + 1)
        writer.close()
        write_summary(load_run(folder))


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runs") / "finished"
    write_run(folder, finish=True)
    return folder


def test_prints_the_table_of_a_finished_run(finished: Path) -> None:
    result = loadlab("summary", str(finished))
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "concurrency=2" in line)
    assert "5/4/1" in row and "100/100/100" in row  # TTFT 100 ms of every request
    assert "errors: http_5xx 1" in result.stdout


def test_json_output_and_slo_goodput_without_touching_summary_json(finished: Path) -> None:
    before = (finished / "summary.json").read_text()
    result = loadlab("summary", str(finished), "--json", "--slo", "ttft=50")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["steps"][0]["succeeded"] == 4 and data["steps"][0]["slo_met"] == 0
    assert data["slo"]["ttft_ms"] == 50
    assert (finished / "summary.json").read_text() == before


def test_write_rewrites_summary_json(finished: Path) -> None:
    (finished / "summary.json").unlink()
    result = loadlab("summary", str(finished), "--write", "--slo", "ttft=500")
    assert result.returncode == 0, result.stderr
    assert json.loads((finished / "summary.json").read_text())["steps"][0]["slo_met"] == 4


def test_reads_a_run_cut_off_mid_run(tmp_path: Path) -> None:
    write_run(tmp_path / "cut", finish=False)
    result = loadlab("summary", str(as_killed(tmp_path / "cut")), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["cut_off"] and data["status"] == "running" and data["overall"]["sent"] == 5
    assert "cut off" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["/nonexistent/run"], "not a run folder"),
        ([".", "--slo", "ttft=fast"], "bad SLO"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = loadlab("summary", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content", ["[]", "3", "null", '"run"'])
def test_a_run_json_that_is_not_an_object_is_one_line_and_exit_2(tmp_path: Path, content: str) -> None:
    folder = tmp_path / "run"
    write_run(folder, finish=True)
    (folder / "run.json").write_text(content)
    for command in ("summary", "timeline"):
        result = loadlab(command, str(folder))
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: not a run folder") and "unreadable" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_sweeps_summary_ends_with_the_answer_of_its_steps(tmp_path: Path) -> None:
    write_drawn_run(tmp_path / "run", seed=1, targets=(1, 2, 4), n=40)
    # (drawn steps keep 2 requests in flight, so 4 users is client-limited: judged all the same here)
    result = loadlab("summary", str(tmp_path / "run"), "--slo", "ttft_p99=5s,client_limited=any")
    assert result.returncode == 0, result.stderr
    steps = json.loads(loadlab("summary", str(tmp_path / "run"), "--json").stdout)["steps"]
    one, top = steps[0], steps[-1]
    tail = result.stdout.splitlines()[-5:]
    assert tail[0] == "the answer (SLO ttft_p99=5s, client_limited=any: as given)"
    assert tail[1] == (
        f"  one user: first token in {format_value(one['ttft']['p50'], 's')}, then "
        f"{format_number(one['user_tokens_per_s']['p50'])} tokens/s (concurrency=1, medians)"
    )
    # every drawn step answers well within 5 s: the capacity is at least the top step, short of its load
    assert tail[2].startswith(
        f"  capacity: at least 4 users (the load generator delivered {format_number(top['achieved'])}) within the "
        f"SLO (beyond the measured range); at 4 users "
        f"{format_number(top['output_tokens_per_s'])} tokens/s in total, "
        f"{format_number(top['user_tokens_per_s']['p50'])} tokens/s each (median), "
        f"first token p99 {format_value(top['ttft']['p99'], 's')}"
    )
    assert tail[3].startswith("  what limits it: ") and tail[4].startswith("  try: ")
    # one step, one load: no answer; per-step objectives alone are taken (for the answer)
    write_run(tmp_path / "one", finish=True)
    assert "the answer" not in loadlab("summary", str(tmp_path / "one")).stdout


def test_a_trace_replayed_too_fast_to_measure_a_rate_shows_no_rate_in_any_reader(tmp_path: Path) -> None:
    # The probe: 60 requests of a trace replayed at 1e9x leave within milliseconds; none ends in
    # that window, so req/s and tok/s measured nothing. summary.json holds null and the reason;
    # summary, report, compare and gate say so where the figure would be, and the gate does not
    # fail a "0 tok/s": the rate is not measured (exit 2), not missed (exit 1).
    trace = write_mooncake(tmp_path / "ok.jsonl", [(i * 1.0, 50, 8, [i]) for i in range(60)])
    run = tmp_path / "run"
    with mock_server("--ttft", "0.2", "--itl", "0.02") as (url, _):
        result = loadlab(
            "run", "--url", url, "--model", "mock", "--trace", str(trace), "--trace-speed", "1e9",
            "--duration", "10", "--no-gpu", "--out", str(run), timeout=120,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    step = json.loads((run / "summary.json").read_text())["steps"][0]
    assert step["sent"] == 60 and step["succeeded"] == 60 and step["completed"] == 0
    assert step["requests_per_s"] is None and step["output_tokens_per_s"] is None
    assert step["rates_unmeasured"].startswith("no request ended in the steady window")
    note = "no rate measured (req/s, tok/s shown as –): no request ended in the steady window"
    assert note in result.stdout

    summary = loadlab("summary", str(run))
    row = next(line for line in summary.stdout.splitlines() if line.lstrip().startswith("trace"))
    assert row.split()[3:5] == ["–", "–"]  # req/s and out tok/s, after the label's two words and the counts
    assert note in summary.stdout

    gate = loadlab("gate", str(run), "--slo", "output_tps=1,ttft_p99=5s,client_limited=any")
    assert gate.returncode == 2, gate.stdout
    check = next(line for line in gate.stdout.splitlines() if "output_tps=1" in line)
    assert "error" in check and "not measured" in check and "fail" not in check and "0 tok/s" not in check

    compare = loadlab("compare", str(run), str(run))
    assert compare.returncode == 0, compare.stderr
    assert "not comparable (not measured)" in compare.stdout
    assert "not measured in the baseline: no request ended in the steady window" in compare.stdout

    page = tmp_path / "report.html"
    assert loadlab("report", str(run), "-o", str(page)).returncode == 0
    assert "Rates not measured" in page.read_text() and note in page.read_text()
